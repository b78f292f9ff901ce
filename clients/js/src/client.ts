/**
 * `Busgate`: the gateway's whole API in one object (docs/PROTOCOL.md section 9).
 *
 *     const bus = new Busgate("http://localhost:8080", { key: "KEY" });
 *     await bus.request("demo", "echo", { x: 1 });              // the ACK's payload
 *     for await (const r of bus.stream("demo", "count", { n: 3 })) ...
 *     await bus.publish("sensor.temp", { c: 18.2 }, { confirm: true });
 *     const sub = bus.subscribe("sensor.*", { since: "15m" });  // resumes on its own
 *     const objects = await bus.objects({ types: ["bus/sensor.*"] });
 *     const demo = await bus.service("demo"); await demo.echo({ x: 1 });
 */

import type { ReconnectOptions } from "./backoff.js";
import { localError } from "./errors.js";
import { type CallOptions, Http, type HttpOptions } from "./http.js";
import { Objects, type ObjectsOptions } from "./objects.js";
import { commandBody, payloads, postJson, type Published, type PublishOptions, type Reply, replies } from "./requests.js";
import { findService, type ServiceInfo, type Services, serviceClient, type UntypedService } from "./services.js";
import { type SubscribeOptions, Subscription } from "./subscription.js";
import type { WebSocketConstructor } from "./websocket.js";

/** One journaled event of `history()`. */
export interface History<T = any> {
  seq: number;
  type: string;
  /** When the broker routed it (seconds since the epoch). */
  time: number;
  header: Record<string, unknown>;
  payload: T;
}

export interface BusgateOptions extends HttpOptions {
  /** The WebSocket class for `objects()` (default the platform's, else the package's Node client). */
  WebSocket?: WebSocketConstructor;
  /** Backoff between reconnections of `subscribe` and `objects` (default 0.5 s doubling to 10 s, with jitter). */
  reconnect?: ReconnectOptions | false;
}

/** The `/v1/admin/...` calls (a manager's: PROTOCOL.md 9.8). */
export class Admin {
  constructor(private readonly http: Http) {}

  status(call?: CallOptions): Promise<Record<string, any>> {
    return this.http.json("v1/admin/status", {}, call);
  }

  connections(call?: CallOptions): Promise<{ connections: Record<string, any>[] }> {
    return this.http.json("v1/admin/connections", {}, call);
  }

  disconnect(link: number | string, call?: CallOptions): Promise<{ link: number }> {
    return this.http.json(`v1/admin/connections/${encodeURIComponent(String(link))}/disconnect`, { method: "POST" }, call);
  }

  drain(group: string, call?: CallOptions): Promise<{ group: string; drained: unknown }> {
    return this.http.json(`v1/admin/groups/${encodeURIComponent(group)}/drain`, { method: "POST" }, call);
  }

  journal(options: { limit?: number; group?: string } & CallOptions = {}): Promise<{ records: Record<string, any>[] }> {
    return this.http.json("v1/admin/journal", { query: { limit: options.limit, group: options.group } }, options);
  }
}

export class Busgate {
  /** The gateway's base URL. */
  readonly url: string;
  readonly admin: Admin;
  private readonly http: Http;

  /**
   * @param url the gateway (default: the page's origin in a browser).
   * @param options `key` or `token` (a string, or a function read at every call), `timeout`
   *   (milliseconds, default 5,000), `fetch`, `headers`, `WebSocket`, `reconnect`.
   */
  constructor(
    url?: string | URL,
    private readonly options: BusgateOptions = {},
  ) {
    const origin = typeof location === "object" && location ? location.origin : undefined;
    const base = url ?? origin;
    if (base === undefined) throw new TypeError("new Busgate(url): name the gateway, e.g. http://localhost:8080");
    this.http = new Http(base, options);
    this.url = this.http.base.href;
    this.admin = new Admin(this.http);
  }

  /**
   * Send a request to a group and return the ACK's payload.
   *
   * @throws BusgateError `nak` (status = RCD, `rcd`, `response`), `no_responders`, `timeout`,
   *   `bus_unavailable`, `bad_request`, `unauthorized`, `forbidden`, `rate_limited`, `network`.
   */
  async request<T = any>(group: string, cmd: string, args?: object, call: CallOptions = {}): Promise<T> {
    const answer = await postJson<{ payload: T }>(this.http, `v1/request/${encodeURIComponent(group)}`, commandBody(cmd, args), call);
    return answer.payload;
  }

  /** Every response of a request (ACKs, NAKs, the end marker) with its header, as it arrives. */
  responses<T = any>(group: string, cmd: string, args?: object, call: CallOptions = {}): AsyncGenerator<Reply<T>> {
    return replies<T>(this.http, `v1/request/${encodeURIComponent(group)}`, commandBody(cmd, args), call);
  }

  /**
   * Each response's payload as it arrives, until the service's last response or end marker.
   * The timeout bounds the whole stream. A NAK throws.
   */
  stream<T = any>(group: string, cmd: string, args?: object, call: CallOptions = {}): AsyncGenerator<T> {
    return payloads(this.responses<T>(group, cmd, args, call));
  }

