// Traffic at a glance: requests per second, latency and outcomes by group.
// Live (the last 2 minutes, sampled every second): rates from the cumulative Prometheus counters
// of GET /metrics (exact per interval); latencies p50/p99 and outcomes (ACK, NAK, timeout, no
// responders, unavailable, ...) from GET /v1/stats (the gateway's last 60 s). The last hour: per
// minute from GET /v1/stats?history=1, fetched when shown and every 10 s.

import { bus } from "./api.js";
import { lineChart } from "./chart.js";
import {
  failureRate,
  formatMs,
  groupCountersFromMetrics,
  normalizeStats,
  OUTCOMES,
  parsePrometheus,
  quantileFromBuckets,
} from "./model.js";

const POLL_MS = 1000;
const POINTS = 120;
const MIN_POINTS = 30; // the charts fill from the right, then scroll once POINTS samples are in
const HOUR_POLL_MS = 10000;
const HOUR_MINUTES = 60;
//: What the metrics call the groups no service has answered yet (gateway/process/metrics.py).
const OTHER = "_other";
const $ = (selector) => document.querySelector(selector);

let shell = null;
let previous = null; // {at, counters} of the last /metrics sample, for rates
const history = {}; // group -> {rps: [], p50: [], p99: [], total}
let visible = false;
let failing = false;
let sources = "";
let statsWindow = undefined; // seconds the /v1/stats latencies cover
let outcomes = {}; // group -> {ack: n, nak: n, ...} over the stats window
let range = "live"; // or "hour"
let hour = null; // the last GET /v1/stats?history=1 answer's history
let hourTimer = null;

export function start(theShell) {
  shell = theShell;
  for (const button of document.querySelectorAll("#traffic-range button")) {
    button.addEventListener("click", () => setRange(button.dataset.range));
  }
  sample();
  setInterval(sample, POLL_MS);
}

export function show() {
  visible = true;
  if (range === "hour") fetchHour();
  draw();
}

function setRange(wanted) {
  range = wanted === "hour" ? "hour" : "live";
  for (const button of document.querySelectorAll("#traffic-range button")) {
    button.setAttribute("aria-pressed", String(button.dataset.range === range));
  }
  clearInterval(hourTimer);
  hourTimer = null;
  if (range === "hour") {
    fetchHour();
    hourTimer = setInterval(fetchHour, HOUR_POLL_MS);
  }
  draw();
}

async function fetchHour() {
  try {
    const body = await bus.stats({ history: true });
    hour = Array.isArray(body?.history) ? body.history : [];
  } catch (exc) {
    if (visible) shell.error(exc, "traffic");
    return;
  }
  if (visible) draw();
}

export function keyChanged() {
  failing = false;
}

export function hide() {
  visible = false;
}

