// Pure functions that turn the gateway's JSON into what the views draw. No DOM, no fetch:
// each is easy to read against docs/PROTOCOL.md section 9 and tolerant of optional fields.

/** First defined value among `obj[names...]` (header names may be upper or lower case). */
export function pick(obj, ...names) {
  if (!obj || typeof obj !== "object") return undefined;
  for (const name of names) {
    if (obj[name] !== undefined && obj[name] !== null) return obj[name];
  }
  return undefined;
}

/** Seconds since the epoch from a number (s or ms) or an ISO string; undefined if unknown. */
export function toEpochSeconds(value) {
  if (value === undefined || value === null || value === "") return undefined;
  if (typeof value === "number") return value > 1e12 ? value / 1000 : value;
  const parsed = Date.parse(String(value));
  return Number.isNaN(parsed) ? undefined : parsed / 1000;
}

/** "3 s ago", "2 min ago", ... for a time in epoch seconds. */
export function ago(epochSeconds, nowSeconds = Date.now() / 1000) {
  if (epochSeconds === undefined) return "never";
  const delta = Math.max(0, nowSeconds - epochSeconds);
  if (delta < 1) return "just now";
  if (delta < 90) return `${Math.round(delta)} s ago`;
  if (delta < 5400) return `${Math.round(delta / 60)} min ago`;
  return `${Math.round(delta / 3600)} h ago`;
}

/**
 * The services of `GET /v1/services` as rows `{group, instances, status, lastSeen, detail}`.
 * Accepts a list, `{services: [...]}` or `{services: {group: {...}}}`.
 */
export function normalizeServices(body) {
  let list = body && !Array.isArray(body) ? pick(body, "services", "groups", "items") : body;
  if (list && !Array.isArray(list) && typeof list === "object") {
    list = Object.entries(list).map(([group, info]) => ({ group, ...info }));
  }
  if (!Array.isArray(list)) return [];
  return list
    .map((entry) => {
      const instances = pick(entry, "instances", "instance_count", "count");
      return {
        group: String(pick(entry, "group", "name", "GRP", "GroupName") ?? "?"),
        instances: Array.isArray(instances) ? instances.length : Number(instances ?? 0),
        silent: Number(entry.silent ?? 0),
        members: Array.isArray(entry.instance_list) ? entry.instance_list : [],
        status: String(pick(entry, "status", "state", "Status") ?? "unknown"),
        lastSeen: toEpochSeconds(pick(entry, "last_seen", "lastSeen", "last_heartbeat", "seen")),
        commands: Array.isArray(entry.commands) ? entry.commands.map(String) : [],
        detail: entry,
      };
    })
    .sort((a, b) => a.group.localeCompare(b.group));
}

/** A CSS class for a service status ("ok", "warn" or "bad"). */
export function statusClass(status, instances) {
  const text = String(status).toLowerCase();
  if (instances === 0 || /down|dead|gone|stale|terminat|error|fail/.test(text)) return "bad";
  if (/ok|up|run|alive|ready|healthy|active|live/.test(text)) return "ok";
  return "warn";
}

/**
 * Classify one response line of a streamed request.
 *
 * Returns `{kind, final, payload, msg, rcd, raw}` where kind is "ACK", "NAK", "timeout",
 * "error" or "info". `status` is the HTTP status of the whole answer (for non-stream errors).
 */
