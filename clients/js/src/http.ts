/**
 * How this package reaches the gateway over HTTP (docs/PROTOCOL.md 9.1, 9.7): the base URL,
 * the credentials, and a `fetch` bounded by a deadline and the caller's `AbortSignal`.
 *
 * Credentials (9.7): an API key goes as `X-API-Key`, a token (or a key with two dots: a JWT) as
 * `Authorization: Bearer`; a WebSocket cannot set headers, so `/ws` carries the key as `?key=`
 * (the gateway takes it out of the URL before anything logs it).
 */

import { BusgateError, errorFromBody, localError } from "./errors.js";

/** A credential, or a function that returns the current one (read at every call). */
export type Credential = string | (() => string | null | undefined);

/** Seconds, as the gateway counts them; this package counts milliseconds, as `setTimeout` does. */
export const DEFAULT_TIMEOUT_MS = 5000;
/** How much longer than the gateway's own timeout this side waits for its answer (a 504). */
export const GRACE_MS = 2000;

/** What every call may carry. */
export interface CallOptions {
  /** Milliseconds: the gateway's timeout for the call (sent as `?timeout=`); default the client's. */
  timeout?: number;
  /** Abort the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** More headers for this call (a W3C `traceparent`, ...). */
  headers?: Record<string, string>;
}

export interface HttpOptions {
  key?: Credential;
  token?: Credential;
  fetch?: typeof globalThis.fetch;
  timeout?: number;
  headers?: Record<string, string>;
}

function read(credential: Credential | undefined): string {
  const value = typeof credential === "function" ? credential() : credential;
  return (value ?? "").trim();
}

const JWT = /^[\w-]+\.[\w-]+\.[\w-]*$/;

/** Fires a call's deadline: one function for every call, given the deadline (no closure per call). */
function expire(deadline: Deadline): void {
  deadline.expire();
}

/**
 * One deadline and the caller's signal, as one `AbortSignal` for `fetch` and the body's reads.
 * `failure(exc)` says what an exception means: the caller's abort (its reason), the deadline
 * (`timeout`), or the network.
 *
 * Per call: an `AbortController` (the only way to stop a `fetch` whose gateway went quiet) and a
 * timer; a listener on the caller's signal only when there is one; the message naming the call
 * only when it fails.
 */
export class Deadline {
  readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private expired = false;
  private onAbort: (() => void) | undefined;

  constructor(
    readonly ms: number | undefined,
    readonly caller: AbortSignal | undefined,
    private readonly method: string,
    private readonly target: string,
  ) {
    if (caller !== undefined) {
      if (caller.aborted) this.controller.abort(caller.reason);
      else {
        this.onAbort = () => this.controller.abort(caller.reason);
        caller.addEventListener("abort", this.onAbort, { once: true });
      }
    }
    if (ms !== undefined && ms > 0 && Number.isFinite(ms)) this.timer = setTimeout(expire, ms, this);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The call, for messages: `POST /v1/request/demo`. */
  get what(): string {
    return `${this.method} ${new URL(this.target).pathname}`;
  }

  /** Raise if the call may not go on (its caller aborted or its time is up). */
  check(): void {
    if (this.caller?.aborted) throw this.caller.reason;
    if (this.expired) throw this.timeoutError();
  }

  /** The error to throw for `exc`, raised while the call ran. */
  failure(exc: unknown): unknown {
    if (this.caller?.aborted) return this.caller.reason;
    if (this.expired) return this.timeoutError();
    if (exc instanceof BusgateError) return exc;
    const message = exc instanceof Error ? exc.message : String(exc);
    return localError("network", `cannot reach the gateway (${this.what}): ${message}`, exc);
  }

  clear(): void {
    clearTimeout(this.timer);
    if (this.onAbort !== undefined) this.caller?.removeEventListener("abort", this.onAbort);
  }

  /** The time is up: abort the call with a `timeout`. */
  expire(): void {
    this.expired = true;
    this.controller.abort(this.timeoutError());
  }

  private timeoutError(): BusgateError {
    return localError("timeout", `no answer from the gateway within ${(this.ms ?? 0) / 1000} s (${this.what})`);
  }
}

/** What `URLSearchParams` writes as it is; anything else goes through it. */
const FORM_SAFE = /^[\w.*-]*$/;

function formEncode(text: string): string {
  return FORM_SAFE.test(text) ? text : new URLSearchParams([["", text]]).toString().slice(1);
}

/** A call's query parameters: undefined and "" leave the parameter out. */
export type Query = Record<string, string | number | undefined>;

/** A call: its method, body, headers and query (`send` adds the credentials and the deadline). */
export interface Init {
  method?: string;
  body?: string;
  headers?: Record<string, string>;
  query?: Query;
}

/** The gateway at one base URL, with the client's credentials and defaults. */
export class Http {
  readonly base: URL;
  readonly fetch: typeof globalThis.fetch;
  readonly timeout: number;
  /** The base URL without its query and fragment, to which a call's path is appended. */
  private readonly prefix: string;

