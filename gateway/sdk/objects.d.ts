/**
 * `bus.objects(options)`: the Object System over the gateway's `/ws` (docs/PROTOCOL.md 6.3,
 * 6.8, and 7 for the bridge to the bus): subscribe with a receive mode, content types or a rule
 * list; send objects; call bus services with `services/request`.
 *
 * Resume: a connection lost without being asked (the gateway restarted, the network dropped, no
 * `pong` to a `ping` within `pingInterval`) is reopened with backoff and jitter (backoff.ts) and
 * the same `routing/subscribe` is sent again; objects sent meanwhile wait (up to `maxBuffered`)
 * and leave once the new subscription is answered. The Object System keeps no history: objects
 * routed while no connection was open are not replayed (bus events that must not be missed are
 * for `subscribe`, which resumes from the broker's journal). Requests in flight when a connection
 * drops fail with `disconnected` (they are not sent twice). A refusal before the first
 * subscription (close code 1008: the API key) is final.
 */
import { type ReconnectOptions } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { BusgateError } from "./errors.js";
import { type Http } from "./http.js";
import { BusObject, type Payload } from "./objectcodec.js";
import type { StateChange } from "./subscription.js";
import { type WebSocketConstructor } from "./websocket.js";
export type ReceiveMode = "all" | "no_echo" | "events_only" | "none";
export interface ObjectsOptions {
    /** What to receive (6.3; default `all`, own objects included). */
    receive?: ReceiveMode;
    /** Content types of the content objects wanted: `all` (default), `none`, or a list (`text/*`, `bus/sensor.*`). */
    types?: "all" | "none" | string[];
    /** A rule list (`["!*", "@services/*"]`); replaces `receive`. */
    rules?: string | string[];
    /** Receive its own objects too (with `rules`). */
    echo?: boolean;
    /** The routing id wanted (else the server gives one). */
    routingId?: string;
    /** Extra ids this connection receives `to` objects for. */
    routingIds?: string[];
    reconnect?: ReconnectOptions | false;
    /** Milliseconds for a connection to open and be subscribed (10,000). */
    timeout?: number;
    signal?: AbortSignal;
    /** Milliseconds between liveness pings; a ping not answered by the next is a lost connection (20,000; 0: off). */
    pingInterval?: number;
    /** Objects kept while reconnecting (1,000); more throw `buffer_full`. */
    maxBuffered?: number;
    /** The WebSocket class (default the platform's; in Node 20, the package's own, websocket.ts). */
    WebSocket?: WebSocketConstructor;
}
/** What a service call over the Object System may carry. */
export interface ObjectRequestOptions {
    /** Milliseconds (sent as the request's `timeout`, in seconds; default 5,000). */
    timeout?: number;
    signal?: AbortSignal;
}
type ObjectsEvents = {
    /** Every object received (replies, notices and errors included). */
    object: BusObject;
    state: StateChange;
    /** An `error` object from the server (`refused`, `forbidden`, `limit`, `malformed`). */
    error: BusgateError;
};
/** An Object System connection over `/ws` that reopens itself. */
export declare class Objects extends Emitter<ObjectsEvents> {
    private readonly http;
    private readonly options;
    state: StateChange["state"];
    /** The routing id the server gave this connection (a new one after each reconnection). */
    routingId: string | undefined;
    /** The `routing/subscribe` object sent on every (re)connection (PROTOCOL.md 6.3). */
    readonly subscribeRequest: Readonly<Record<string, unknown>>;
    private socket;
    private subscribed;
    private everSubscribed;
    /** The current connection's WebSocket opened (its handshake was accepted). */
    private wasOpen;
    private readonly buffered;
    private readonly pending;
    private readonly abort;
    private readonly backoff;
    private readonly opened;
    private markOpened;
    private failOpened;
    constructor(http: Http, options?: ObjectsOptions);
    /** Resolves once the first subscription is answered; rejects if it cannot be made. */
    ready(): Promise<void>;
    /**
     * Send an object: `meta` its metadata (`{type: "text/plain"}`, `{event: "...", to: id}`),
     * `payload` text, bytes, or anything else as JSON. While reconnecting it waits for the new
     * connection.
     *
     * @throws BusgateError `closed` after `close()`, `buffer_full` when too many wait.
     */
    send(meta: Record<string, unknown>, payload?: Payload): void;
    /** Publish a bus event through the bridge (7.2): a content object of type `bus/<type>`. */
    publish(type: string, payload: object): void;
    /**
     * Call a service (`services/request`, 7.1): the first reply's payload.
     *
     * @throws BusgateError `nak` (its `rcd`), `timeout`, `disconnected`.
     */
    request<T = any>(name: string, cmd: string, args?: object, options?: ObjectRequestOptions): Promise<T>;
    /** Call a service that answers several times: each reply's payload, until the last. */
    stream<T = any>(name: string, cmd: string, args?: object, options?: ObjectRequestOptions): AsyncGenerator<T>;
    private replies;
    /** Close the connection; no reconnection follows. */
    close(): void;
    private finish;
    private failPending;
    private run;
    /**
     * Why a WebSocket that never opened was refused, if it was: a gateway refuses /ws before the
     * handshake (an HTTP 401/403 that browsers report as close code 1006, saying nothing), so ask
     * an HTTP route with the same credentials.
     */
    private refusal;
    /** One connection: resolves with why it ended. */
    private connection;
    private onSubscribed;
    /** The `routing/subscribe` this connection sends on every (re)connection. */
    private subscription;
}
export {};
