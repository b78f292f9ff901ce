// Live services: GET /v1/services every 2 s, drawn as a table that updates in place.

import { getJson } from "./api.js";
import { ago, normalizeServices, statusClass } from "./model.js";
import * as requestView from "./request.js";

const POLL_MS = 2000;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let rows = [];
let lastFetch = undefined;
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

export function start(theShell) {
  shell = theShell;
  poll();
  setInterval(poll, POLL_MS);
  setInterval(draw, 1000);
}

export function show() {
  draw();
}

export function keyChanged() {
  failing = false; // a new key deserves its own verdict
  poll();
}

async function poll() {
  try {
    rows = normalizeServices(await getJson("/v1/services"));
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
    tr.querySelector(".instances").textContent = String(row.instances);
    const status = tr.querySelector(".status");
    status.textContent = row.status;
    status.dataset.state = statusClass(row.status, row.instances);
    tr.querySelector(".commands").textContent = row.commands.join(" ");
    const cell = tr.querySelector(".seen");
    cell.textContent = ago(row.lastSeen, now);
    cell.title = row.lastSeen ? new Date(row.lastSeen * 1000).toISOString() : "";
  });
  $("#services-empty").hidden = rows.length > 0 || lastFetch === undefined;
  $("#services-updated").textContent =
    lastFetch === undefined ? "waiting for the gateway…" : `updated ${ago(lastFetch, now)}`;
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
