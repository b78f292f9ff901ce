// Subscribe: a live, pausable, filterable message list, from the Object System WebSocket (/ws,
// routing/subscribe with receive_mode, types and subscription rules; seed 003) or from the bus
// events stream (GET /v1/subscribe?types=..., Server-Sent Events).

import { publish, urlWithKey, wsUrl } from "./api.js";
import { startParams } from "./history.js";
import { describeBusMessage, describeObject, splitList } from "./model.js";

const MAX_ROWS = 1000;
// Reconnection of /ws after a close the user did not ask for: 0.5 s, doubling, at most 10 s.
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 10000;
const POLICY_VIOLATION = 1008;
const SSE_EVENT_NAMES = ["message", "event", "publish", "msg"];
const $ = (selector) => document.querySelector(selector);

let shell = null;
let socket = null;
let source = null;
let wsRequest = null; // the routing/subscribe sent on every (re)connection
let retryTimer = null;
let retryDelay = RETRY_FIRST_MS;
let sseTypes = null; // the types of the SSE subscription, kept across its reopenings
let lastStream = null;
let attempt = 0;
let everSubscribed = false;
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
  if (socket || source || wsRequest) subscribe();
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
  clearTimeout(retryTimer);
  retryTimer = null;
  wsRequest = null;
  sseTypes = null;
  if (socket) {
    const old = socket;
    socket = null;
    old.close(1000, "console stopped");
  }
  if (source) {
    source.close();
    source = null;
  }
  if (reason) {
    system(`subscription ${reason}`);
    setState("idle", "not subscribed");
  }
}

// --- Object System over /ws -------------------------------------------------------------

function subscribeWs() {
  const types = splitList($("#sub-types").value);
  const rules = splitList($("#sub-rules").value);
  const request = {
    event: "routing/subscribe",
    id: `console-${Date.now().toString(36)}`,
    receive_mode: $("#sub-mode").value,
    types: types.length === 0 || (types.length === 1 && types[0] === "all") ? "all" : types,
  };
  if (types.length === 1 && types[0] === "none") request.types = "none";
  if (rules.length) request.subscriptions = rules;
  wsRequest = request;
  retryDelay = RETRY_FIRST_MS;
  attempt = 0;
  everSubscribed = false;
  openWs();
}

/** Open /ws and send `wsRequest` once open; a close the user did not ask for retries. */
function openWs() {
  retryTimer = null;
  const request = wsRequest;
  setState("warn", attempt ? `reconnecting (attempt ${attempt})…` : "connecting…");
  const ws = new WebSocket(wsUrl("/ws"));
  ws.binaryType = "arraybuffer";
  socket = ws;
  ws.addEventListener("open", () => {
    if (socket !== ws) return;
    ws.send(JSON.stringify(request));
    system(`${attempt ? "re-sent" : "sent"} routing/subscribe ${JSON.stringify(request)}`);
    setState("warn", "subscribing…");
  });
  ws.addEventListener("message", (event) => {
    if (socket !== ws) return;
    const object = decodeObject(event.data);
    if (object.meta.event === "routing/subscribe/reply") {
      const again = attempt > 0;
      everSubscribed = true;
      attempt = 0;
      retryDelay = RETRY_FIRST_MS;
      const id = object.meta["routing-id"] ?? "?";
      setState("ok", `subscribed as ${id}${again ? " (reconnected)" : ""}`);
      shell.clearError("subscribe");
    }
    add(describeObject(object.meta, object.payload));
  });
  ws.addEventListener("close", (event) => closed(ws, event));
  ws.addEventListener("error", () => {
    if (socket === ws) setState("warn", "connection failed");
  });
}

function closed(ws, event) {
  if (socket !== ws) return;
  socket = null;
  const why = event.reason ? `: ${event.reason}` : "";
  if (event.code === POLICY_VIOLATION && !everSubscribed) {
    // Refused before ever subscribing (the API key, a rate limit): retrying will not help.
    wsRequest = null;
    setState("bad", `refused (${event.code})`);
    shell.error(`The gateway refused the /ws connection (code ${event.code}${why}): check the API key.`, "subscribe");
    return;
  }
  attempt += 1;
  const delay = retryDelay;
  retryDelay = Math.min(retryDelay * 2, RETRY_MAX_MS);
  const seconds = (delay / 1000).toFixed(1);
  setState("warn", `closed (${event.code}), retry in ${seconds} s`);
  if (attempt === 1) {
    add({
      kind: "disconnect",
      label: "connection closed",
      sender: "",
      summary: `/ws closed (code ${event.code}${why}); reconnecting and subscribing again`,
      meta: { code: event.code, reason: event.reason },
    });
  }
  shell.error(`The /ws connection closed (code ${event.code}${why}); reconnecting (attempt ${attempt}, in ${seconds} s).`, "subscribe");
  retryTimer = setTimeout(openWs, delay);
}

