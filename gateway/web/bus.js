// Bus: who is on the bus and how the broker is, for a manager (what Centrifugo's admin UI and
// nats-top show). GET /v1/admin/status and /v1/admin/connections every 2 s while shown, the
// journal's newest records on demand; actions: disconnect a link, drain a group (each asks to
// be clicked twice). PROTOCOL.md 9.8: the gateway must be a manager on the bus, and with
// authentication on the key must reach every group and type.

import { bus, explain } from "./api.js";
import { ago } from "./model.js";

const POLL_MS = 2000;
const JOURNAL_LIMIT = 50;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let visible = false;
let timer = null;
let refused = false;

export function start(theShell) {
  shell = theShell;
  $("#journal-refresh").addEventListener("click", loadJournal);
  $("#journal-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadJournal();
  });
}

export function show() {
  visible = true;
  refresh();
  loadJournal();
  clearInterval(timer);
  timer = setInterval(refresh, POLL_MS);
}

export function hide() {
  visible = false;
  clearInterval(timer);
  timer = null;
}

export function keyChanged() {
  refused = false;
  if (visible) show();
}

async function refresh() {
  let status;
  let links;
  try {
    [status, links] = await Promise.all([bus.admin.status(), bus.admin.connections()]);
  } catch (exc) {
    showRefusal(exc);
    return;
  }
  if (refused) shell.clearError("bus-admin");
  refused = false;
  $("#bus-refused").hidden = true;
  $("#bus-content").hidden = false;
  drawHealth(status);
  drawLinks(links.connections ?? []);
  drawGroups(status.groups ?? {});
  $("#bus-updated").textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
}

function showRefusal(exc) {
  const text = exc.status === 403 || exc.status === 401 ? explain(exc) : `Cannot read the bus: ${explain(exc)}`;
  $("#bus-refused").textContent = text;
  $("#bus-refused").hidden = false;
  if (!refused && visible) shell.error(exc, "bus-admin");
  refused = true;
}

function card(label, value, title = "", state = "") {
  const item = document.createElement("div");
  item.className = "health-card";
  if (state) item.dataset.state = state;
  item.dataset.figure = label;
  item.title = title;
  const name = document.createElement("span");
  name.textContent = label;
  const figure = document.createElement("strong");
  figure.textContent = String(value);
  item.append(name, figure);
  return item;
}

function drawHealth(status) {
  const journal = status.journal;
  const uptime = Number(status.uptimeS ?? 0);
  const cards = [
    card("uptime", uptime >= 3600 ? `${(uptime / 3600).toFixed(1)} h` : uptime >= 60 ? `${Math.round(uptime / 60)} min` : `${Math.round(uptime)} s`),
    card("connections", `${status.connections ?? "?"} / ${status.maxConnections ?? "?"}`),
    card("routed", status.routed ?? 0, "messages routed since start"),
    card("dropped", status.dropped ?? 0, "messages nobody could take", status.dropped ? "warn" : ""),
    card("no responders", status.noResponders ?? 0, "requests to a group without a consumer", status.noResponders ? "warn" : ""),
    card("slow consumers", status.slowConsumers ?? 0, "links evicted for not reading", status.slowConsumers ? "bad" : ""),
    card("queued", `${status.queuedBytes ?? 0} B`, "output waiting in user-space queues"),
    card("refused auth", status.refusedAuth ?? 0, "connects refused for a wrong secret", status.refusedAuth ? "warn" : ""),
  ];
  if (journal) {
    const errors = Number(journal.errors ?? 0);
    cards.push(
      card("journal", `${journal.appended ?? 0} records`, `${journal.directory}\nsegment ${journal.segment ?? "-"}\nfsyncs ${journal.fsyncs ?? 0}, skipped ${journal.skipped ?? 0}`, errors ? "bad" : "ok"),
      card("journal errors", errors, "failed appends: see the broker's log", errors ? "bad" : "ok"),
    );
  } else {
    cards.push(card("journal", "off", "start the broker with --journal DIR to record the traffic"));
  }
  $("#bus-health").replaceChildren(...cards);
}

/** "12 msg / 3.4 kB": what a link moved one way. */
function moved(messages, bytes) {
  if (messages === undefined) return "-";
  const size = bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : bytes >= 1e3 ? `${(bytes / 1e3).toFixed(1)} kB` : `${bytes} B`;
  return `${messages} msg / ${size}`;
}

