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
import type { CallOptions, Http } from "./http.js";
/**
 * The live services, by group: empty here, filled by the declarations `busgate typescript`
 * writes (`declare module "busgate" { interface Services { demo: {...} } }`).
 */
export interface Services {
}
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
export type UntypedService = {
    readonly [command: string]: Command;
};
/**
 * The gateway's own `/v1/` routes: a group named like one is reached through
 * `POST /v1/request/{group}`, not a typed route of its own (9.9).
 */
export declare const RESERVED_GROUPS: Set<string>;
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
export declare function serviceClient(http: Http, info: ServiceInfo): UntypedService;
/** The live service `group`, or a 404 `not_found` naming the live ones. */
export declare function findService(listing: {
    services?: ServiceInfo[];
}, group: string): ServiceInfo;
