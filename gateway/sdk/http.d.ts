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
 */
export declare class Deadline {
    readonly ms: number | undefined;
    readonly caller: AbortSignal | undefined;
    readonly what: string;
    readonly controller: AbortController;
    private timer;
    private expired;
    private readonly onAbort;
    constructor(ms: number | undefined, caller: AbortSignal | undefined, what: string);
    get signal(): AbortSignal;
    /** Raise if the call may not go on (its caller aborted or its time is up). */
    check(): void;
    /** The error to throw for `exc`, raised while the call ran. */
    failure(exc: unknown): unknown;
    clear(): void;
    private timeoutError;
}
/** The gateway at one base URL, with the client's credentials and defaults. */
export declare class Http {
    private readonly options;
    readonly base: URL;
    readonly fetch: typeof globalThis.fetch;
    readonly timeout: number;
    constructor(base: string | URL, options: HttpOptions);
    /** A gateway URL: `path` relative to the base (no leading slash needed), `params` as the query. */
    url(path: string, params?: Record<string, string | number | undefined>): URL;
    /** The credential headers (none without a credential). */
    authHeaders(): Record<string, string>;
    /** The credential for a URL (`/ws`: a WebSocket cannot set headers), or "". */
    queryKey(): string;
    /**
     * `fetch` a gateway path. The returned deadline still bounds the body's reads; the caller
     * clears it once the body is read.
     */
    send(path: string, init: {
        method?: string;
        body?: string;
        headers?: Record<string, string>;
        query?: Record<string, string | number | undefined>;
    }, call: CallOptions, deadlineMs: number | undefined): Promise<{
        response: Response;
        deadline: Deadline;
    }>;
    /** A JSON answer: its body when 2xx, else the gateway's error as a BusgateError. */
    json<T>(path: string, init: Parameters<Http["send"]>[1], call?: CallOptions): Promise<T>;
    /** A text answer (`/metrics`): its text when 2xx, else the gateway's error. */
    text(path: string, call?: CallOptions): Promise<string>;
}
/** A response's body: JSON when it parses, else its text (null when empty). */
export declare function readBody(response: Response): Promise<unknown>;
/** The `?timeout=` the gateway reads: seconds. */
export declare function seconds(ms: number): string;