function drawLinks(links) {
  const body = $("#bus-links-body");
  body.replaceChildren(
    ...links.map((link) => {
      const tr = document.createElement("tr");
      tr.dataset.link = String(link.link);
      tr.dataset.office = link.office ?? "";
      const cells = [
        `#${link.link}`,
        link.office ?? "(handshake)",
        link.peer ?? "?",
        (link.groups ?? []).join(" ") || "-",
        (link.patterns ?? []).join(" ") || "-",
        moved(link.messagesIn, link.bytesIn),
        moved(link.messagesOut, link.bytesOut),
        `${link.queuedBytes ?? 0} B`,
      ];
      for (const [index, text] of cells.entries()) {
        const td = document.createElement("td");
        td.textContent = text;
        td.className = ["num", "office", "peer", "groups", "patterns", "num in", "num out", "num queued"][index];
        tr.appendChild(td);
      }
      const action = document.createElement("td");
      action.appendChild(armedButton("Disconnect", `disconnect link #${link.link}`, `disconnect ${link.link}`, () => bus.admin.disconnect(link.link)));
      tr.appendChild(action);
      if (link.closing) tr.classList.add("stale");
      return tr;
    }),
  );
  $("#bus-links-empty").hidden = links.length > 0;
}

function drawGroups(groups) {
  const names = Object.keys(groups).sort();
  $("#bus-groups-body").replaceChildren(
    ...names.map((name) => {
      const tr = document.createElement("tr");
      tr.dataset.group = name;
      const group = document.createElement("td");
      group.textContent = name;
      const consumers = document.createElement("td");
      consumers.className = "num consumers";
      consumers.textContent = String(groups[name]);
      const action = document.createElement("td");
      action.appendChild(armedButton("Drain", `stop sending new requests to ${name}`, `drain ${name}`, () => bus.admin.drain(name)));
      tr.append(group, consumers, action);
      return tr;
    }),
  );
}

/** When each armed action's arming ends (ms): the tables are redrawn every 2 s, and a button
 * armed just before a redraw must still be armed after it (its second click acts). */
const armedUntil = new Map();

/** A button that runs `action` (named `path`) on its second click (the first one asks
 * "sure?"), disarmed after 4 s; its arming outlives a redraw of its table. */
function armedButton(label, what, path, action) {
  const button = document.createElement("button");
  button.type = "button";
  button.title = what;
  const show = (armed) => {
    button.dataset.armed = String(armed);
    button.textContent = armed ? `${label}: sure?` : label;
  };
  const armed = () => (armedUntil.get(path) ?? 0) > Date.now();
  const disarmLater = () =>
    setTimeout(() => {
      if (!armed()) show(false);
    }, (armedUntil.get(path) ?? 0) - Date.now() + 10);
  show(armed());
  if (armed()) disarmLater();
  button.addEventListener("click", async () => {
    if (!armed()) {
      armedUntil.set(path, Date.now() + 4000);
      show(true);
      disarmLater();
      return;
    }
    armedUntil.delete(path);
    button.disabled = true;
    await act(path, action);
  });
  return button;
}

async function act(path, action) {
  try {
    const body = await action();
    $("#bus-action").textContent = `${path.split(" ")[0]}: ${JSON.stringify(body)}`;
  } catch (exc) {
    shell.error(exc, "bus-admin");
  }
  refresh();
}

async function loadJournal() {
  const group = $("#journal-group").value.trim();
  let body;
  try {
    body = await bus.admin.journal({ limit: JOURNAL_LIMIT, group: group || undefined });
  } catch (exc) {
    $("#journal-state").textContent = explain(exc);
    $("#bus-journal-body").replaceChildren();
    return;
  }
  const records = body.records ?? [];
  const now = Date.now() / 1000;
  $("#journal-state").textContent = `${records.length} newest records${group ? ` of ${group}` : ""}`;
  $("#bus-journal-body").replaceChildren(
    ...records.map((record) => {
      const tr = document.createElement("tr");
      tr.dataset.typ = record.TYP ?? "";
      const cells = [
        new Date(record.ts * 1000).toLocaleTimeString([], { hour12: false }),
        record.TYP ?? "",
        record.GRP ?? "",
        record.CMD ?? "",
        [record.RCD, record.MSG].filter((v) => v !== undefined && v !== null && v !== "").join(" "),
        `${record.size} B`,
      ];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = String(text);
        tr.appendChild(td);
      }
      tr.title = `${record.MID ?? ""} ${ago(record.ts, now)}${record.RID ? `, answers ${record.RID}` : ""}`;
      return tr;
    }),
  );
}