  /** Publish an event on a `major.minor` type; with `confirm`, once journaled (`seq`). */
  publish(type: string, payload: object, options: PublishOptions = {}): Promise<Published> {
    const query = options.confirm ? { confirm: "1" } : undefined;
    return postJson<Published>(this.http, `v1/publish/${encodeURIComponent(type)}`, JSON.stringify(payload ?? {}), options, query);
  }

  /** Bus events of some types (`sensor.*`, `alarm.>`), live, resumed after any reconnection. */
  subscribe<T = any>(types: string | string[], options: SubscribeOptions = {}): Subscription<T> {
    const reconnect = options.reconnect ?? this.options.reconnect;
    return new Subscription<T>(this.http, types, { ...options, ...(reconnect === undefined ? {} : { reconnect }) });
  }

  /**
   * The Object System over `/ws`, subscribed: resolves once the gateway answered the
   * subscription, rejects when it refuses (401/403: the credentials) or when no connection was
   * subscribed within `timeout` (10 s; it keeps trying meanwhile).
   */
  async objects(options: ObjectsOptions = {}): Promise<Objects> {
    const objects = this.openObjects(options);
    const ms = options.timeout ?? 10_000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let last: unknown;
    const off = objects.on("state", (change) => {
      last = change.error ?? last;
    });
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const why = last instanceof Error ? `: ${last.message}` : "";
        reject(localError("timeout", `no Object System connection within ${ms / 1000} s${why}`, last));
      }, ms);
    });
    try {
      await Promise.race([objects.ready(), late]);
    } catch (exc) {
      objects.close();
      throw exc;
    } finally {
      clearTimeout(timer);
      off();
    }
    return objects;
  }

  /**
   * The Object System connection at once, unawaited: it connects (and reconnects) in the
   * background; `ready()` resolves once it is subscribed, `on("state")` follows it.
   */
  openObjects(options: ObjectsOptions = {}): Objects {
    const reconnect = options.reconnect ?? this.options.reconnect;
    const WebSocket = options.WebSocket ?? this.options.WebSocket;
    return new Objects(this.http, {
      ...options,
      ...(reconnect === undefined ? {} : { reconnect }),
      ...(WebSocket === undefined ? {} : { WebSocket }),
    });
  }

  /** A live service with a function per command (typed by `busgate typescript`'s declarations). */
  service<G extends keyof Services & string>(group: G, call?: CallOptions): Promise<Services[G]>;
  service(group: string, call?: CallOptions): Promise<UntypedService>;
  async service(group: string, call: CallOptions = {}): Promise<unknown> {
    return serviceClient(this.http, findService(await this.services(call), group));
  }

  /**
   * `GET /v1/history/{type}`: journaled events of a type or pattern, a page, oldest first
   * (`since`: a seq or a time such as `15m`; `before`: a seq; `limit` up to 1,000). The answer's
   * `next` is the query of the next page while `more` is true.
   */
  history<T = any>(
    type: string,
    options: { limit?: number; since?: string | number; before?: number } & CallOptions = {},
  ): Promise<{ events: History<T>[]; seq: number; more: boolean; next: Record<string, number> | null; [more: string]: unknown }> {
    const query = { limit: options.limit, since: options.since, before: options.before };
    return this.http.json(`v1/history/${encodeURIComponent(type)}`, { query }, options);
  }

  /** `GET /v1/presence/{pattern}`: who is present on the matching types (PROTOCOL.md 9). */
  presence(pattern: string, call?: CallOptions): Promise<Record<string, any>> {
    return this.http.json(`v1/presence/${encodeURIComponent(pattern)}`, {}, call);
  }

  /** `GET /v1/services`: live services, their instances, commands and schemas. */
  services(call?: CallOptions): Promise<{ services: ServiceInfo[]; stale?: boolean; as_of?: number; [more: string]: unknown }> {
    return this.http.json("v1/services", {}, call);
  }

  /** `GET /v1/stats` (with `history`, the last hour per minute). */
  stats(options: { history?: boolean } & CallOptions = {}): Promise<Record<string, any>> {
    return this.http.json("v1/stats", { query: { history: options.history ? "1" : undefined } }, options);
  }

  /** `GET /v1/typescript`: declarations for the live services' typed commands. */
  typescript(options: { group?: string } & CallOptions = {}): Promise<string> {
    const query = options.group ? `?group=${encodeURIComponent(options.group)}` : "";
    return this.http.text(`v1/typescript${query}`, options);
  }

  /** `GET /v1/reports`: whether the gateway serves a `busgate report`. */
  reports(call?: CallOptions): Promise<Record<string, any>> {
    return this.http.json("v1/reports", {}, call);
  }

  /** `GET /healthz`: resolves while the gateway answers. */
  healthz(call?: CallOptions): Promise<{ status: string }> {
    return this.http.json("healthz", {}, call);
  }

  /** `GET /readyz`: resolves while the gateway is connected to the bus; else a 503 `not_ready`. */
  readyz(call?: CallOptions): Promise<{ status: string; bus?: string; reconnects?: number }> {
    return this.http.json("readyz", {}, call);
  }

  /** `GET /metrics`: the Prometheus text. */
  metrics(call?: CallOptions): Promise<string> {
    return this.http.text("metrics", call);
  }

  /** `GET /openapi.json`: the API document, live commands included. */
  openapi(call?: CallOptions): Promise<Record<string, any>> {
    return this.http.json("openapi.json", {}, call);
  }
}
