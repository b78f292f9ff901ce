// Send a request: POST /v1/request/{group} with Accept: application/x-ndjson, every response
// drawn as it streams in; recent requests kept in localStorage so one can be sent again.

import { bus, BusgateError } from "./api.js";
import { classifyResponse, formatMs, outcomeSummary } from "./model.js";

const RECENT_STORAGE = "busgate.recentRequests";
const RECENT_MAX = 20;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let inflight = null;
let commandsOf = () => [];
let schemaOf = () => undefined;
let shownSchema = "null";

/** Where the CMD suggestions come from: a function group -> command names. */
export function setCommandSource(source) {
  commandsOf = source;
}

/** Where the commands' schemas come from: a function (group, cmd) -> {args, answer, summary}. */
export function setSchemaSource(source) {
  schemaOf = source;
}

/** One input per argument the command's schema names, kept in step with the JSON box. */
function describeCommand() {
  const schema = schemaOf($("#req-group").value.trim(), $("#req-cmd").value.trim());
  // The same command again (a change event as focus moves to a field): keep the fields, so the
  // one being focused is not replaced under the user.
  const key = JSON.stringify(schema ?? null);
  if (key === shownSchema) return;
  shownSchema = key;
  const doc = $("#req-doc");
  doc.textContent = schema?.summary ?? "";
  doc.hidden = !schema?.summary;
  const fieldset = $("#req-fields");
  for (const old of fieldset.querySelectorAll("label")) old.remove();
  const properties = schema?.args?.properties;
  const names = properties && typeof properties === "object" ? Object.keys(properties) : [];
  fieldset.hidden = names.length === 0;
  if (!names.length) return;
  const required = new Set(Array.isArray(schema.args.required) ? schema.args.required : []);
  const current = currentArgs() ?? {};
  for (const name of names) {
    fieldset.appendChild(argumentField(name, properties[name] ?? {}, required.has(name), current));
  }
}

