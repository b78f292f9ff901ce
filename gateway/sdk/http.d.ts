/**
 * How this package reaches the gateway over HTTP (docs/PROTOCOL.md 9.1, 9.7): the base URL,
 * the credentials, and a `fetch` bounded by a deadline and the caller's `AbortSignal`.
 *
 * Credentials (9.7): an API key goes as `X-API-Key`, a token (or a key with two dots: a JWT) as
 * `Authorization: Bearer`; a WebSocket cannot set headers, so `/ws` carries the key as `?key=`
 * (the gateway takes it out of the URL before anything logs it).
 */
/** A credential, or a function that returns the current one (read at every call). */
export type Credential = string | (() => string | null | undefined);
/** Seconds, as the gateway counts them; this package counts milliseconds, as `setTimeout` does. */
export declare const DEFAULT_TIMEOUT_MS = 5000;
/** How much longer than the gateway's own timeout this side waits for its answer (a 504). */
export declare const GRACE_MS = 2000;
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
/**
 * One deadline and the caller's signal, as one `AbortSignal` for `fetch` and the body's reads.
 * `failure(exc)` says what an exception means: the caller's abort (its reason), the deadline
 * (`timeout`), or the network.
 *
 * Per call: an `AbortController` (the only way to stop a `fetch` whose gateway went quiet) and a
 * timer; a listener on the caller's signal only when there is one; the message naming the call
 * only when it fails.
 */
export declare class Deadline {
    readonly ms: number | undefined;
    readonly caller: AbortSignal | undefined;
    private readonly method;
    private readonly target;
    readonly controller: AbortController;
    private timer;
    private expired;
    private onAbort;
    constructor(ms: number | undefined, caller: AbortSignal | undefined, method: string, target: string);
    get signal(): AbortSignal;
    /** The call, for messages: `POST /v1/request/demo`. */
    get what(): string;
    /** Raise if the call may not go on (its caller aborted or its time is up). */
    check(): void;
    /** The error to throw for `exc`, raised while the call ran. */
    failure(exc: unknown): unknown;
    clear(): void;
    /** The time is up: abort the call with a `timeout`. */
    expire(): void;
    private timeoutError;
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
export declare class Http {
    private readonly options;
    readonly base: URL;
    readonly fetch: typeof globalThis.fetch;
    readonly timeout: number;
    /** The base URL without its query and fragment, to which a call's path is appended. */
    private readonly prefix;
    constructor(base: string | URL, options: HttpOptions);
    /**
     * A gateway URL as text: `path` relative to the base (no leading slash needed; its segments
     * already encoded), `params` as the query, encoded as `URLSearchParams` would. The same URL as
     * {@link url}, without building a `URL` that `fetch` would parse again.
     */
    target(path: string, params?: Query | undefined): string;
    /** A gateway URL: `path` relative to the base (no leading slash needed), `params` as the query. */
    url(path: string, params?: Query): URL;
    /** The credential headers (none without a credential). */
    authHeaders(): Record<string, string>;
    /** `headers` with the credential header set, if there is a credential. */
    private withAuth;
    /** The credential for a URL (`/ws`: a WebSocket cannot set headers), or "". */
    queryKey(): string;
    /**
     * `fetch` a gateway path. The returned deadline still bounds the body's reads; the caller
     * clears it once the body is read. `accept` goes first among the call's own headers, which may
     * replace it. A GET goes with `cache: "no-store"` (a browser must not answer it from its cache);
     * anything else as a bare `fetch` would send it (the same bytes on the wire).
     */
    send(path: string, init: Init, call: CallOptions, deadlineMs: number | undefined, accept?: string): Promise<{
        response: Response;
        deadline: Deadline;
    }>;
    /** A JSON answer: its body when 2xx, else the gateway's error as a BusgateError. */
    json<T>(path: string, init: Init, call?: CallOptions): Promise<T>;
    /** A text answer (`/metrics`): its text when 2xx, else the gateway's error. */
    text(path: string, call?: CallOptions): Promise<string>;
}
/** A response's body: JSON when it parses, else its text (null when empty). */
export declare function readBody(response: Response): Promise<unknown>;
/** The `?timeout=` the gateway reads: seconds. */
export declare function seconds(ms: number): string;
