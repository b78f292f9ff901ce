// Traffic at a glance: requests per second and latency by group, sampled every 2 s from
// GET /v1/stats (JSON), or computed from the Prometheus counters of GET /metrics when the
// gateway has no /v1/stats.

import { GatewayError, getJson, getText } from "./api.js";
import { lineChart } from "./chart.js";
import {
  formatMs,
  groupCountersFromMetrics,
  normalizeStats,
  parsePrometheus,
  quantileFromBuckets,
} from "./model.js";

const POLL_MS = 2000;
const POINTS = 60;
const $ = (selector) => document.querySelector(selector);

let shell = null;
let mode = "stats"; // "stats" or "metrics"
let previous = null; // {at, groups} of the last sample, for rates
const history = {}; // group -> {rps: [], p50: [], p99: [], total}
let visible = false;
let failing = false;

export function start(theShell) {
  shell = theShell;
  sample();
  setInterval(sample, POLL_MS);
}

export function show() {
  visible = true;
  draw();
}

export function hide() {
  visible = false;
}

async function sample() {
  const at = performance.now() / 1000;
  try {
    const groups = mode === "stats" ? await fromStats() : await fromMetrics();
    record(at, groups);
    if (failing) shell.clearError();
    failing = false;
  } catch (exc) {
    if (mode === "stats" && exc instanceof GatewayError && exc.status === 404) {
      mode = "metrics";
      return sample();
    }
    if (!failing && visible) shell.error(exc);
    failing = true;
  }
  $("#traffic-source").textContent =
    mode === "stats" ? "from GET /v1/stats" : "from GET /metrics (Prometheus)";
  if (visible) draw();
}

async function fromStats() {
  return normalizeStats(await getJson("/v1/stats"));
}

async function fromMetrics() {
  const counters = groupCountersFromMetrics(parsePrometheus(await getText("/metrics")));
  const groups = {};
  for (const [group, now] of Object.entries(counters)) {
    const before = previous?.raw?.[group];
    const requests = now.hcount - (before?.hcount ?? now.hcount);
    const seconds = now.sum - (before?.sum ?? now.sum);
    groups[group] = {
      count: now.count,
      p50: before ? quantileFromBuckets(now.buckets, before.buckets, 0.5) : undefined,
      p99: before ? quantileFromBuckets(now.buckets, before.buckets, 0.99) : undefined,
      mean: requests > 0 ? (seconds / requests) * 1000 : undefined,
      raw: now,
    };
  }
  return groups;
}

function record(at, groups) {
  const dt = previous ? at - previous.at : 0;
  for (const [group, now] of Object.entries(groups)) {
    const slot = (history[group] ||= { rps: [], p50: [], p99: [], total: 0 });
    const before = previous?.groups?.[group];
    let rps = now.rps;
    if (rps === undefined && before?.count !== undefined && now.count !== undefined && dt > 0) {
      rps = Math.max(0, now.count - before.count) / dt;
    }
    push(slot.rps, rps ?? (previous ? 0 : undefined));
    push(slot.p50, now.p50 ?? now.mean);
    push(slot.p99, now.p99);
    slot.total = now.count ?? slot.total;
  }
  const raw = Object.fromEntries(Object.entries(groups).map(([g, v]) => [g, v.raw]));
  previous = { at, groups, raw };
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
    lineChart(slot.rps, { points: POINTS, unit: "req/s", label: `${group} requests per second`, svg: card.querySelector("svg.rate") });
    lineChart(slot.p50, { points: POINTS, unit: "ms", label: `${group} latency`, svg: card.querySelector("svg.latency") });
  }
}

function newCard(group) {
  const card = document.createElement("article");
  card.className = "traffic";
  card.dataset.group = group;
  card.innerHTML = `
    <h3></h3>
    <div class="figure"><span>requests/s</span><strong class="rps-now">-</strong></div>
    <svg class="chart rate"></svg>
    <div class="figure"><span>latency p50 · p99</span><strong><span class="p50-now">-</span> · <span class="p99-now">-</span></strong></div>
    <svg class="chart latency"></svg>
    <div class="figure"><span>requests in total</span><strong class="total">-</strong></div>`;
  card.querySelector("h3").textContent = group;
  return card;
}