function currentArgs() {
  try {
    const value = JSON.parse($("#req-args").value.trim() || "{}");
    return value && typeof value === "object" && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function kindOf(schema) {
  if (Array.isArray(schema.enum)) return "enum";
  const types = [].concat(schema.type ?? []);
  if (types.includes("boolean")) return "boolean";
  if (types.includes("integer") || types.includes("number")) return "number";
  if (types.includes("string")) return "string";
  return "json";
}

function argumentField(name, schema, isRequired, current) {
  const label = document.createElement("label");
  label.dataset.arg = name;
  label.append(`${name}${isRequired ? " *" : ""}`);
  const kind = kindOf(schema);
  let input;
  if (kind === "enum" || kind === "boolean") {
    input = document.createElement("select");
    const values = kind === "enum" ? schema.enum : [true, false];
    for (const value of ["", ...values]) {
      const option = document.createElement("option");
      option.value = value === "" ? "" : JSON.stringify(value);
      option.textContent = value === "" ? "(not given)" : String(value);
      input.appendChild(option);
    }
  } else {
    input = document.createElement("input");
    input.type = kind === "number" ? "number" : "text";
    if (kind === "number") input.step = "any";
    if (kind === "json") input.placeholder = "JSON";
  }
  if (schema.description) input.title = schema.description;
  input.name = `arg-${name}`;
  if (name in current) {
    const value = current[name];
    input.value = kind === "enum" || kind === "boolean" || kind === "json" ? JSON.stringify(value) : String(value);
  }
  input.addEventListener("input", () => setArgument(name, kind, input.value));
  label.appendChild(input);
  return label;
}

/** Write one field's value into the JSON box (an empty field removes the argument). */
function setArgument(name, kind, text) {
  const args = currentArgs() ?? {};
  if (text === "") {
    delete args[name];
  } else if (kind === "number") {
    args[name] = Number(text);
  } else if (kind === "string") {
    args[name] = text;
  } else {
    try {
      args[name] = JSON.parse(text);
    } catch {
      args[name] = text;
    }
  }
  $("#req-args").value = JSON.stringify(args);
  $("#req-args").classList.remove("invalid");
}

function suggestCommands() {
  const names = commandsOf($("#req-group").value.trim());
  if (!names.length) return;
  $("#cmds-list").innerHTML = "";
  for (const name of names) {
    const option = document.createElement("option");
    option.value = name;
    $("#cmds-list").appendChild(option);
  }
}

export function start(theShell) {
  shell = theShell;
  $("#request-form").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("#req-cancel").addEventListener("click", () => inflight?.abort());
  $("#req-args").addEventListener("input", () => $("#req-args").classList.remove("invalid"));
  $("#req-args").addEventListener("keydown", (event) => {
    // Ctrl+Enter (Cmd+Enter) sends from the arguments box.
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      send();
    }
  });
  $("#req-group").addEventListener("change", suggestCommands);
  $("#req-cmd").addEventListener("focus", suggestCommands);
  for (const id of ["#req-group", "#req-cmd"]) {
    $(id).addEventListener("input", describeCommand);
    $(id).addEventListener("change", describeCommand);
  }
  drawRecent();
}

export function show() {
  $("#req-group").focus();
}

/** Fill the form (any of group, cmd, args (object), timeout). */
export function prefill({ group, cmd, args, timeout } = {}) {
  if (group !== undefined) $("#req-group").value = group;
  if (cmd !== undefined) $("#req-cmd").value = cmd;
  if (args !== undefined) $("#req-args").value = JSON.stringify(args);
  if (timeout !== undefined) $("#req-timeout").value = String(timeout);
  shownSchema = undefined; // redraw the fields with the arguments just filled in
  describeCommand();
}

function readForm() {
  const group = $("#req-group").value.trim();
  const cmd = $("#req-cmd").value.trim();
  const timeout = Number($("#req-timeout").value) || undefined;
  const source = $("#req-args").value.trim() || "{}";
  let args;
  try {
    args = JSON.parse(source);
  } catch (exc) {
    throw new Error(`The arguments are not JSON: ${exc.message}`);
  }
  if (!args || typeof args !== "object" || Array.isArray(args)) {
    throw new Error('The arguments must be a JSON object, e.g. {"x": 1}.');
  }
  return { group, cmd, args, timeout };
}

async function send(request = null) {
  let wanted = request;
  if (!wanted) {
    try {
      wanted = readForm();
    } catch (exc) {
      $("#req-args").classList.add("invalid");
      $("#req-summary").textContent = exc.message;
      return;
    }
  }
  inflight?.abort();
  const controller = new AbortController();
  inflight = controller;
  const list = $("#responses");
  list.innerHTML = "";
  setBusy(true);
  $("#req-summary").textContent = `sending ${wanted.cmd} to ${wanted.group}…`;
  const counts = { ACK: 0, NAK: 0, other: 0 };
  let outcome = "no response";
  let last = null;
  const started = performance.now();
  const onResponse = (line, httpStatus, error) => {
    const ms = performance.now() - started;
    const response = classifyResponse(line, httpStatus);
    if (response.kind === "end") {
      markLast(list);
      list.appendChild(drawEnd(ms));
      return;
    }
    if (response.kind in counts) counts[response.kind] += 1;
    else counts.other += 1;
    outcome = response.kind;
    last = response;
    if (error && (httpStatus === 401 || httpStatus === 403)) shell.error(error, "request");
    list.appendChild(drawResponse(response, ms, list.children.length + 1));
  };
  try {
    const status = await exchange(wanted, controller.signal, onResponse);
    const elapsedMs = performance.now() - started;
    const ended = outcomeSummary(last, status);
    $("#req-summary").textContent = `${ended} · ${describeCounts(counts)} · ${formatMs(elapsedMs)}`;
    $("#req-summary").dataset.outcome = last?.kind ?? "none";
    if (status < 400) shell.clearError("request");
  } catch (exc) {
    if (exc.name === "AbortError") {
      $("#req-summary").textContent = `cancelled after ${describeCounts(counts)}`;
      outcome = "cancelled";
    } else {
      $("#req-summary").textContent = "failed";
      shell.error(exc, "request");
      outcome = "error";
    }
  } finally {
    if (inflight === controller) inflight = null;
    setBusy(false);
  }
  remember({ ...wanted, outcome });
}

/**
 * Send the request (POST /v1/request/{group}, NDJSON) and hand each response to
 * `onResponse(line, status, error)` as the gateway wrote it; an error the gateway answered
 * instead (a NAK without a stream, 503, 504 ...) is handed on once as its error body. Returns the
 * HTTP status; failures without one (the network) are thrown.
 */
async function exchange({ group, cmd, args, timeout }, signal, onResponse) {
  const options = { signal, ...(timeout ? { timeout: timeout * 1000 } : {}) };
  let received = 0;
  try {
    for await (const reply of bus.responses(group, cmd, args, options)) {
      received += 1;
      const event = reply.kind === "end" ? "end" : "response";
      onResponse({ event, final: reply.final, header: reply.header, payload: reply.payload }, 200);
    }
    return 200;
  } catch (exc) {
    if (!(exc instanceof BusgateError) || exc.status === 0) throw exc;
    // Before the stream: the gateway's plain error answer. In it: its timeout or error marker.
    const status = received ? 200 : exc.status;
    onResponse(exc.body ?? { error: { code: exc.code, message: exc.message } }, status, exc);
    return status;
  }
}

function setBusy(busy) {
  $("#req-send").disabled = busy;
  $("#req-cancel").disabled = !busy;
}

function describeCounts({ ACK, NAK, other }) {
  const parts = [];
  if (ACK) parts.push(`${ACK} ACK`);
  if (NAK) parts.push(`${NAK} NAK`);
  if (other) parts.push(`${other} other`);
  return parts.join(", ") || "no response";
}

function drawResponse(response, ms, index) {
  const item = $("#tpl-response").content.firstElementChild.cloneNode(true);
  item.classList.add(`kind-${response.kind}`);
  item.dataset.kind = response.kind;
  item.querySelector(".badge").textContent = response.kind;
  item.querySelector(".time").textContent = `#${index} · +${formatMs(ms)}`;
  const meta = [];
  if (response.code !== undefined) meta.push(`code ${response.code}`);
  if (response.rcd !== undefined) meta.push(`RCD ${response.rcd}`);
  if (response.status !== undefined && response.status >= 400) meta.push(`HTTP ${response.status}`);
  if (response.msg !== undefined) meta.push(String(response.msg));
  meta.push(response.final ? "final" : "more follows");
  item.querySelector(".meta").textContent = meta.join(" · ");
  item.querySelector(".payload").textContent = pretty(response.payload);
  const header = response.raw?.header ?? response.raw?.error?.response?.header;
  if (header) {
    const details = item.querySelector("details.header");
    details.hidden = false;
    details.querySelector("pre").textContent = JSON.stringify(header, null, 2);
  }
  return item;
}

/** The stream has ended: its last response no longer says "more follows". */
function markLast(list) {
  const meta = [...list.querySelectorAll(".response .meta")].pop();
  if (meta) meta.textContent = meta.textContent.replace("more follows", "last");
}

/** The line that shows the service closed its stream (no data of its own). */
function drawEnd(ms) {
  const item = document.createElement("li");
  item.className = "stream-end";
  item.textContent = `end of stream · +${formatMs(ms)}`;
  return item;
}

/** JSON on one line when it is short (`{ "i": 1, "n": 3 }`), indented otherwise. */
function pretty(value) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  const indented = JSON.stringify(value, null, 2);
  // JSON text holds no raw newline inside strings, so folding the layout is safe.
  const folded = indented.replace(/\n\s*/g, " ");
  return folded.length <= 100 ? folded : indented;
}