export function classifyResponse(line, status = 200) {
  const raw = line;
  if (line === null || typeof line !== "object") {
    return { kind: status >= 400 ? "error" : "info", final: true, payload: line, raw };
  }
  // A response is {"header": {TYP, MID, RID, MSG, RCD, FLG, ...}, "payload": ...} (section 9);
  // a NAK error body nests it: {"error": {code, message, rcd, response: {header, payload}}}.
  const nested = line.error && typeof line.error === "object" ? line.error.response : undefined;
  const outer = line.response && typeof line.response === "object" ? line.response : nested || line;
  const inner = outer.header && typeof outer.header === "object" ? { ...outer, ...outer.header } : outer;
  const typ = String(pick(inner, "TYP", "typ", "type", "kind") ?? "").toUpperCase();
  const event = String(pick(line, "event", "status", "outcome") ?? "").toLowerCase();
  const payload = pick(inner, "payload", "PLD", "pld", "data", "body");
  const msg = pick(inner, "MSG", "msg", "message");
  const rcd = pick(inner, "RCD", "rcd", "code");
  const flags = Number(pick(inner, "FLG", "flg") ?? 0);
  const more = pick(line, "more", "MORE") ?? pick(inner, "more") ?? (flags & 2) === 2;
  const finalFlag = pick(line, "final", "last", "done");
  if (event === "end" || (typ === "ACK" && (flags & 4) === 4)) {
    // The service closed its stream: an ACK with Flag.END and no data (PROTOCOL.md 2.3).
    return { kind: "end", final: true, payload: undefined, raw };
  }
  if (typ === "ACK" || typ === "NAK") {
    const final = finalFlag !== undefined ? Boolean(finalFlag) : !more;
    return { kind: typ, final, payload: payload ?? stripped(inner), msg, rcd, raw };
  }
  const errorCode = String(pick(line.error, "code") ?? line.code ?? "");
  if (/timeout/.test(event) || /TIMEOUT/.test(typ) || /timeout/i.test(errorCode)) {
    const text = pick(line.error, "message") ?? msg ?? "no (final) answer in time";
    return { kind: "timeout", final: true, payload: line, msg: text, code: errorCode || undefined, status, raw };
  }
  if (line.error !== undefined || status >= 400 || /error/.test(event)) {
    const err = typeof line.error === "object" && line.error ? line.error : line;
    const text = typeof line.error === "string" ? line.error : pick(err, "message", "detail");
    // `code` is the gateway's error code (no_responders, bad_request, ...), `rcd` a service's.
    const code = pick(err, "code");
    return { kind: "error", final: true, payload: line, msg: text, code, rcd: pick(err, "rcd"), status, raw };
  }
  return { kind: "info", final: Boolean(finalFlag) || /end|done|final/.test(event), payload: line, raw };
}

function stripped(obj) {
  const copy = { ...obj };
  for (const name of ["TYP", "typ", "type", "kind", "MID", "mid", "RID", "rid", "more", "final", "header"]) {
    delete copy[name];
  }
  return copy;
}

/** Split "a, b c" into ["a", "b", "c"]. */
export function splitList(text) {
  return String(text || "")
    .split(/[\s,]+/)
    .map((word) => word.trim())
    .filter(Boolean);
}

/**
 * One Object System object (metadata + optional payload) as a row of the message list:
 * `{kind, label, sender, summary, meta, payload}`; kind is "disconnect", "notify", "reply",
 * "event" or "content". Seed 003: an event has an `event` attribute, content has none.
 */
export function describeObject(meta, payload) {
  const event = meta.event;
  const route = Array.isArray(meta.route) ? meta.route : [];
  const sender = route[0] || meta["routing-id"] || "";
  if (event === "routing/disconnect") {
    const who = meta["routing-id"] || sender;
    return row("disconnect", event, sender, `client ${who} disconnected`, meta, payload);
  }
  if (event === "routing/subscribe/notify") {
    const who = meta["routing-id"] || sender;
    const role = meta.role ? ` (${meta.role})` : "";
    return row("notify", event, sender, `client ${who}${role} subscribed`, meta, payload);
  }
  if (event && /\/reply$/.test(event)) {
    return row("reply", event, sender, summarize(meta, payload), meta, payload);
  }
  if (event) return row("event", event, sender, summarize(meta, payload), meta, payload);
  return row("content", meta.type || "content", sender, summarize(meta, payload), meta, payload);
}

function row(kind, label, sender, summary, meta, payload) {
  return { kind, label, sender, summary, meta, payload };
}

