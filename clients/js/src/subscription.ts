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

import { Backoff, type ReconnectOptions, sleep } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { BusgateError, errorFromBody, localError } from "./errors.js";
import { type Deadline, type Http, readBody } from "./http.js";
import { AsyncQueue } from "./queue.js";
import { type SseItem, SseParser } from "./sse.js";

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

const STREAM: TextDecodeOptions = { stream: true };

/** Closes a subscription from outside the read loop (the user, a final error). */
class Closed extends Error {}

/** A live subscription: `for await (const ev of sub)`, or `sub.on("event", ...)`; `sub.close()`. */
export class Subscription<T = any> extends Emitter<SubscriptionEvents> implements AsyncIterable<BusEvent<T>> {
  readonly types: string[];
  /** The id of the last event received (resume point). */
  lastEventId: string;
  /** The `seq` of the last journaled event received. */
  lastSeq: number | undefined;
  state: ConnectionState = "connecting";
  /** Why it closed, when an error closed it. */
  error: unknown = undefined;
  private readonly abort = new AbortController();
  private readonly queue: AsyncQueue<BusEvent<T>>;
  private readonly backoff: Backoff | undefined;
  private readonly since: string | undefined;
  private iterating = false;
  private readonly opened: Promise<void>;
  private markOpened!: () => void;
  private failOpened!: (error: unknown) => void;

  constructor(
    private readonly http: Http,
    types: string | string[],
    private readonly options: SubscribeOptions = {},
  ) {
    super();
    this.types = (Array.isArray(types) ? types : types.split(",")).map((t) => t.trim()).filter(Boolean);
    if (this.types.length === 0) throw new TypeError("subscribe: name at least one event type (major.minor, with * and >)");
    this.lastEventId = options.lastEventId ?? "";
    this.lastSeq = seqOf(this.lastEventId);
    const since = options.since;
    this.since = since instanceof Date ? since.toISOString() : since === undefined ? undefined : String(since);
    this.queue = new AsyncQueue(options.highWater ?? 1000);
    this.backoff = options.reconnect === false ? undefined : new Backoff(options.reconnect);
    this.opened = new Promise((resolve, reject) => {
      this.markOpened = resolve;
      this.failOpened = reject;
    });
    this.opened.catch(() => undefined);
    if (options.signal?.aborted) this.abort.abort();
    options.signal?.addEventListener("abort", () => this.close(), { once: true });
    void this.run();
  }

  /** Resolves once the gateway has subscribed (events published from then on arrive). */
  ready(): Promise<void> {
    return this.opened;
  }

  /** Stop: the iterator ends, no reconnection follows. */
  close(): void {
    this.finish(undefined);
  }

  [Symbol.asyncIterator](): AsyncIterator<BusEvent<T>> {
    this.iterating = true;
    return {
      next: () => this.queue.next(),
      return: async () => {
        this.close();
        return { value: undefined, done: true };
      },
    };
  }

  private finish(error: unknown): void {
    if (this.state === "closed") return;
    this.error = error;
    this.abort.abort(new Closed("closed"));
    this.queue.close(error);
    this.failOpened(error ?? localError("closed", "the subscription was closed before it opened"));
    this.setState({ state: "closed", attempt: this.backoff?.attempt ?? 0, ...(error ? { error } : {}) });
  }

  private setState(change: StateChange): void {
    this.state = change.state;
    this.emit("state", change);
  }

  private async run(): Promise<void> {
    let error: unknown = undefined;
    while (!this.abort.signal.aborted) {
      try {
        await this.connect();
        error = localError("network", "the event stream ended");
      } catch (exc) {
        if (this.abort.signal.aborted) break;
        if (isFinal(exc)) return this.finish(exc);
        error = exc;
      }
      const wait = this.backoff?.next();
      if (wait === undefined) return this.finish(error);
      const retryAfter = error instanceof BusgateError && error.retryAfter !== undefined ? error.retryAfter * 1000 : 0;
      const delay = Math.max(wait, retryAfter);
      this.setState({ state: "reconnecting", attempt: this.backoff?.attempt ?? 0, delay, error });
      if (!(await sleep(delay, this.abort.signal))) break;
    }
    this.finish(undefined);
  }

