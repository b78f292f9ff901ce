// Report: the page `busgate report` writes (Spark: SVG charts and Parquet tables), when the
// gateway serves one (`--report-dir`, GET /v1/reports); otherwise the command that makes one.
//
// With authentication on, GET /v1/reports (sent with the API key, like every call) also sets a
// short-lived signed cookie scoped to /reports/: the preview frame, the "Open" link and the
// report's own relative links (charts, tables) then load with no key in any URL. A refused key
// (401, or 403 for a key limited to some groups) hides the report and clears that cookie.

import { bus } from "./api.js";

const POLL_MS = 10000;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let shownUrl = null;

export function start(theShell) {
  shell = theShell;
  // The report's own links that leave /reports/ ("<- console") must leave the frame too,
  // or the console would load inside its own preview.
  $("#report-frame").addEventListener("load", () => {
    const doc = $("#report-frame").contentDocument; // same origin
    if (!doc) return;
    for (const link of doc.querySelectorAll("a[href]")) {
      const target = new URL(link.getAttribute("href"), doc.baseURI);
      if (target.origin !== location.origin || !target.pathname.startsWith("/reports/")) {
        link.target = "_top";
      }
    }
  });
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
    info = await bus.reports();
  } catch (exc) {
    const refused = exc.status === 401 || exc.status === 403;
    $("#report-status").textContent = refused
      ? exc.status === 401
        ? "the report needs an API key"
        : "this API key may not read the report"
      : "cannot ask the gateway about reports";
    if (refused) hideReport();
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

function hideReport() {
  $("#report-found").hidden = true;
  $("#report-tab").dataset.available = "false";
  $("#report-frame").removeAttribute("src");
  shownUrl = null;
}