const HIDDEN = new Set(["event", "route", "size", "type", "id"]);

function summarize(meta, payload) {
  const shown = Object.fromEntries(Object.entries(meta).filter(([name]) => !HIDDEN.has(name)));
  const parts = [];
  if (Object.keys(shown).length) parts.push(JSON.stringify(shown));
  if (payload !== undefined && payload !== "") parts.push(String(payload));
  return parts.join("  ") || "{}";
}

/**
 * A bus message of the SSE stream as a row: `{kind, label, sender, summary, meta, payload}`.
 * The data is a message's JSON (`type`/`GRP`, `payload`/`PLD`, `src`/`SRC`).
 */
export function describeBusMessage(data, eventName) {
  if (data === null || typeof data !== "object") {
    return row("event", eventName || "message", "", String(data), {}, undefined);
  }
  // Section 9: the data of an SSE event is {"type", "header": {MID, GRP, SRC, ...}, "payload"}.
  const header = data.header && typeof data.header === "object" ? data.header : data;
  const label = pick(data, "type") ?? pick(header, "GRP", "grp", "group") ?? eventName ?? "message";
  const sender = pick(header, "SRC", "src", "source", "from") ?? "";
  const payload = pick(data, "payload", "PLD", "pld", "data");
  const summary = JSON.stringify(payload === undefined ? data : payload);
  return row("event", String(label), String(sender), summary, data, undefined);
}