  /** One connection, until its stream ends (resolves) or fails (throws). */
  private async connect(): Promise<void> {
    const attempt = new AbortController();
    const stop = () => attempt.abort();
    this.abort.signal.addEventListener("abort", stop, { once: true });
    let timer = setTimeout(() => attempt.abort(localError("timeout", "the gateway did not answer the subscription in time")), this.options.connectTimeout ?? 10_000);
    const idle = this.options.idleTimeout ?? 75_000;
    const quiet = () => attempt.abort(localError("timeout", `nothing came on the event stream for ${idle / 1000} s`));
    let deadline: Deadline | undefined;
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (this.lastEventId) headers["Last-Event-ID"] = this.lastEventId;
      const fresh = !this.lastEventId;
      const query = { types: this.types.join(","), since: fresh ? this.since : undefined, last: fresh && this.options.last ? "1" : undefined };
      const sent = await this.http.send("v1/subscribe", { headers, query }, { signal: attempt.signal }, undefined).catch((exc) => {
        throw attempt.signal.reason instanceof BusgateError ? attempt.signal.reason : exc;
      });
      deadline = sent.deadline;
      const response = sent.response;
      clearTimeout(timer);
      if (!response.ok || !response.body) {
        const body = await readBody(response).catch(() => null);
        throw errorFromBody(response.status, body, response.headers.get("retry-after"));
      }
      // The idle deadline: each chunk only notes its time; the timer, when it fires, waits out the
      // rest (a clearTimeout + setTimeout per chunk was a visible part of the per-event cost).
      let lastByte = Date.now();
      const watch = () => {
        const left = lastByte + idle - Date.now();
        if (left <= 0) quiet();
        else timer = setTimeout(watch, left);
      };
      timer = setTimeout(watch, idle);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      const parser = new SseParser(this.lastEventId);
      // A chunk's events are handed out in one synchronous pass (a waiting `next()` is resolved
      // by the first, the rest wait in the queue); `stopped` is a plain flag, since reading
      // `signal.aborted` per line was a visible part of the per-event cost.
      let stopped = attempt.signal.aborted;
      attempt.signal.addEventListener("abort", () => (stopped = true), { once: true });
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          lastByte = Date.now();
          const items = parser.push(decoder.decode(value, STREAM));
          for (let i = 0; i < items.length; i++) {
            if (stopped) return;
            this.handle(items[i] as SseItem);
            if (this.queue.full) await this.queue.waitForRoom(); // only while a slow reader lags
          }
        }
      } catch (exc) {
        throw attempt.signal.reason instanceof BusgateError ? attempt.signal.reason : exc;
      } finally {
        reader.cancel().catch(() => undefined);
      }
    } catch (exc) {
      if (this.abort.signal.aborted) throw exc;
      if (exc instanceof BusgateError) throw exc;
      throw localError("network", `the event stream failed: ${exc instanceof Error ? exc.message : String(exc)}`, exc);
    } finally {
      clearTimeout(timer);
      deadline?.clear();
      this.abort.signal.removeEventListener("abort", stop);
    }
  }

  private handle(item: SseItem): void {
    if (item.kind === "retry") {
      this.backoff?.suggest(item.ms);
      return;
    }
    if (item.kind === "comment") {
      if (item.text === "subscribed") this.isOpen();
      else if (item.text !== "keepalive") this.emit("notice", item.text);
      return;
    }
    const { event, data, id } = item.event;
    if (event === "error") {
      this.emit("notice", data);
      return; // the gateway ends the stream after it: reconnect with Last-Event-ID
    }
    if (event !== "message") return;
    if (this.state !== "open") this.isOpen();
    const parsed = parseEvent(data, id);
    if (parsed.seq !== undefined) {
      if (this.lastSeq !== undefined && parsed.seq <= this.lastSeq) return; // seen already
      this.lastSeq = parsed.seq;
    }
    this.lastEventId = id;
    this.emit("event", parsed);
    if (this.iterating || !this.listening("event")) this.queue.push(parsed as BusEvent<T>);
  }

  private isOpen(): void {
    if (this.state === "open" || this.state === "closed") return;
    const attempt = this.backoff?.attempt ?? 0;
    this.backoff?.reset();
    this.setState({ state: "open", attempt });
    this.markOpened();
  }
}

function parseEvent(data: string, id: string): BusEvent {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(data) as Record<string, unknown>;
  } catch (exc) {
    throw localError("protocol", `an event that is not JSON: ${data.slice(0, 80)}`, exc);
  }
  const header = (body["header"] ?? {}) as Record<string, unknown>;
  return {
    type: String(body["type"] ?? header["GRP"] ?? ""),
    id,
    seq: seqOf(id),
    mid: typeof header["MID"] === "string" ? header["MID"] : undefined,
    header,
    payload: body["payload"],
  };
}

/** The journal sequence number an SSE id is (all digits), else undefined; no regex per event. */
function seqOf(id: string): number | undefined {
  if (id.length === 0) return undefined;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
  }
  return Number(id);
}

/** A refusal that a new try would meet again (a 4xx but 408 and 429). */
function isFinal(exc: unknown): boolean {
  return exc instanceof BusgateError && exc.status >= 400 && exc.status < 500 && exc.status !== 408 && exc.status !== 429;
}
