// The console's shell: views by URL hash, connection state, API key, error banner.
// Each view lives in its own module and exposes start(shell) / show() / hide().

import { apiKey, bus, BusgateError, explain, setApiKey } from "./api.js";
import * as busView from "./bus.js";
import * as reportView from "./report.js";
import * as requestView from "./request.js";
import * as servicesView from "./services.js";
import * as subscribeView from "./subscribe.js";
import * as trafficView from "./traffic.js";

const VIEWS = {
  services: servicesView,
  request: requestView,
  subscribe: subscribeView,
  traffic: trafficView,
  bus: busView,
  report: reportView,
};
const STATE_POLL_MS = 2000;

const $ = (selector) => document.querySelector(selector);

/** What every view may use: the banner and the current connection state. */
const shell = {
  /**
   * Show a clear error message at the top (an Error, a BusgateError or a string). `source`
   * names who raised it ("bus", "services", ...), so that one view's success does not hide
   * another's problem.
   */
  error(problem, source = "console") {
    const text = problem instanceof BusgateError ? explain(problem) : String(problem?.message ?? problem);
    $("#banner-text").textContent = text;
    $("#banner").dataset.source = source;
    $("#banner").hidden = false;
  },
  /** Hide the banner if `source` raised it (any banner when `source` is not given). */
  clearError(source) {
    const banner = $("#banner");
    if (source === undefined || banner.dataset.source === source) banner.hidden = true;
  },
  /** Navigate to a view, e.g. shell.go("request"). */
  go(view) {
    location.hash = `#${view}`;
  },
  busReady: undefined,
  gatewayUp: undefined,
};

let current = null;

function route() {
  const wanted = location.hash.slice(1);
  const name = wanted in VIEWS ? wanted : "services";
  if (name === current) return;
  if (current) VIEWS[current].hide?.();
  current = name;
  for (const view of Object.keys(VIEWS)) {
    const visible = view === name;
    $(`#view-${view}`).hidden = !visible;
    const tab = document.querySelector(`.tabs a[data-view="${view}"]`);
    if (visible) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  VIEWS[name].show?.();
}

function setPill(id, state, text) {
  const pill = $(id);
  pill.dataset.state = state;
  pill.textContent = text;
}

/** GET /healthz (is the gateway up) and /readyz (is it connected to the bus). */
async function pollState() {
  let healthy = false;
  try {
    await bus.healthz();
    healthy = true;
    setPill("#state-gateway", "ok", "gateway up");
  } catch (exc) {
    setPill("#state-gateway", "bad", exc.status ? `gateway ${exc.status}` : "gateway unreachable");
  }
  if (!healthy && shell.gatewayUp !== false) {
    shell.error("Cannot reach the gateway; retrying every 2 s.", "gateway");
  }
  if (healthy) shell.clearError("gateway");
  shell.gatewayUp = healthy;
  if (!healthy) {
    setPill("#state-bus", "unknown", "bus ?");
    shell.busReady = undefined;
    return;
  }
  const wasReady = shell.busReady;
  try {
    const body = await bus.readyz();
    shell.busReady = true;
    setPill("#state-bus", "ok", "bus connected");
    $("#state-bus").title = `Bus: ${body.bus ?? "connected"} (reconnects: ${body.reconnects ?? 0})`;
    shell.clearError("bus");
  } catch (exc) {
    if (!exc.status) {
      setPill("#state-bus", "bad", "bus ?");
      return;
    }
    shell.busReady = false;
    setPill("#state-bus", "bad", "bus disconnected");
    $("#state-bus").title = `Bus: ${exc.message}`;
    if (wasReady !== false) {
      shell.error(`The gateway is not connected to the bus: ${exc.message}. Requests fail until it reconnects.`, "bus");
    }
  }
}

function showKey() {
  const key = apiKey();
  const button = $("#key-button");
  button.textContent = key ? `key: …${key.slice(-4)}` : "key: none";
  button.dataset.state = key ? "ok" : "unknown";
}

function wireKeyDialog() {
  const dialog = $("#key-dialog");
  $("#key-button").addEventListener("click", () => {
    $("#key-input").value = apiKey();
    dialog.showModal();
  });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "save") setApiKey($("#key-input").value);
    if (dialog.returnValue === "forget") setApiKey("");
    showKey();
    shell.clearError();
    // Let the next state poll raise again whatever is still wrong.
    shell.busReady = undefined;
    shell.gatewayUp = undefined;
    for (const module of Object.values(VIEWS)) module.keyChanged?.();
  });
}

function main() {
  $("#banner-close").addEventListener("click", () => shell.clearError());
  wireKeyDialog();
  showKey();
  requestView.setCommandSource(servicesView.commandsOf);
  requestView.setSchemaSource(servicesView.schemaOf);
  for (const module of Object.values(VIEWS)) module.start(shell);
  window.addEventListener("hashchange", route);
  route();
  pollState();
  setInterval(pollState, STATE_POLL_MS);
}

main();
