// The gateway's HTTP and WebSocket endpoints, as the console uses them (docs/PROTOCOL.md section 9).
//
// Authentication: the API key the user entered once is kept in localStorage. HTTP requests carry
// it as `Authorization: Bearer <key>` when it looks like a JWT and as `X-API-Key: <key>` otherwise;
// EventSource and WebSocket cannot set headers, so they carry it as the `key` query parameter.

const KEY_STORAGE = "busgate.apiKey";

/** The API key kept in this browser, or "". */
export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

/** Keep (or forget, with "") the API key in this browser. */
export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key.trim());
  else localStorage.removeItem(KEY_STORAGE);
}

function looksLikeJwt(key) {
  return /^[\w-]+\.[\w-]+\.[\w-]*$/.test(key);
}

/** Headers carrying the API key (none when no key is set). */
export function authHeaders() {
  const key = apiKey();
  if (!key) return {};
  return looksLikeJwt(key) ? { Authorization: `Bearer ${key}` } : { "X-API-Key": key };
}

/** A same-origin URL with the API key as `?key=` (for EventSource and WebSocket). */
export function urlWithKey(path, params = {}) {
  const url = new URL(path, location.href);
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const key = apiKey();
  if (key) url.searchParams.set("key", key);
  return url;
}

/** The WebSocket URL of a gateway path (ws: or wss: like the page). */
export function wsUrl(path, params = {}) {
  const url = urlWithKey(path, params);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  return url.toString();
}

/** An error answered by the gateway: HTTP status plus its JSON `code` and `message`. */
export class GatewayError extends Error {
  constructor(status, code, message, body) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code || "";
    this.body = body;
  }

  /** A sentence for people: what went wrong and what to do. */
  explain() {
    if (this.status === 0) return `Cannot reach the gateway: ${this.message}`;
    if (this.status === 401 && apiKey()) {
      return `The gateway refused this API key (${this.message}): enter another with the key button.`;
    }
    if (this.status === 401) return "The gateway wants an API key: enter one with the key button.";
    if (this.status === 403) return `This API key may not do that (${this.message}).`;
    const code = this.code ? ` ${this.code}` : "";
    return `HTTP ${this.status}${code}: ${this.message}`;
  }
}

/** Read an error body: the gateway answers `{"error": {code, message}}` or `{code, message}`. */
export function errorFromBody(status, body) {
  const inner = body && typeof body === "object" ? body.error || body : {};
  const text = typeof inner === "string" ? inner : inner.message || inner.detail || "";
  const code = typeof inner === "object" ? inner.code || "" : "";
  return new GatewayError(status, String(code), String(text || `HTTP ${status}`), body);
}

/** fetch() with the API key; network failures become GatewayError(status 0). */
export async function call(path, options = {}) {
  const headers = { ...authHeaders(), ...(options.headers || {}) };
  try {
    return await fetch(path, { ...options, headers });
  } catch (exc) {
    if (exc.name === "AbortError") throw exc;
    throw new GatewayError(0, "network", exc.message || String(exc));
  }
}

async function readBody(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** GET a JSON document; raises GatewayError on a non-2xx answer. */
export async function getJson(path) {
  const response = await call(path, { headers: { Accept: "application/json" } });
  const body = await readBody(response);
  if (!response.ok) throw errorFromBody(response.status, body);
  return body;
}

/** GET a text document (e.g. /metrics); raises GatewayError on a non-2xx answer. */
export async function getText(path) {
  const response = await call(path);
  const text = await response.text();
  if (!response.ok) throw errorFromBody(response.status, safeJson(text));
  return text;
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return { message: text.slice(0, 200) };
  }
}

/**
 * Yield each JSON line of a streamed NDJSON body as it arrives.
 * A line that is not JSON is yielded as `{ raw: line }` so nothing is hidden.
 */
export async function* ndjsonLines(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (line) yield parseLine(line);
    }
  }
  buffered += decoder.decode();
  if (buffered.trim()) yield parseLine(buffered.trim());
}

function parseLine(line) {
  try {
    return JSON.parse(line);
  } catch {
    return { raw: line };
  }
}

/**
 * Send a request to a group and call `onResponse(obj, elapsedMs)` for every response line.
 *
 * The body is the payload: `{"CMD": cmd, ...args}`. Returns `{status, elapsedMs}`. A non-2xx
 * answer that is not a stream is passed to onResponse once as `{error: {...}}` with its status.
 */
export async function streamRequest({ group, cmd, args, timeout, signal, onResponse }) {
  const params = new URLSearchParams();
  if (timeout) params.set("timeout", String(timeout));
  const query = params.toString() ? `?${params}` : "";
  const started = performance.now();
  const response = await call(`/v1/request/${encodeURIComponent(group)}${query}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/x-ndjson" },
    body: JSON.stringify({ CMD: cmd, ...args }),
    signal,
  });
  const type = response.headers.get("content-type") || "";
  if (type.includes("ndjson")) {
    for await (const line of ndjsonLines(response)) {
      onResponse(line, performance.now() - started, response.status);
    }
  } else {
    const body = await readBody(response);
    onResponse(body, performance.now() - started, response.status);
  }
  return { status: response.status, elapsedMs: performance.now() - started };
}

/** Publish a payload on a `major.minor` type. */
export async function publish(type, payload) {
  const response = await call(`/v1/publish/${encodeURIComponent(type)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(payload),
  });
  const body = await readBody(response);
  if (!response.ok) throw errorFromBody(response.status, body);
  return body;
}
