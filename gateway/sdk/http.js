/**
 * How this package reaches the gateway over HTTP (docs/PROTOCOL.md 9.1, 9.7): the base URL,
 * the credentials, and a `fetch` bounded by a deadline and the caller's `AbortSignal`.
 *
 * Credentials (9.7): an API key goes as `X-API-Key`, a token (or a key with two dots: a JWT) as
 * `Authorization: Bearer`; a WebSocket cannot set headers, so `/ws` carries the key as `?key=`
 * (the gateway takes it out of the URL before anything logs it).
 */
import { BusgateError, errorFromBody, localError } from "./errors.js";
/** Seconds, as the gateway counts them; this package counts milliseconds, as `setTimeout` does. */
export const DEFAULT_TIMEOUT_MS = 5000;
/** How much longer than the gateway's own timeout this side waits for its answer (a 504). */
export const GRACE_MS = 2000;
function read(credential) {
    const value = typeof credential === "function" ? credential() : credential;
    return (value ?? "").trim();
}
const JWT = /^[\w-]+\.[\w-]+\.[\w-]*$/;
/**
 * One deadline and the caller's signal, as one `AbortSignal` for `fetch` and the body's reads.
 * `failure(exc)` says what an exception means: the caller's abort (its reason), the deadline
 * (`timeout`), or the network.
 */
export class Deadline {
    ms;
    caller;
    what;
    controller = new AbortController();
    timer;
    expired = false;
    onAbort;
    constructor(ms, caller, what) {
        this.ms = ms;
        this.caller = caller;
        this.what = what;
        this.onAbort = () => this.controller.abort(caller?.reason);
        if (caller?.aborted)
            this.controller.abort(caller.reason);
        else
            caller?.addEventListener("abort", this.onAbort, { once: true });
        if (ms !== undefined && ms > 0 && Number.isFinite(ms)) {
            this.timer = setTimeout(() => {
                this.expired = true;
                this.controller.abort(this.timeoutError());
            }, ms);
        }
    }
    get signal() {
        return this.controller.signal;
    }
    /** Raise if the call may not go on (its caller aborted or its time is up). */
    check() {
        if (this.caller?.aborted)
            throw this.caller.reason;
        if (this.expired)
            throw this.timeoutError();
    }
    /** The error to throw for `exc`, raised while the call ran. */
    failure(exc) {
        if (this.caller?.aborted)
            return this.caller.reason;
        if (this.expired)
            return this.timeoutError();
        if (exc instanceof BusgateError)
            return exc;
        const message = exc instanceof Error ? exc.message : String(exc);
        return localError("network", `cannot reach the gateway (${this.what}): ${message}`, exc);
    }
    clear() {
        clearTimeout(this.timer);
        this.caller?.removeEventListener("abort", this.onAbort);
    }
    timeoutError() {
        return localError("timeout", `no answer from the gateway within ${(this.ms ?? 0) / 1000} s (${this.what})`);
    }
}
/** The gateway at one base URL, with the client's credentials and defaults. */
export class Http {
    options;
    base;
    fetch;
    timeout;
    constructor(base, options) {
        this.options = options;
        const origin = typeof location === "object" && location ? location.href : undefined;
        this.base = new URL(String(base), origin);
        if (!this.base.pathname.endsWith("/"))
            this.base.pathname += "/";
        const found = options.fetch ?? globalThis.fetch;
        if (typeof found !== "function")
            throw new TypeError("no fetch: pass { fetch } (Node 20+ and browsers have one)");
        this.fetch = found.bind(globalThis);
        this.timeout = options.timeout ?? DEFAULT_TIMEOUT_MS;
    }
    /** A gateway URL: `path` relative to the base (no leading slash needed), `params` as the query. */
    url(path, params = {}) {
        const url = new URL(path.replace(/^\//, ""), this.base);
        for (const [name, value] of Object.entries(params)) {
            if (value !== undefined && value !== "")
                url.searchParams.set(name, String(value));
        }
        return url;
    }
    /** The credential headers (none without a credential). */
    authHeaders() {
        const token = read(this.options.token);
        if (token)
            return { Authorization: `Bearer ${token}` };
        const key = read(this.options.key);
        if (!key)
            return {};
        return JWT.test(key) ? { Authorization: `Bearer ${key}` } : { "X-API-Key": key };
    }
    /** The credential for a URL (`/ws`: a WebSocket cannot set headers), or "". */
    queryKey() {
        return read(this.options.token) || read(this.options.key);
    }
    /**
     * `fetch` a gateway path. The returned deadline still bounds the body's reads; the caller
     * clears it once the body is read.
     */
    async send(path, init, call, deadlineMs) {
        const url = this.url(path, init.query);
        const deadline = new Deadline(deadlineMs, call.signal, `${init.method ?? "GET"} ${url.pathname}`);
        const headers = { ...this.options.headers, ...this.authHeaders(), ...init.headers, ...call.headers };
        try {
            deadline.check();
            const response = await this.fetch(url, {
                method: init.method ?? "GET",
                headers,
                ...(init.body === undefined ? {} : { body: init.body }),
                signal: deadline.signal,
                cache: "no-store",
            });
            return { response, deadline };
        }
        catch (exc) {
            deadline.clear();
            throw deadline.failure(exc);
        }
    }
    /** A JSON answer: its body when 2xx, else the gateway's error as a BusgateError. */
    async json(path, init, call = {}) {
        const ms = (call.timeout ?? this.timeout) + GRACE_MS;
        const { response, deadline } = await this.send(path, { ...init, headers: { Accept: "application/json", ...init.headers } }, call, ms);
        try {
            const body = await readBody(response);
            if (!response.ok)
                throw errorFromBody(response.status, body, response.headers.get("retry-after"));
            return body;
        }
        catch (exc) {
            throw deadline.failure(exc);
        }
        finally {
            deadline.clear();
        }
    }
    /** A text answer (`/metrics`): its text when 2xx, else the gateway's error. */
    async text(path, call = {}) {
        const ms = (call.timeout ?? this.timeout) + GRACE_MS;
        const { response, deadline } = await this.send(path, {}, call, ms);
        try {
            const body = await response.text();
            if (!response.ok)
                throw errorFromBody(response.status, parse(body), response.headers.get("retry-after"));
            return body;
        }
        catch (exc) {
            throw deadline.failure(exc);
        }
        finally {
            deadline.clear();
        }
    }
}
function parse(text) {
    try {
        return JSON.parse(text);
    }
    catch {
        return text;
    }
}
/** A response's body: JSON when it parses, else its text (null when empty). */
export async function readBody(response) {
    const body = await response.text();
    return body ? parse(body) : null;
}
/** The `?timeout=` the gateway reads: seconds. */
export function seconds(ms) {
    return String(Math.max(ms, 1) / 1000);
}
