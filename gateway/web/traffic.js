// Traffic at a glance: requests per second and latency by group, sampled every 2 s.
// Rates come from the cumulative Prometheus counters of GET /metrics (exact per interval);
// latencies p50/p99 from GET /v1/stats (JSON, the gateway's recent window), or from the
// /metrics histogram when the gateway has no /v1/stats.

import { getJson, getText } from "./api.js";
import { lineChart } from "./chart.js";
import {
  formatMs,
  groupCountersFromMetrics,
  normalizeStats,
  parsePrometheus,
  quantileFromBuckets,
} from "./model.js";

const POLL_MS = 1000;
const POINTS = 120;
const MIN_POINTS = 30; // the charts fill from the right, then scroll once POINTS samples are in
const $ = (selector) => document.querySelector(selector);

let shell = null;
let previous = null; // {at, counters} of the last /metrics sample, for rates
const history = {}; // group -> {rps: [], p50: [], p99: [], total}
let visible = false;
let failing = false;
let sources = "";
let statsWindow = undefined; // seconds the /v1/stats latencies cover

export function start(theShell) {
  shell = theShell;
  sample();
  setInterval(sample, POLL_MS);
}

export function show() {
  visible = true;
  draw();
}

export function keyChanged() {
  failing = false;
}

export function hide() {
  visible = false;
}

async function sample() {
  const at = performance.now() / 1000;
  const [stats, metrics] = await Promise.allSettled([getJson("/v1/stats"), getText("/metrics")]);
  if (stats.status === "rejected" && metrics.status === "rejected") {
    if (!failing && visible) shell.error(metrics.reason, "traffic");
    failing = true;
    return;
  }
  if (failing) shell.clearError("traffic");
  failing = false;
  const windowed = stats.status === "fulfilled" ? normalizeStats(stats.value) : {};
  statsWindow = stats.status === "fulfilled" ? Number(stats.value?.window) || undefined : undefined;
  const counters =
    metrics.status === "fulfilled" ? groupCountersFromMetrics(parsePrometheus(metrics.value)) : null;
  record(at, windowed, counters);
  sources = [stats.status === "fulfilled" ? "/v1/stats" : "", counters ? "/metrics" : ""]
    .filter(Boolean)
    .join(" + ");
  $("#traffic-source").textContent = `from GET ${sources}`;
  if (visible) draw();
}

function record(at, windowed, counters) {
  const dt = previous ? at - previous.at : 0;
  const names = new Set([...Object.keys(history), ...Object.keys(windowed)]);
  for (const group of Object.keys(counters || {})) names.add(group);
  for (const group of names) {
    const slot = (history[group] ||= { rps: [], p50: [], p99: [], total: undefined });
    const stats = windowed[group] || {};
    const now = counters?.[group];
    const before = previous?.counters?.[group];
    let rps = stats.rps ?? 0;
    let p50 = stats.p50;
    let p99 = stats.p99;
    if (now) {
      slot.total = now.count;
      if (previous && dt > 0) rps = Math.max(0, now.count - (before?.count ?? 0)) / dt;
      if (p50 === undefined) p50 = quantileFromBuckets(now.buckets, before?.buckets, 0.5);
      if (p99 === undefined) p99 = quantileFromBuckets(now.buckets, before?.buckets, 0.99);
    } else if (stats.count !== undefined) {
      slot.total = stats.count;
    }
    push(slot.rps, previous || !now ? rps : undefined);
    push(slot.p50, p50 ?? stats.mean);
    push(slot.p99, p99);
  }
  if (counters) previous = { at, counters };
}

function push(series, value) {
  series.push(value);
  if (series.length > POINTS) series.shift();
}

function latest(series) {
  for (let i = series.length - 1; i >= 0; i -= 1) {
    if (Number.isFinite(series[i])) return series[i];
  }
  return undefined;
}

function draw() {
  const cards = $("#traffic-cards");
  const names = Object.keys(history).sort();
  $("#traffic-empty").hidden = names.length > 0;
  for (const group of names) {
    let card = cards.querySelector(`[data-group="${CSS.escape(group)}"]`);
    if (!card) card = cards.appendChild(newCard(group));
    const slot = history[group];
    const rps = latest(slot.rps);
    card.querySelector(".rps-now").textContent = rps === undefined ? "-" : rps.toFixed(1);
    card.querySelector(".p50-now").textContent = formatMs(latest(slot.p50));
    card.querySelector(".p99-now").textContent = formatMs(latest(slot.p99));
    card.querySelector(".total").textContent = String(slot.total ?? "-");
    card.querySelector(".latency-label").textContent = statsWindow
      ? `latency p50 · p99 (last ${statsWindow} s)`
      : "latency p50 · p99";

    lineChart(slot.rps, {
      points: span(slot),
      unit: "req/s",
      label: `${group} requests per second`,
      svg: card.querySelector("svg.rate"),
    });
    lineChart(slot.p50, {
      points: span(slot),
      unit: "ms",
      label: `${group} latency p50 (p99 dashed)`,
      svg: card.querySelector("svg.latency"),
      extra: [{ values: slot.p99, className: "p99" }],
    });
    card.querySelector(".rps-max").textContent = scale(slot.rps, (v) => v.toFixed(1));
    card.querySelector(".lat-max").textContent = scale([...slot.p50, ...slot.p99], formatMs);
  }
}

/** The top of a chart's scale, as text ("max 12.0"; "" while everything is 0). */
function scale(values, format) {
  const top = Math.max(0, ...values.filter((v) => Number.isFinite(v)));
  return top > 0 ? `max ${format(top)}` : "";
}

/** How many sample slots a group's charts span. */
function span(slot) {
  return Math.min(POINTS, Math.max(MIN_POINTS, slot.rps.length));
}

function newCard(group) {
  const card = document.createElement("article");
  card.className = "traffic";
  card.dataset.group = group;
  card.innerHTML = `
    <h3></h3>
    <div class="figure"><span>requests/s</span><strong class="rps-now">-</strong></div>
    <div class="plot"><svg class="chart rate"></svg><span class="scale rps-max"></span></div>
    <div class="figure"><span class="latency-label">latency p50 · p99</span><strong><span class="p50-now">-</span> · <span class="p99-now">-</span></strong></div>
    <div class="plot"><svg class="chart latency"></svg><span class="scale lat-max"></span></div>
    <div class="figure"><span>requests in total</span><strong class="total">-</strong></div>`;
  card.querySelector("h3").textContent = group;
  return card;
}
