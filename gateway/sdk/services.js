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
import { commandBody, payloads, postJson, replies } from "./requests.js";
/**
 * The gateway's own `/v1/` routes: a group named like one is reached through
 * `POST /v1/request/{group}`, not a typed route of its own (9.9).
 */
export const RESERVED_GROUPS = new Set(["request", "publish", "mail", "subscribe", "history", "presence", "services", "stats", "reports", "admin", "typescript"]);
/** Build the object of a service's commands. */
export function serviceClient(http, info) {
    const service = Object.create(null);
    for (const name of info.commands) {
        // "then" would make the object a thenable, which `await` would call.
        if (name === "then")
            continue;
        service[name] = command(http, info.group, name, info.schemas?.[name]);
    }
    return Object.freeze(service);
}
function command(http, group, name, schema) {
    const typed = !RESERVED_GROUPS.has(group);
    const path = typed ? `v1/${encodeURIComponent(group)}/${encodeURIComponent(name)}` : `v1/request/${encodeURIComponent(group)}`;
    const body = (args) => (typed ? JSON.stringify(args ?? {}) : commandBody(name, args));
    const call = async (args, options = {}) => {
        const answer = await postJson(http, path, body(args), options);
        return answer.payload;
    };
    const stream = (args, options = {}) => payloads(replies(http, path, body(args), options));
    return Object.assign(call, { stream, command: name, schema });
}
/** The live service `group`, or a 404 `not_found` naming the live ones. */
export function findService(listing, group) {
    const services = listing.services ?? [];
    const found = services.find((service) => service.group === group);
    if (found)
        return found;
    const live = services.map((service) => service.group).join(", ") || "none";
    throw new BusgateError({ status: 404, code: "not_found", message: `no live service '${group}' (live: ${live})` });
}
