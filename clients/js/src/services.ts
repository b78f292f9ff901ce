/**
 * `bus.service(group)`: a live service as an object with one function per command, built from
 * what its instances declare (`GET /v1/services`, docs/PROTOCOL.md 5.13 and 9.9). Each call goes
 * to the command's typed route, `POST /v1/{group}/{cmd}`, where the gateway checks the arguments
 * against the command's schema before anything reaches the bus (a 400 `bad_request` whose
 * `field` names the wrong argument).
 *
 * Types: `busgate typescript` (or `GET /v1/typescript`) writes declarations that add each live
 * service to {@link Services}, so `bus.service("demo")` is typed in an editor.
 */

import { BusgateError } from "./errors.js";
import type { CallOptions, Http } from "./http.js";
import { commandBody, payloads, postJson, replies } from "./requests.js";

/**
 * The live services, by group: empty here, filled by the declarations `busgate typescript`
 * writes (`declare module "busgate" { interface Services { demo: {...} } }`).
 */
export interface Services {}

/** What a command declares: JSON Schemas of its arguments and answer, and a line for people. */
export interface CommandSchema {
  args?: Record<string, unknown>;
  answer?: Record<string, unknown>;
  summary?: string;
}

/** A command's parameters: the arguments are optional when no member is required. */
export type CommandParams<A> = {} extends A ? [args?: A, options?: CallOptions] : [args: A, options?: CallOptions];

/** One command of a service: call it for the (first) answer, `.stream()` for every response. */
export interface Command<A = Record<string, unknown>, R = any> {
  (...params: CommandParams<A>): Promise<R>;
  /** Every response's payload, until the stream's end. */
  stream(...params: CommandParams<A>): AsyncGenerator<R>;
  readonly command: string;
  readonly schema: CommandSchema | undefined;
}

/** A service whose commands are not declared to TypeScript. */
export type UntypedService = { readonly [command: string]: Command };

/**
 * The gateway's own `/v1/` routes: a group named like one is reached through
 * `POST /v1/request/{group}`, not a typed route of its own (9.9).
 */
export const RESERVED_GROUPS = new Set(["request", "publish", "mail", "subscribe", "history", "presence", "services", "stats", "reports", "admin", "typescript"]);

/** One live service as `GET /v1/services` lists it. */
export interface ServiceInfo {
  group: string;
  instances: number;
  status: string;
  last_seen?: number;
  commands: string[];
  schemas?: Record<string, CommandSchema>;
  [more: string]: unknown;
}

/** Build the object of a service's commands. */
export function serviceClient(http: Http, info: ServiceInfo): UntypedService {
  const service: Record<string, Command> = Object.create(null);
  for (const name of info.commands) {
    // "then" would make the object a thenable, which `await` would call.
    if (name === "then") continue;
    service[name] = command(http, info.group, name, info.schemas?.[name]);
  }
  return Object.freeze(service);
}

function command(http: Http, group: string, name: string, schema: CommandSchema | undefined): Command {
  const typed = !RESERVED_GROUPS.has(group);
  const path = typed ? `v1/${encodeURIComponent(group)}/${encodeURIComponent(name)}` : `v1/request/${encodeURIComponent(group)}`;
  const body = (args: object | undefined) => (typed ? JSON.stringify(args ?? {}) : commandBody(name, args));
  const call = async (args?: object, options: CallOptions = {}) => {
    const answer = await postJson<{ payload: unknown }>(http, path, body(args), options);
    return answer.payload;
  };
  const stream = (args?: object, options: CallOptions = {}) => payloads(replies(http, path, body(args), options));
  return Object.assign(call, { stream, command: name, schema }) as unknown as Command;
}

/** The live service `group`, or a 404 `not_found` naming the live ones. */
export function findService(listing: { services?: ServiceInfo[] }, group: string): ServiceInfo {
  const services = listing.services ?? [];
  const found = services.find((service) => service.group === group);
  if (found) return found;
  const live = services.map((service) => service.group).join(", ") || "none";
  throw new BusgateError({ status: 404, code: "not_found", message: `no live service '${group}' (live: ${live})` });
}
