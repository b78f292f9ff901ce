/**
 * Requests to services through the gateway (docs/PROTOCOL.md 9.2-9.4 and 9.9): one answer as
 * JSON, several as NDJSON lines read as they arrive, and publications (9.5).
 *
 * A timeout (milliseconds here) goes to the gateway as `?timeout=` (seconds), where it bounds the
 * whole exchange (a stream's too); this side waits 2 s longer for the gateway's own 504, then
 * gives up with a `timeout` of its own.
 */
import { errorFromBody, localError, nakError } from "./errors.js";
import { GRACE_MS, readBody, seconds } from "./http.js";
import { bodyLines } from "./ndjson.js";
/** The body of `POST /v1/request/{group}`: `CMD`, then the arguments. */
export function commandBody(cmd, args) {
    // One copy of the arguments, CMD first; an argument named CMD does not replace `cmd`.
    const body = { CMD: cmd, ...args };
    body["CMD"] = cmd;
    return JSON.stringify(body);
}
/** The headers of a JSON body (copied into each call's headers, never changed). */
const JSON_BODY = { "Content-Type": "application/json" };
/** The same, asking for the responses as NDJSON lines. */
const NDJSON_BODY = { "Content-Type": "application/json", Accept: "application/x-ndjson" };
function replyOf(line) {
    const header = (line["header"] ?? {});
    const rcd = typeof header["RCD"] === "number" ? header["RCD"] : undefined;
    const msg = typeof header["MSG"] === "string" ? header["MSG"] : undefined;
    const kind = line["event"] === "end" ? "end" : header["TYP"] === "NAK" ? "NAK" : "ACK";
    return { kind, final: line["final"] === true, header, payload: line["payload"], rcd, msg };
}
/** A NAK reply as the error a single answer would give. */
export function nakOf(reply) {
    return nakError(reply.rcd, reply.msg ?? `NAK ${reply.rcd ?? ""}`.trim(), { header: reply.header, payload: reply.payload });
}
/** POST a JSON body and read one JSON answer. */
export async function postJson(http, path, body, call, query) {
    const timeout = seconds(call.timeout ?? http.timeout);
    return http.json(path, { method: "POST", body, headers: JSON_BODY, query: query === undefined ? { timeout } : { timeout, ...query } }, call);
}
/**
 * Every response to a request, as it arrives (NDJSON): ACKs and NAKs as {@link Reply}, then the
 * end marker when the service sends one. A `timeout` or `error` marker throws.
 */
export async function* replies(http, path, body, call) {
    const timeout = call.timeout ?? http.timeout;
    const { response, deadline } = await http.send(path, { method: "POST", body, headers: NDJSON_BODY, query: { timeout: seconds(timeout) } }, call, timeout + GRACE_MS);
    try {
        if (!response.ok || !response.body) {
            throw errorFromBody(response.status, await readBody(response), response.headers.get("retry-after"));
        }
        if (!(response.headers.get("content-type") ?? "").includes("ndjson")) {
            const single = (await readBody(response));
            yield replyOf({ event: "response", final: true, ...single });
            return;
        }
        for await (const text of bodyLines(response.body)) {
            // Lines already read with the last chunk: none is given out once the signal aborted.
            call.signal?.throwIfAborted();
            if (!text.trim())
                continue;
            let line;
            try {
                line = JSON.parse(text);
            }
            catch (exc) {
                throw localError("protocol", `a stream line that is not JSON: ${text.slice(0, 80)}`, exc);
            }
            if (line["event"] === "timeout" || line["event"] === "error")
                throw errorFromBody(0, line);
            const reply = replyOf(line);
            yield reply;
            if (reply.final)
                return;
        }
        throw localError("protocol", "the stream ended without its final response");
    }
    catch (exc) {
        throw deadline.failure(exc);
    }
    finally {
        deadline.clear();
    }
}
/** The payload of each ACK, until the stream ends; a NAK throws. */
export async function* payloads(source) {
    for await (const reply of source) {
        if (reply.kind === "NAK")
            throw nakOf(reply);
        if (reply.kind === "end")
            return;
        yield reply.payload;
    }
}