function recent() {
  try {
    const list = JSON.parse(localStorage.getItem(RECENT_STORAGE) || "[]");
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

function sameRequest(a, b) {
  return a.group === b.group && a.cmd === b.cmd && JSON.stringify(a.args) === JSON.stringify(b.args);
}

function remember(entry) {
  const list = recent().filter((old) => !sameRequest(old, entry));
  list.unshift({ ...entry, at: Date.now() });
  localStorage.setItem(RECENT_STORAGE, JSON.stringify(list.slice(0, RECENT_MAX)));
  drawRecent();
}

function drawRecent() {
  const list = $("#recent");
  list.innerHTML = "";
  for (const entry of recent()) {
    const item = document.createElement("li");
    const what = document.createElement("span");
    what.className = "what";
    what.textContent = `${entry.group} ${entry.cmd} ${JSON.stringify(entry.args)}`;
    what.title = `${new Date(entry.at).toLocaleString()} · ${entry.outcome}`;
    const badge = document.createElement("span");
    badge.className = `badge kind-${entry.outcome}`;
    badge.textContent = entry.outcome;
    const again = button("Send again", () => {
      prefill(entry);
      send({ group: entry.group, cmd: entry.cmd, args: entry.args, timeout: entry.timeout });
    });
    const edit = button("Edit", () => prefill(entry));
    item.append(badge, what, edit, again);
    list.appendChild(item);
  }
  $("#recent-empty").hidden = list.children.length > 0;
}

function button(label, onClick) {
  const node = document.createElement("button");
  node.type = "button";
  node.textContent = label;
  node.addEventListener("click", onClick);
  return node;
}