/**
 * An Object System object from a WebSocket message: a text message is the JSON metadata; a
 * binary message is JSON metadata, a NUL byte, then `size` payload bytes (seed 003).
 */
function decodeObject(data) {
  if (typeof data === "string") return { meta: parseMeta(data), payload: undefined };
  const bytes = new Uint8Array(data);
  const nul = bytes.indexOf(0);
  const head = new TextDecoder().decode(nul >= 0 ? bytes.subarray(0, nul) : bytes);
  const meta = parseMeta(head);
  if (nul < 0 || nul + 1 >= bytes.length) return { meta, payload: undefined };
  const body = bytes.subarray(nul + 1);
  const type = String(meta.type || "");
  // Bus events over the bridge are content objects of type bus/<major.minor> with the event's
  // JSON payload (PROTOCOL.md 7.2): draw them as JSON, not as a byte count.
  const textual = /^text\/|json|xml|^bus\//.test(type);
  const payload = textual
    ? compactJson(new TextDecoder().decode(body))
    : `<${body.length} bytes ${type || "binary"}>`;
  return { meta, payload };
}

function compactJson(text) {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}

function parseMeta(text) {
  try {
    const meta = JSON.parse(text);
    return meta && typeof meta === "object" ? meta : { value: meta };
  } catch {
    return { unparsed: text };
  }
}

// --- Bus events over SSE ----------------------------------------------------------------

function subscribeSse(start = {}) {
  const types = sseTypes ?? splitList($("#sub-types").value).join(",");
  if (!types) {
    shell.error("Enter at least one type to subscribe to, e.g. sensor.* (major.minor).", "subscribe");
    return;
  }
  sseTypes = types;
  setState("warn", "connecting…");
  const stream = new EventSource(urlWithKey("/v1/subscribe", { types, ...start }));
  source = stream;
  lastStream = stream;
  stream.addEventListener("open", () => {
    if (source !== stream) return;
    setState("ok", `subscribed to ${types}`);
    system(`listening to bus events ${types}`);
    shell.clearError("subscribe");
  });
  for (const name of SSE_EVENT_NAMES) {
    stream.addEventListener(name, (event) => {
      if (source !== stream) return;
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        data = event.data;
      }
      add(describeBusMessage(data, name === "message" ? undefined : name));
    });
  }
  stream.addEventListener("error", (event) => {
    if (source !== stream) return;
    if (event.data) {
      // A named "error" event from the gateway (e.g. overflow: this client read too slowly).
      add({ kind: "disconnect", label: "error", sender: "gateway", summary: event.data, meta: {} });
      return;
    }
    const at = new Date().toLocaleTimeString([], { hour12: false });
    if (stream.readyState === EventSource.CLOSED) {
      // The browser gives up on a refused stream (an HTTP error): ask the gateway why.
      source = null;
      setState("bad", `stream closed at ${at}`);
      system(`the event stream closed at ${at}`);
      explainRefusal(types, stream);
    } else {
      setState("warn", `stream closed at ${at}, reconnecting…`);
      system(`the event stream closed at ${at}; the browser reconnects (Last-Event-ID)`);
    }
  });
}

/** Why the gateway refused the stream: retry while the bus is away, say so when refused. */
async function explainRefusal(types, closed) {
  const controller = new AbortController();
  let response;
  try {
    response = await fetch(urlWithKey("/v1/subscribe", { types }), { signal: controller.signal });
  } catch {
    response = null;
  }
  controller.abort(); // the status is all we wanted; the stream itself is reopened below
  if (source !== null || sseTypes !== types || closed !== lastStream) return; // superseded
  const status = response ? response.status : 0;
  if (status === 200 || status === 0 || status === 503) {
    const why = status === 503 ? "the gateway is not connected to the bus" : "the gateway is unreachable";
    if (status !== 200) setState("warn", `waiting: ${why}; retrying in 2 s`);
    retryTimer = setTimeout(() => {
      if (sseTypes === types && source === null) subscribeSse();
    }, status === 200 ? 0 : 2000);
    return;
  }
  const body = await response.json().catch(() => ({}));
  const message = body?.error?.message ?? `HTTP ${status}`;
  setState("bad", `refused (HTTP ${status})`);
  sseTypes = null;
  shell.error(`The gateway refused the event stream: ${message}`, "subscribe");
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
    await publish(type, payload);
    $("#pub-result").textContent = `published on ${type} at ${new Date().toLocaleTimeString()}`;
  } catch (exc) {
    $("#pub-result").textContent = "failed";
    shell.error(exc, "subscribe");
  }
}
