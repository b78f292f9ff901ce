// Subscribe: a live, pausable, filterable message list, from the Object System WebSocket (/ws,
// routing/subscribe with receive_mode, types and subscription rules; seed 003) or from the bus
// events stream (GET /v1/subscribe?types=..., Server-Sent Events).

import { bus, explain } from "./api.js";
import { startParams } from "./history.js";
import { describeBusMessage, describeObject, splitList } from "./model.js";

const MAX_ROWS = 1000;
// Reconnection after a loss the user did not ask for: 0.5 s, doubling, at most 10 s (with jitter).
const RECONNECT = { initial: 500, max: 10000 };
const $ = (selector) => document.querySelector(selector);

let shell = null;
let socket = null; // the Object System connection (the client's Objects), while subscribed
let source = null; // the SSE subscription (the client's Subscription)
let paused = false;
let held = [];
let total = 0;
let nextId = 1;

export function start(theShell) {
  shell = theShell;
  $("#sub-form").addEventListener("submit", (event) => {
    event.preventDefault();
    subscribe();
  });
  $("#sub-stop").addEventListener("click", () => stop("stopped"));
  $("#sub-source").addEventListener("change", showSourceFields);
  $("#sub-pause").addEventListener("click", togglePause);
  $("#sub-clear").addEventListener("click", clear);
  $("#sub-filter").addEventListener("input", applyFilter);
  $("#pub-form").addEventListener("submit", (event) => {
    event.preventDefault();
    publishFromForm();
  });
  showSourceFields();
}

export function keyChanged() {
  if (socket || source) subscribe();
}

function showSourceFields() {
  const sse = $("#sub-source").value === "sse";
  $("#sub-form").classList.toggle("source-sse", sse);
  $("#pub-form").classList.toggle("source-sse", sse);
  $("#sub-types").placeholder = sse ? "sensor.*, demo.events" : "all  (or: text/plain, image/png)";
}

function setState(state, text) {
  const pill = $("#sub-state");
  pill.dataset.state = state;
  pill.textContent = text;
  const active = state !== "idle" && state !== "bad";
  $("#sub-stop").disabled = !active;
  $("#sub-pause").disabled = !active && !paused;
}

async function subscribe() {
  stop(null);
  if ($("#sub-source").value !== "sse") return subscribeWs();
  const types = splitList($("#sub-types").value).join(",");
  // history or the last values first (history.js); a reopened stream resumes instead
  subscribeSse(types ? await startParams(types, add, system) : {});
}

function stop(reason) {
  if (socket) {
    const old = socket;
    socket = null;
    old.close();
  }
  if (source) {
    const old = source;
    source = null;
    old.close();
  }
  if (reason) {
    system(`subscription ${reason}`);
    setState("idle", "not subscribed");
  }
}

const clock = () => new Date().toLocaleTimeString([], { hour12: false });

// --- Object System over /ws -------------------------------------------------------------

function subscribeWs() {
  const types = splitList($("#sub-types").value);
  const rules = splitList($("#sub-rules").value);
  let wanted = types.length === 0 || (types.length === 1 && types[0] === "all") ? "all" : types;
  if (types.length === 1 && types[0] === "none") wanted = "none";
  const objects = bus.openObjects({
    receive: $("#sub-mode").value,
    types: wanted,
    ...(rules.length ? { rules } : {}),
    reconnect: RECONNECT,
  });
  socket = objects;
  setState("warn", "connecting…");
  objects.on("state", (change) => {
    if (socket !== objects) return;
    if (change.state === "open") {
      const again = change.attempt > 0;
      system(`${again ? "re-sent" : "sent"} routing/subscribe ${JSON.stringify(objects.subscribeRequest)}`);
      setState("ok", `subscribed as ${objects.routingId ?? "?"}${again ? " (reconnected)" : ""}`);
      shell.clearError("subscribe");
    } else if (change.state === "reconnecting") {
      const seconds = (change.delay / 1000).toFixed(1);
      const why = change.error?.message ?? "closed";
      setState("warn", `closed, retry in ${seconds} s`);
      if (change.attempt === 1) {
        add({ kind: "disconnect", label: "connection closed", sender: "", summary: `${why}; reconnecting and subscribing again`, meta: {} });
      }
      shell.error(`The /ws connection closed (${why}); reconnecting (attempt ${change.attempt}, in ${seconds} s).`, "subscribe");
    } else if (change.state === "closed" && change.error) {
      socket = null;
      setState("bad", `refused (${change.error.status || change.error.code})`);
      shell.error(`The gateway refused the /ws connection (${explain(change.error)}): check the API key.`, "subscribe");
    }
  });
  objects.on("object", (object) => {
    if (socket === objects) add(describeObject(object.meta, shown(object)));
  });
}

/**
 * A payload as the list shows it: bus events over the bridge are content objects of type
 * bus/<major.minor> with the event's JSON payload (PROTOCOL.md 7.2), drawn as JSON like any
 * text; other bytes as their count.
 */
