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

import { Backoff, type ReconnectOptions, sleep } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { BusgateError, localError, nakError } from "./errors.js";
import { type Http, GRACE_MS } from "./http.js";
import { BusObject, decodeObject, encodeObject, type Payload } from "./objectcodec.js";
import { AsyncQueue } from "./queue.js";
import type { StateChange } from "./subscription.js";
import { openWebSocket, type WebSocketConstructor, type WebSocketLike } from "./websocket.js";

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

const POLICY_VIOLATION = 1008;

interface Pending {
  reply(object: BusObject): void;
  fail(error: unknown): void;
}

let counter = 0;
const nextId = (prefix: string) => `${prefix}-${(++counter).toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

/** An Object System connection over `/ws` that reopens itself. */
export class Objects extends Emitter<ObjectsEvents> {
  state: StateChange["state"] = "connecting";
  /** The routing id the server gave this connection (a new one after each reconnection). */
  routingId: string | undefined;
  /** The `routing/subscribe` object sent on every (re)connection (PROTOCOL.md 6.3). */
  readonly subscribeRequest: Readonly<Record<string, unknown>>;
  private socket: WebSocketLike | undefined;
  private subscribed = false;
  private everSubscribed = false;
  /** The current connection's WebSocket opened (its handshake was accepted). */
  private wasOpen = false;
  private readonly buffered: (string | Uint8Array)[] = [];
  private readonly pending = new Map<string, Pending>();
  private readonly abort = new AbortController();
  private readonly backoff: Backoff | undefined;
  private readonly opened: Promise<void>;
  private markOpened!: () => void;
  private failOpened!: (error: unknown) => void;

  constructor(
    private readonly http: Http,
    private readonly options: ObjectsOptions = {},
  ) {
    super();
    this.backoff = options.reconnect === false ? undefined : new Backoff(options.reconnect);
    this.subscribeRequest = Object.freeze(this.subscription());
    this.opened = new Promise((resolve, reject) => {
      this.markOpened = resolve;
      this.failOpened = reject;
    });
    this.opened.catch(() => undefined);
    // A signal aborted already never fires "abort": close at once, as a subscription does.
    if (options.signal?.aborted) this.close();
    else options.signal?.addEventListener("abort", () => this.close(), { once: true });
    void this.run();
  }

  /** Resolves once the first subscription is answered; rejects if it cannot be made. */
  ready(): Promise<void> {
    return this.opened;
  }

  /**
   * Send an object: `meta` its metadata (`{type: "text/plain"}`, `{event: "...", to: id}`),
   * `payload` text, bytes, or anything else as JSON. While reconnecting it waits for the new
   * connection.
   *
   * @throws BusgateError `closed` after `close()`, `buffer_full` when too many wait.
   */
  send(meta: Record<string, unknown>, payload?: Payload): void {
    const message = encodeObject(meta, payload);
    if (this.state === "closed") throw localError("closed", "the Object System connection is closed");
    if (this.subscribed && this.socket) {
      this.socket.send(message);
      return;
    }
    if (this.buffered.length >= (this.options.maxBuffered ?? 1000)) {
      throw localError("buffer_full", `${this.buffered.length} objects already wait for the connection to reopen`);
    }
    this.buffered.push(message);
  }

  /** Publish a bus event through the bridge (7.2): a content object of type `bus/<type>`. */
  publish(type: string, payload: object): void {
    this.send({ type: `bus/${type}` }, payload);
  }

  /**
   * Call a service (`services/request`, 7.1): the first reply's payload.
   *
   * @throws BusgateError `nak` (its `rcd`), `timeout`, `disconnected`.
   */
  async request<T = any>(name: string, cmd: string, args: object = {}, options: ObjectRequestOptions = {}): Promise<T> {
    for await (const payload of this.replies<T>(name, cmd, args, options, true)) return payload;
    return undefined as T;
  }

  /** Call a service that answers several times: each reply's payload, until the last. */
  stream<T = any>(name: string, cmd: string, args: object = {}, options: ObjectRequestOptions = {}): AsyncGenerator<T> {
    return this.replies<T>(name, cmd, args, options, false);
  }

  private async *replies<T>(name: string, cmd: string, args: object, options: ObjectRequestOptions, first: boolean): AsyncGenerator<T> {
    const id = nextId("rq");
    const timeout = options.timeout ?? this.http.timeout;
    const queue = new AsyncQueue<BusObject>(Infinity);
    const stop = () => queue.close(options.signal?.reason);
    const timer = setTimeout(() => queue.close(localError("timeout", `no reply from ${name} within ${timeout / 1000} s`)), timeout + GRACE_MS);
    options.signal?.addEventListener("abort", stop, { once: true });
    this.pending.set(id, { reply: (object) => queue.push(object), fail: (error) => queue.close(error) });
    try {
      if (options.signal?.aborted) throw options.signal.reason;
      this.send({ event: "services/request", id, name, request: cmd, timeout: timeout / 1000 }, args);
      for (;;) {
        const { value: reply, done } = await queue.next();
        if (done) return;
        const meta = reply.meta;
        const rcd = typeof meta["rcd"] === "number" ? meta["rcd"] : undefined;
        if (meta["error"] !== undefined || (rcd !== undefined && rcd >= 400)) {
          throw nakError(rcd, String(meta["error"] ?? meta["msg"] ?? `rcd ${rcd}`));
        }
        if (meta["end"] === true) return;
        yield reply.json<T>();
        if (first || meta["more"] !== true) return;
      }
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", stop);
      this.pending.delete(id);
    }
  }

  /** Close the connection; no reconnection follows. */
  close(): void {
    this.finish(undefined);
  }

  private finish(error: unknown): void {
    if (this.state === "closed") return;
    this.abort.abort();
    this.subscribed = false;
    const socket = this.socket;
    this.socket = undefined;
    socket?.close(1000, "closed by the client");
    this.failPending(localError("closed", "the Object System connection was closed"));
    this.buffered.length = 0;
    this.failOpened(error ?? localError("closed", "the Object System connection was closed before it opened"));
    this.state = "closed";
    this.emit("state", { state: "closed", attempt: this.backoff?.attempt ?? 0, ...(error ? { error } : {}) });
  }

  private failPending(error: BusgateError): void {
    for (const pending of [...this.pending.values()]) pending.fail(error);
    this.pending.clear();
  }

  private async run(): Promise<void> {
    while (!this.abort.signal.aborted) {
      let error: unknown;
      try {
        error = await this.connection();
      } catch (exc) {
        error = exc;
      }
      if (this.abort.signal.aborted) return;
      if (!this.wasOpen) error = (await this.refusal()) ?? error;
      if (this.abort.signal.aborted) return;
      if (error instanceof BusgateError && (error.code === "refused" || error.status === 401 || error.status === 403)) return this.finish(error);
      const delay = this.backoff?.next();
      if (delay === undefined) return this.finish(error);
      this.state = "reconnecting";
      this.emit("state", { state: "reconnecting", attempt: this.backoff?.attempt ?? 0, delay, error });
      if (!(await sleep(delay, this.abort.signal))) return;
    }
  }

  /**
   * Why a WebSocket that never opened was refused, if it was: a gateway refuses /ws before the
   * handshake (an HTTP 401/403 that browsers report as close code 1006, saying nothing), so ask
   * an HTTP route with the same credentials.
   */
  private async refusal(): Promise<BusgateError | undefined> {
    try {
      await this.http.json("v1/services", {}, { signal: this.abort.signal, timeout: this.options.timeout ?? 10_000 });
    } catch (exc) {
      if (exc instanceof BusgateError && (exc.status === 401 || exc.status === 403)) {
        return new BusgateError({ status: exc.status, code: exc.code, message: `the gateway refused /ws: ${exc.message}`, body: exc.body });
      }
    }
    return undefined;
  }

  /** One connection: resolves with why it ended. */
  private async connection(): Promise<unknown> {
    this.wasOpen = false;
    const url = this.http.url("ws", { key: this.http.queryKey() || undefined });
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const socket = await openWebSocket(url.toString(), this.options.WebSocket);
    if (this.abort.signal.aborted) {
      socket.close(1000, "closed by the client");
      return undefined;
    }
    this.socket = socket;
    const request = this.subscribeRequest;
    return new Promise<unknown>((resolve) => {
      let pinged: string | undefined;
      let ended = false;
      const limit = setTimeout(() => end(localError("timeout", "the gateway did not answer the subscription in time")), this.options.timeout ?? 10_000);
      const every = this.options.pingInterval ?? 20_000;
      const pinger =
        every > 0
          ? setInterval(() => {
              if (pinged !== undefined) return end(localError("timeout", `no pong within ${every / 1000} s`));
              pinged = nextId("ping");
              if (this.subscribed) socket.send(JSON.stringify({ event: "ping", id: pinged }));
              else pinged = undefined;
            }, every)
          : undefined;
      const end = (why: unknown) => {
        if (ended) return;
        ended = true;
        clearTimeout(limit);
        clearInterval(pinger);
        this.abort.signal.removeEventListener("abort", onAbort);
        socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
        if (this.socket === socket) {
          this.socket = undefined;
          this.subscribed = false;
          socket.close(1000, "reconnecting");
        }
        this.failPending(localError("disconnected", `the /ws connection dropped before the reply (${describe(why)})`));
        resolve(why);
      };
      const onAbort = () => end(undefined);
      this.abort.signal.addEventListener("abort", onAbort, { once: true });
      socket.onopen = () => {
        this.wasOpen = true;
        socket.send(JSON.stringify(request));
      };
      socket.onerror = () => undefined; // the close event follows, with its code
      socket.onclose = (event: { code: number; reason: string }) => {
        const refused = event.code === POLICY_VIOLATION && !this.everSubscribed;
        const why = `closed (code ${event.code}${event.reason ? `: ${event.reason}` : ""})`;
        end(refused ? new BusgateError({ status: 0, code: "refused", message: `the gateway refused /ws: ${why}` }) : localError("disconnected", `/ws ${why}`));
      };
      socket.onmessage = (event: { data: unknown }) => {
        let object: BusObject;
        try {
          object = decodeObject(event.data as string | ArrayBuffer);
        } catch (exc) {
          return end(exc);
        }
        const meta = object.meta;
        const replyTo = meta["in-reply-to"];
        if (meta["event"] === "routing/subscribe/reply" && replyTo === request["id"]) {
          clearTimeout(limit);
          this.onSubscribed(meta);
        } else if (meta["event"] === "pong" && replyTo === pinged && pinged !== undefined) {
          pinged = undefined;
          return;
        } else if (meta["event"] === "error") {
          const error = new BusgateError({ status: 0, code: String(meta["code"] ?? "error"), message: String(meta["error"] ?? "error"), body: meta });
          const pending = typeof replyTo === "string" ? this.pending.get(replyTo) : undefined;
          if (pending) pending.fail(error);
          this.emit("error", error);
        } else if (meta["event"] === "services/reply" && typeof replyTo === "string") {
          this.pending.get(replyTo)?.reply(object);
        }
        this.emit("object", object);
      };
    });
  }

  private onSubscribed(meta: Record<string, unknown>): void {
    this.subscribed = true;
    this.everSubscribed = true;
    this.routingId = typeof meta["routing-id"] === "string" ? meta["routing-id"] : undefined;
    const attempt = this.backoff?.attempt ?? 0;
    this.backoff?.reset();
    this.state = "open";
    this.emit("state", { state: "open", attempt });
    const waiting = this.buffered.splice(0);
    for (const message of waiting) this.socket?.send(message);
    this.markOpened();
  }

  /** The `routing/subscribe` this connection sends on every (re)connection. */
  private subscription(): Record<string, unknown> {
    const o = this.options;
    const request: Record<string, unknown> = { event: "routing/subscribe", id: nextId("sub") };
    if (o.rules !== undefined) request["subscriptions"] = o.rules;
    else request["receive_mode"] = o.receive ?? "all";
    if (o.types !== undefined) request["types"] = o.types;
    if (o.echo !== undefined) request["echo"] = o.echo;
    if (o.routingId !== undefined) request["routing-id"] = o.routingId;
    if (o.routingIds !== undefined) request["routing-ids"] = o.routingIds;
    return request;
  }
}

function describe(why: unknown): string {
  return why instanceof Error ? why.message : "closed";
}