  constructor(
    base: string | URL,
    private readonly options: HttpOptions,
  ) {
    const origin = typeof location === "object" && location ? location.href : undefined;
    this.base = new URL(String(base), origin);
    if (!this.base.pathname.endsWith("/")) this.base.pathname += "/";
    const prefix = new URL(this.base);
    prefix.search = "";
    prefix.hash = "";
    this.prefix = prefix.href;
    const found = options.fetch ?? globalThis.fetch;
    if (typeof found !== "function") throw new TypeError("no fetch: pass { fetch } (Node 20+ and browsers have one)");
    this.fetch = found.bind(globalThis);
    this.timeout = options.timeout ?? DEFAULT_TIMEOUT_MS;
  }

  /**
   * A gateway URL as text: `path` relative to the base (no leading slash needed; its segments
   * already encoded), `params` as the query, encoded as `URLSearchParams` would. The same URL as
   * {@link url}, without building a `URL` that `fetch` would parse again.
   */
  target(path: string, params: Query | undefined = undefined): string {
    let text = this.prefix + (path.charCodeAt(0) === 47 ? path.slice(1) : path);
    if (params !== undefined) {
      let sep = text.includes("?") ? "&" : "?";
      for (const name in params) {
        const value = params[name];
        if (value === undefined || value === "") continue;
        text += `${sep}${formEncode(name)}=${formEncode(String(value))}`;
        sep = "&";
      }
    }
    return text;
  }

  /** A gateway URL: `path` relative to the base (no leading slash needed), `params` as the query. */
  url(path: string, params: Query = {}): URL {
    return new URL(this.target(path, params));
  }

  /** The credential headers (none without a credential). */
  authHeaders(): Record<string, string> {
    return this.withAuth({});
  }

  /** `headers` with the credential header set, if there is a credential. */
  private withAuth(headers: Record<string, string>): Record<string, string> {
    const token = read(this.options.token);
    if (token) headers["Authorization"] = `Bearer ${token}`;
    else {
      const key = read(this.options.key);
      if (key) {
        if (JWT.test(key)) headers["Authorization"] = `Bearer ${key}`;
        else headers["X-API-Key"] = key;
      }
    }
    return headers;
  }

  /** The credential for a URL (`/ws`: a WebSocket cannot set headers), or "". */
  queryKey(): string {
    return read(this.options.token) || read(this.options.key);
  }

  /**
   * `fetch` a gateway path. The returned deadline still bounds the body's reads; the caller
   * clears it once the body is read. `accept` goes first among the call's own headers, which may
   * replace it. A GET goes with `cache: "no-store"` (a browser must not answer it from its cache);
   * anything else as a bare `fetch` would send it (the same bytes on the wire).
   */
  async send(path: string, init: Init, call: CallOptions, deadlineMs: number | undefined, accept?: string): Promise<{ response: Response; deadline: Deadline }> {
    const url = this.target(path, init.query);
    const method = init.method ?? "GET";
    const deadline = new Deadline(deadlineMs, call.signal, method, url);
    const headers: Record<string, string> = this.options.headers === undefined ? {} : { ...this.options.headers };
    this.withAuth(headers);
    if (accept !== undefined) headers["Accept"] = accept;
    if (init.headers !== undefined) Object.assign(headers, init.headers);
    if (call.headers !== undefined) Object.assign(headers, call.headers);
    const request: RequestInit = { method, headers, signal: deadline.signal };
    if (init.body !== undefined) request.body = init.body;
    if (method === "GET") request.cache = "no-store";
    try {
      deadline.check();
      const response = await this.fetch(url, request);
      return { response, deadline };
    } catch (exc) {
      deadline.clear();
      throw deadline.failure(exc);
    }
  }

/** A JSON answer: its body when 2xx, else the gateway's error as a BusgateError. */
  async json<T>(path: string, init: Init, call: CallOptions = {}): Promise<T> {
    const ms = (call.timeout ?? this.timeout) + GRACE_MS;
    const { response, deadline } = await this.send(path, init, call, ms, "application/json");
    try {
      const body = await readBody(response);
      if (!response.ok) throw errorFromBody(response.status, body, response.headers.get("retry-after"));
      return body as T;
    } catch (exc) {
      throw deadline.failure(exc);
    } finally {
      deadline.clear();
    }
  }

  /** A text answer (`/metrics`): its text when 2xx, else the gateway's error. */
  async text(path: string, call: CallOptions = {}): Promise<string> {
    const ms = (call.timeout ?? this.timeout) + GRACE_MS;
    const { response, deadline } = await this.send(path, {}, call, ms);
    try {
      const body = await response.text();
      if (!response.ok) throw errorFromBody(response.status, parse(body), response.headers.get("retry-after"));
      return body;
    } catch (exc) {
      throw deadline.failure(exc);
    } finally {
      deadline.clear();
    }
  }
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A response's body: JSON when it parses, else its text (null when empty). */
export async function readBody(response: Response): Promise<unknown> {
  const body = await response.text();
  return body ? parse(body) : null;
}

/** The `?timeout=` the gateway reads: seconds. */
export function seconds(ms: number): string {
  return String(Math.max(ms, 1) / 1000);
}