function shown(object) {
  const bytes = object.payload;
  if (!bytes || bytes.length === 0) return undefined;
  const type = object.type ?? "";
  if (!/^text\/|json|xml|^bus\//.test(type)) return `<${bytes.length} bytes ${type || "binary"}>`;
  const text = object.text();
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}

// --- Bus events over SSE ----------------------------------------------------------------

function subscribeSse(start = {}) {
  const types = splitList($("#sub-types").value);
  if (!types.length) {
    shell.error("Enter at least one type to subscribe to, e.g. sensor.* (major.minor).", "subscribe");
    return;
  }
  const named = types.join(",");
  const sub = bus.subscribe(types, { reconnect: RECONNECT, since: start.since, last: start.last === "1" });
  source = sub;
  setState("warn", "connecting…");
  sub.on("state", (change) => {
    if (source !== sub) return;
    if (change.state === "open") {
      setState("ok", `subscribed to ${named}`);
      system(`listening to bus events ${named}${change.attempt ? " again (resumed with Last-Event-ID)" : ""}`);
      shell.clearError("subscribe");
    } else if (change.state === "reconnecting") {
      const at = clock();
      const why = change.error?.status === 503 ? "the gateway is not connected to the bus" : (change.error?.message ?? "closed");
      setState("warn", `stream closed at ${at}, reconnecting…`);
      system(`the event stream closed at ${at} (${why}); reconnecting with Last-Event-ID`);
    } else if (change.state === "closed" && change.error) {
      source = null;
      setState("bad", `refused (HTTP ${change.error.status})`);
      shell.error(`The gateway refused the event stream: ${change.error.message}`, "subscribe");
    }
  });
  sub.on("event", (event) => {
    if (source === sub) add(describeBusMessage({ type: event.type, header: event.header, payload: event.payload }));
  });
  sub.on("notice", (text) => {
    // The gateway's words on the stream (it is shutting down; this reader fell behind).
    if (source === sub) add({ kind: "disconnect", label: "gateway", sender: "gateway", summary: text, meta: {} });
  });
}

// --- The message list -------------------------------------------------------------------

function system(text) {
  add({ kind: "system", label: "console", sender: "", summary: text, meta: {} });
}

function add(row) {
  total += 1;
  if (paused) {
    held.push(row);
    if (held.length > MAX_ROWS) held.shift();
    $("#sub-pause").textContent = `Resume (${held.length} new)`;
  } else {
    draw(row);
  }
  updateCount();
}

function draw(row) {
  const list = $("#messages");
  const item = document.createElement("li");
  item.className = `message kind-${row.kind}`;
  item.dataset.kind = row.kind;
  item.dataset.id = String(nextId++);
  const when = span("when", new Date().toLocaleTimeString([], { hour12: false }));
  const badge = span("badge", row.kind);
  const label = span("label", row.label);
  label.title = row.label;
  if (row.sender) label.appendChild(span("from", `from ${row.sender}`));
  const summary = span("summary", row.summary);
  item.title = JSON.stringify(row.meta);
  item.append(when, badge, label, summary);
  item.hidden = !matches(item);
  const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
  list.appendChild(item);
  while (list.children.length > MAX_ROWS) list.firstElementChild.remove();
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function span(className, text) {
  const node = document.createElement("span");
  node.className = className;
  node.textContent = text;
  return node;
}

function togglePause() {
  paused = !paused;
  const button = $("#sub-pause");
  button.textContent = paused ? "Resume (0 new)" : "Pause";
  button.setAttribute("aria-pressed", String(paused));
  if (!paused) {
    const rows = held;
    held = [];
    for (const row of rows) draw(row);
  }
  updateCount();
}

function clear() {
  $("#messages").innerHTML = "";
  held = [];
  total = 0;
  if (paused) $("#sub-pause").textContent = "Resume (0 new)";
  updateCount();
}

function matches(item) {
  const wanted = $("#sub-filter").value.trim().toLowerCase();
  return !wanted || item.textContent.toLowerCase().includes(wanted);
}

function applyFilter() {
  for (const item of $("#messages").children) item.hidden = !matches(item);
  updateCount();
}

function updateCount() {
  const list = $("#messages");
  const shown = [...list.children].filter((item) => !item.hidden).length;
  const filtered = shown === list.children.length ? "" : ` (${shown} match the filter)`;
  const heldText = held.length ? `, ${held.length} held while paused` : "";
  $("#sub-count").textContent = `${list.children.length} messages${filtered}${heldText}`;
}

// --- Publish --------------------------------------------------------------------------

async function publishFromForm() {
  const type = $("#pub-type").value.trim();
  let payload;
  try {
    payload = JSON.parse($("#pub-payload").value || "{}");
  } catch (exc) {
    $("#pub-payload").classList.add("invalid");
    $("#pub-result").textContent = `not JSON: ${exc.message}`;
    return;
  }
  $("#pub-payload").classList.remove("invalid");
  try {
    await bus.publish(type, payload);
    $("#pub-result").textContent = `published on ${type} at ${new Date().toLocaleTimeString()}`;
  } catch (exc) {
    $("#pub-result").textContent = "failed";
    shell.error(exc, "subscribe");
  }
}
