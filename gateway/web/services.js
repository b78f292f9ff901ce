// Live services: GET /v1/services every 2 s, drawn as a table that updates in place.

import { bus } from "./api.js";
import { ago, normalizeServices, statusClass, toEpochSeconds } from "./model.js";
import * as presence from "./presence.js";
import * as requestView from "./request.js";

const POLL_MS = 2000;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let rows = [];
let lastFetch = undefined;
let stale = false; // the gateway has lost the bus: the list is as it was at staleSince
let staleSince = undefined;
let failing = false;
const seen = new Set();

/** The groups last seen, for the request form's suggestions. */
export function groups() {
  return rows.map((row) => row.group);
}

/** The commands a group's instances announce in their heartbeats ([] if unknown). */
export function commandsOf(group) {
  return rows.find((row) => row.group === group)?.commands ?? [];
}

/** What a command declares ({args, answer, summary} JSON Schemas), or undefined. */
export function schemaOf(group, cmd) {
  const schemas = rows.find((row) => row.group === group)?.detail?.schemas;
  return schemas && typeof schemas === "object" ? schemas[cmd] : undefined;
}

export function start(theShell) {
  shell = theShell;
  poll();
  setInterval(poll, POLL_MS);
  setInterval(draw, 1000);
  presence.start(); // who subscribes, under the services
}

export function show() {
  draw();
}

export function keyChanged() {
  failing = false; // a new key deserves its own verdict
  poll();
  presence.keyChanged();
}

async function poll() {
  try {
    const body = await bus.services();
    rows = normalizeServices(body);
    stale = Boolean(body?.stale);
    staleSince = toEpochSeconds(body?.as_of);
    lastFetch = Date.now() / 1000;
    if (failing) shell.clearError("services");
    failing = false;
  } catch (exc) {
    if (!failing) shell.error(exc, "services");
    failing = true;
  }
  draw();
  fillGroupList();
}

function draw() {
  const body = $("#services-body");
  const now = Date.now() / 1000;
  const wanted = new Set(rows.map((row) => row.group));
  for (const tr of [...body.rows]) {
    if (!wanted.has(tr.dataset.group)) tr.remove();
  }
  rows.forEach((row, index) => {
    let tr = [...body.rows].find((candidate) => candidate.dataset.group === row.group);
    if (!tr) {
      tr = newRow(row.group);
      if (!seen.has(row.group)) tr.classList.add("fresh");
      seen.add(row.group);
    }
    if (body.rows[index] !== tr) body.insertBefore(tr, body.rows[index] || null);
    const live = row.instances - row.silent;
    const instances = tr.querySelector(".instances");
    instances.textContent = row.silent ? `${live} (+${row.silent} silent)` : String(row.instances);
    instances.title = row.members
      .map((m) => `${m.id} on ${m.host || "?"}: ${m.silent ? "silent" : m.status}, last heartbeat ${ago(m.last_seen, now)}`)
      .join("\n");
    const status = tr.querySelector(".status");
    // A list kept while the bus is away says nothing about the services now (PROTOCOL.md 9.6).
    status.textContent = stale ? `${row.status}?` : row.silent ? `${row.status} · ${row.silent} silent` : row.status;
    status.dataset.state = stale ? "unknown" : row.silent ? "warn" : statusClass(row.status, row.instances);
    status.title = stale
      ? `as of ${staleSince ? new Date(staleSince * 1000).toLocaleTimeString() : "the loss of the bus"}: the gateway cannot hear heartbeats now`
      : row.silent
        ? `${row.silent} instance(s) sent no heartbeat for more than 1.5 intervals: they may be gone`
        : "";
    tr.classList.toggle("stale", stale);
    tr.dataset.silent = String(row.silent);
    tr.querySelector(".commands").textContent = row.commands.join(" ");
    const cell = tr.querySelector(".seen");
    cell.textContent = ago(row.lastSeen, now);
    cell.title = row.lastSeen ? new Date(row.lastSeen * 1000).toISOString() : "";
  });
  $("#services-empty").hidden = rows.length > 0 || lastFetch === undefined;
  const updated = $("#services-updated");
  updated.dataset.stale = String(stale);
  if (lastFetch === undefined) updated.textContent = "waiting for the gateway…";
  else if (stale) {
    updated.textContent = `stale: the bus is away since ${ago(staleSince, now)}; last known list`;
  } else updated.textContent = `updated ${ago(lastFetch, now)}`;
}

function newRow(group) {
  const tr = document.createElement("tr");
  tr.dataset.group = group;
  tr.innerHTML = `<td class="group"><a href="#request"></a></td><td class="num instances"></td>
    <td><span class="pill small status"></span></td><td class="seen"></td>
    <td class="hide-narrow commands"></td><td class="hide-narrow"><button type="button" class="use">Request…</button></td>`;
  const link = tr.querySelector(".group a");
  link.textContent = group;
  link.title = `Send a request to ${group}`;
  const use = (event) => {
    event.preventDefault();
    requestView.prefill({ group });
    shell.go("request");
  };
  link.addEventListener("click", use);
  tr.querySelector("button.use").addEventListener("click", use);
  return tr;
}

function fillGroupList() {
  const list = $("#groups-list");
  const wanted = groups().join("\n");
  if (list.dataset.groups === wanted) return;
  list.dataset.groups = wanted;
  list.innerHTML = groups()
    .map((group) => `<option value="${attr(group)}"></option>`)
    .join("");
}

function attr(value) {
  const escapes = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
  return String(value).replace(/[&<>"]/g, (c) => escapes[c]);
}