/** Parse Prometheus text into `[{name, labels, value}]` (comments and malformed lines skipped). */
export function parsePrometheus(text) {
  const samples = [];
  const line = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/;
  for (const raw of String(text).split("\n")) {
    if (!raw || raw.startsWith("#")) continue;
    const match = line.exec(raw.trim());
    if (!match) continue;
    const labels = {};
    for (const pair of (match[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1]] = pair[2];
    }
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/**
 * Cumulative per-group counters from Prometheus samples: `{group: {count, sum, buckets}}`.
 * Requests are the `*request*_total` counters with a `group` label; latency is the
 * `*_seconds` histogram with a `group` label (sum, count and `le` buckets).
 */
export function groupCountersFromMetrics(samples) {
  const groups = {};
  const slot = (group) => (groups[group] ||= { count: 0, sum: 0, hcount: 0, buckets: {} });
  for (const { name, labels, value } of samples) {
    const group = labels.group;
    if (!group || !Number.isFinite(value)) continue;
    if (/request.*_total$/.test(name) && !/_bucket|_sum|_count/.test(name)) {
      slot(group).count += value;
    } else if (/_seconds_sum$/.test(name)) {
      slot(group).sum += value;
    } else if (/_seconds_count$/.test(name)) {
      slot(group).hcount += value;
    } else if (/_seconds_bucket$/.test(name) && labels.le !== undefined) {
      const buckets = slot(group).buckets;
      buckets[labels.le] = (buckets[labels.le] || 0) + value;
    }
  }
  for (const entry of Object.values(groups)) {
    if (!entry.count) entry.count = entry.hcount;
  }
  return groups;
}

/** A quantile (0..1) in ms from the difference of two cumulative `le` bucket maps. */
export function quantileFromBuckets(now, before, q) {
  const bounds = Object.keys(now)
    .map((le) => ({ le, bound: le === "+Inf" ? Infinity : Number(le) }))
    .sort((a, b) => a.bound - b.bound);
  const counts = bounds.map(({ le }) => (now[le] || 0) - ((before && before[le]) || 0));
  const total = counts.length ? counts[counts.length - 1] : 0;
  if (total <= 0) return undefined;
  const target = q * total;
  for (let i = 0; i < bounds.length; i += 1) {
    if (counts[i] >= target) {
      const bound = bounds[i].bound;
      const previous = i > 0 ? bounds[i - 1].bound : 0;
      return (Number.isFinite(bound) ? bound : previous) * 1000;
    }
  }
  return undefined;
}

/**
 * `GET /v1/stats` as `{group: {count, rps, p50, p99, mean}}` (latencies in ms; any may be
 * missing). Accepts `{groups: {g: {...}}}`, `{groups: [{group, ...}]}` or `{g: {...}}`.
 */
export function normalizeStats(body) {
  let groups = body && typeof body === "object" ? pick(body, "groups", "by_group") ?? body : {};
  if (Array.isArray(groups)) {
    groups = Object.fromEntries(groups.map((entry) => [pick(entry, "group", "name"), entry]));
  }
  const result = {};
  for (const [group, info] of Object.entries(groups || {})) {
    if (!info || typeof info !== "object" || Array.isArray(info)) continue;
    const latency = pick(info, "latency_ms", "latency") || {};
    const outcomes = pick(info, "outcomes", "by_outcome");
    let count = pick(info, "requests", "count", "total");
    if (count && typeof count === "object") count = sumValues(count);
    if (count === undefined && outcomes) count = sumValues(outcomes);
    result[group] = {
      count: count === undefined ? undefined : Number(count),
      rps: numberOrUndefined(pick(info, "rps", "requests_per_second", "rate")),
      p50: numberOrUndefined(pick(info, "p50_ms", "p50") ?? pick(latency, "p50", "p50_ms")),
      p99: numberOrUndefined(pick(info, "p99_ms", "p99") ?? pick(latency, "p99", "p99_ms")),
      mean: numberOrUndefined(pick(info, "mean_ms", "avg_ms") ?? pick(latency, "mean", "avg")),
    };
  }
  return result;
}

function sumValues(obj) {
  return Object.values(obj).reduce((total, value) => total + (Number(value) || 0), 0);
}

function numberOrUndefined(value) {
  if (value === undefined || value === null) return undefined;
  const number = Number(value);
  return Number.isFinite(number) ? number : undefined;
}

/** "12.3 ms", "1.20 s", "-" */
export function formatMs(ms) {
  if (ms === undefined || !Number.isFinite(ms)) return "-";
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 10) return `${ms.toFixed(0)} ms`;
  return `${ms.toFixed(1)} ms`;
}

/**
 * One line that says how a request ended, from its last (final) response and the HTTP status:
 * "ACK · HTTP 200", "NAK 409", "no_responders · HTTP 503", "timeout", ...
 */
export function outcomeSummary(last, status) {
  if (!last) return `HTTP ${status}`;
  if (last.kind === "NAK") return last.rcd !== undefined ? `NAK ${last.rcd}` : "NAK";
  if (last.kind === "ACK" || last.kind === "end") return `ACK · HTTP ${status}`;
  if (last.kind === "timeout") return status >= 400 ? `timeout · HTTP ${status}` : "timeout (stream)";
  if (last.kind === "error") {
    const code = last.code ? `${last.code} · ` : "";
    return `${code}HTTP ${status}`;
  }
  return `HTTP ${status}`;
}

/** The outcomes of /v1/stats (`{ack: 3, nak: 1, ...}`) as labelled counts, failures marked. */
export const OUTCOMES = [
  { key: "ack", label: "ACK", bad: false },
  { key: "nak", label: "NAK", bad: true },
  { key: "timeout", label: "timeout", bad: true },
  { key: "no_responders", label: "no responders", bad: true },
  { key: "unavailable", label: "unavailable", bad: true },
  { key: "rejected", label: "rejected", bad: true },
  { key: "error", label: "error", bad: true },
];

/** `{total, failed, rate}` of an outcomes map: how many did not end in an ACK. */
export function failureRate(outcomes) {
  let total = 0;
  let failed = 0;
  for (const { key, bad } of OUTCOMES) {
    const n = Number(outcomes?.[key] ?? 0);
    total += n;
    if (bad) failed += n;
  }
  return { total, failed, rate: total ? failed / total : 0 };
}