async function sample() {
  const at = performance.now() / 1000;
  const [stats, metrics] = await Promise.allSettled([bus.stats(), bus.metrics()]);
  if (stats.status === "rejected" && metrics.status === "rejected") {
    if (!failing && visible) shell.error(metrics.reason, "traffic");
    failing = true;
    return;
  }
  if (failing) shell.clearError("traffic");
  failing = false;
  const windowed = stats.status === "fulfilled" ? normalizeStats(stats.value) : {};
  outcomes = {};
  for (const [group, info] of Object.entries(stats.status === "fulfilled" ? stats.value?.groups ?? {} : {})) {
    outcomes[group] = info?.outcomes ?? {};
  }
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
  if (range === "hour") {
    drawHour();
    return;
  }
  const cards = $("#traffic-cards");
  const names = Object.keys(history).sort();
  $("#traffic-empty").hidden = names.length > 0;
  $("#traffic-hint").textContent =
    "Requests per second, latency and outcomes by group, sampled every second (last 2 minutes).";
  for (const card of [...cards.children]) {
    if (!(card.dataset.group in history)) card.remove();
  }
  for (const group of names) {
    let card = cards.querySelector(`[data-group="${CSS.escape(group)}"]`);
    if (!card) card = cards.appendChild(newCard(group));
    const slot = history[group];
    drawOutcomes(card, outcomes[group] ?? {}, statsWindow ? `last ${statsWindow} s` : "recent");
    card.querySelector(".rps-label").textContent = "requests/s";
    card.querySelector(".total-label").textContent = "requests in total";
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

/** Outcome counts of one group, failures marked, and the card's health. */
function drawOutcomes(card, counts, period) {
  const list = card.querySelector(".outcomes");
  list.replaceChildren();
  for (const { key, label, bad } of OUTCOMES) {
    const n = Number(counts[key] ?? 0);
    if (!n && key !== "ack") continue;
    const item = document.createElement("span");
    item.className = "outcome";
    item.dataset.outcome = key;
    item.dataset.bad = String(bad && n > 0);
    item.textContent = `${label} ${n}`;
    list.appendChild(item);
  }
  const { total, failed, rate } = failureRate(counts);
  const health = !total ? "idle" : rate >= 0.5 ? "failing" : failed ? "degraded" : "ok";
  card.dataset.health = health;
  card.querySelector(".failed").textContent = total
    ? `${Math.round(rate * 100)}% failed (${failed} of ${total}, ${period})`
    : `no requests (${period})`;
}

/** The last hour, per minute, from /v1/stats?history=1. */
function drawHour() {
  const cards = $("#traffic-cards");
  const minutes = hour ?? [];
  $("#traffic-hint").textContent = "Requests per minute, latency and outcomes by group over the last hour.";
  const names = [...new Set(minutes.flatMap((m) => Object.keys(m.groups ?? {})))].sort();
  $("#traffic-empty").hidden = names.length > 0 || hour === null;
  const newest = minutes.length ? minutes[minutes.length - 1].t : Date.now() / 1000;
  for (const card of [...cards.children]) {
    if (!names.includes(card.dataset.group)) card.remove();
  }
  for (const group of names) {
    let card = cards.querySelector(`[data-group="${CSS.escape(group)}"]`);
    if (!card) card = cards.appendChild(newCard(group));
    const perMinute = new Array(HOUR_MINUTES).fill(undefined);
    const p50 = new Array(HOUR_MINUTES).fill(undefined);
    const p99 = new Array(HOUR_MINUTES).fill(undefined);
    const totals = {};
    for (const minute of minutes) {
      const index = HOUR_MINUTES - 1 - Math.round((newest - minute.t) / 60);
      const info = minute.groups?.[group];
      if (index < 0 || !info) continue;
      perMinute[index] = Number(info.requests ?? 0);
      p50[index] = info.latency_ms?.p50;
      p99[index] = info.latency_ms?.p99;
      for (const [key, n] of Object.entries(info.outcomes ?? {})) totals[key] = (totals[key] ?? 0) + n;
    }
    // Minutes without traffic are zero requests, not gaps in the line.
    const first = perMinute.findIndex((v) => v !== undefined);
    for (let i = Math.max(0, first); first >= 0 && i < HOUR_MINUTES; i += 1) perMinute[i] ??= 0;
    drawOutcomes(card, totals, "last hour");
    card.querySelector(".rps-label").textContent = "requests/min (last)";
    card.querySelector(".rps-now").textContent = String(latest(perMinute) ?? "-");
    card.querySelector(".p50-now").textContent = formatMs(latest(p50));
    card.querySelector(".p99-now").textContent = formatMs(latest(p99));
    card.querySelector(".latency-label").textContent = "latency p50 · p99 (per minute)";
    card.querySelector(".total-label").textContent = "requests in the last hour";
    card.querySelector(".total").textContent = String(failureRate(totals).total);
    lineChart(perMinute, { points: HOUR_MINUTES, unit: "req/min", label: `${group} requests per minute`,
      svg: card.querySelector("svg.rate") });
    lineChart(p50, { points: HOUR_MINUTES, unit: "ms", label: `${group} latency p50 per minute (p99 dashed)`,
      svg: card.querySelector("svg.latency"), extra: [{ values: p99, className: "p99" }] });
    card.querySelector(".rps-max").textContent = scale(perMinute, (v) => v.toFixed(0));
    card.querySelector(".lat-max").textContent = scale([...p50, ...p99], formatMs);
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
    <div class="figure"><span class="rps-label">requests/s</span><strong class="rps-now">-</strong></div>
    <div class="plot"><svg class="chart rate"></svg><span class="scale rps-max"></span></div>
    <div class="figure"><span class="latency-label">latency p50 · p99</span><strong><span class="p50-now">-</span> · <span class="p99-now">-</span></strong></div>
    <div class="plot"><svg class="chart latency"></svg><span class="scale lat-max"></span></div>
    <div class="outcomes" aria-label="outcomes"></div>
    <div class="figure"><span class="failed"></span></div>
    <div class="figure"><span class="total-label">requests in total</span><strong class="total">-</strong></div>`;
  card.querySelector("h3").textContent =
    group === OTHER ? "other groups (no service has answered them yet)" : group;
  return card;
}
