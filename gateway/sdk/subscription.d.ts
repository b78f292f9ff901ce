/**
 * `bus.subscribe(types)`: the gateway's bus events over Server-Sent Events
 * (`GET /v1/subscribe?types=`, docs/PROTOCOL.md 9.5), read with `fetch` (so it carries headers,
 * sees statuses, and runs in Node as in browsers), resumed after any loss of the connection.
 *
 * Resume: every event's `id` is kept; a new connection sends it as `Last-Event-ID`, so the
 * gateway (this one or another on the same broker) first sends what was missed, from the broker's
 * journal when it journals the type (ids are then its sequence numbers, `seq`), then live events.
 * Events whose `seq` is not above the last one seen are dropped, so none is seen twice. The first
 * connection starts at `since` when given (a `SEQ`, `15m`, a time), and so do later ones until an
 * event came.
 *
 * Reconnects (backoff with jitter, reconnect.ts): after a network error, the end of the stream (a
 * gateway shutting down says so), a 5xx, a 429 (after its `Retry-After`), an `overflow` (this
 * reader fell behind), or `idleTimeout` without a byte (the gateway sends a keepalive every 30 s).
 * A 4xx is final: the subscription closes with that error.
 */
import { type ReconnectOptions } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { type Http } from "./http.js";
/** One bus event. */
export interface BusEvent<T = any> {
    /** Its `major.minor` type. */
    type: string;
    /** The SSE id: its journal sequence number, or `<epoch>-<n>` when the broker did not journal it. */
    id: string;
    /** The broker journal's sequence number, when the broker journals the type. */
    seq: number | undefined;
    /** The message id (MID). */
    mid: string | undefined;
    /** The bus header (`MID`, `GRP`, `TYP`, `ENC`, `SEQ`, ...). */
    header: Record<string, unknown>;
    payload: T;
}
/** Where a connection is. */
export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";
/** A change of state: `reconnecting` says why (`error`) and after how long (`delay`, ms). */
export interface StateChange {
    state: ConnectionState;
    /** Tries since the connection was last open. */
    attempt: number;
    delay?: number;
    error?: unknown;
}
export interface SubscribeOptions {
    /** Start from the journal: a sequence number, a duration back (`15m`, `2h`), or a time. */
    since?: string | number | Date;
    /** Start with the last journaled event of each type (`?last=1`), then live ones. */
    last?: boolean;
    /** Resume after this event id (what an earlier subscription's `lastEventId` was). */
    lastEventId?: string;
    /** Closes the subscription. */
    signal?: AbortSignal;
    /** Backoff between reconnections, or `false` to close on the first loss. */
    reconnect?: ReconnectOptions | false;
    /** Milliseconds without a byte (not even a keepalive) before the connection is given up (75,000: two and a half of the gateway's 30 s keepalives). */
    idleTimeout?: number;
    /** Milliseconds for the gateway to answer a (re)connection (10,000). */
    connectTimeout?: number;
    /** Events held for a slow `for await` before the stream is read no further (1,000). */
    highWater?: number;
}
type SubscriptionEvents = {
    event: BusEvent;
    state: StateChange;
    /** The gateway's words on the stream: `the gateway is shutting down`, an `overflow`, ... */
    notice: string;
};
/** A live subscription: `for await (const ev of sub)`, or `sub.on("event", ...)`; `sub.close()`. */
export declare class Subscription<T = any> extends Emitter<SubscriptionEvents> implements AsyncIterable<BusEvent<T>> {
    private readonly http;
    private readonly options;
    readonly types: string[];
    /** The id of the last event received (resume point). */
    lastEventId: string;
    /** The `seq` of the last journaled event received. */
    lastSeq: number | undefined;
    state: ConnectionState;
    /** Why it closed, when an error closed it. */
    error: unknown;
    private readonly abort;
    private readonly queue;
    private readonly backoff;
    private readonly since;
    private iterating;
    private readonly opened;
    private markOpened;
    private failOpened;
    constructor(http: Http, types: string | string[], options?: SubscribeOptions);
    /** Resolves once the gateway has subscribed (events published from then on arrive). */
    ready(): Promise<void>;
    /** Stop: the iterator ends, no reconnection follows. */
    close(): void;
    [Symbol.asyncIterator](): AsyncIterator<BusEvent<T>>;
    private finish;
    private setState;
    private run;
    /** One connection, until its stream ends (resolves) or fails (throws). */
    private connect;
    private handle;
    private isOpen;
}
export {};
