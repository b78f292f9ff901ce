// Report: the page `busgate report` writes (Spark: PNG charts and Parquet tables), when the
// gateway serves one (`--report-dir`, GET /v1/reports); otherwise the command that makes one.

import { getJson } from "./api.js";

const POLL_MS = 10000;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let shownUrl = null;

export function start(theShell) {
  shell = theShell;
  refresh();
  // The tab shows whether a report exists even before the view is opened.
  setInterval(refresh, POLL_MS);
}

export function show() {
  refresh();
}

export function keyChanged() {
  refresh();
}

async function refresh() {
  let info;
  try {
    info = await getJson("/v1/reports");
  } catch (exc) {
    $("#report-status").textContent = "cannot ask the gateway about reports";
    if (!$("#view-report").hidden) shell.error(exc, "report");
    return;
  }
  shell.clearError("report");
  const available = Boolean(info?.available && info.url);
  $("#report-tab").dataset.available = String(available);
  $("#report-found").hidden = !available;
  $("#report-missing").hidden = available;
  if (!available) {
    $("#report-status").textContent = "no report yet";
    $("#report-command").textContent = info?.hint ?? "busgate report --since 1h --out DIR";
    shownUrl = null;
    return;
  }
  const written = info.mtime ? new Date(info.mtime) : null;
  $("#report-status").textContent = written ? `written ${written.toLocaleString()}` : "";
  const link = $("#report-link");
  link.href = info.url;
  // Reload the preview when the report is rewritten (its mtime changes).
  const url = `${info.url}?v=${encodeURIComponent(info.mtime ?? "")}`;
  if (url !== shownUrl && !$("#view-report").hidden) {
    $("#report-frame").src = url;
    shownUrl = url;
  }
}
