/**
 * The one error this package throws: {@link BusgateError} (docs/PROTOCOL.md 9.3).
 *
 * Every failure a caller can act on is a BusgateError whose `code` says what happened:
 *
 *   from the gateway (status = the HTTP status):
 *     nak (status = the NAK's RCD when 400..599, else 502; `rcd`, `response`), no_responders (503),
 *     timeout (504), bus_unavailable (503), bad_request (400; `field` on a typed route),
 *     too_large (413), unauthorized (401), forbidden (403), rate_limited (429; `retryAfter`),
 *     not_found (404), method_not_allowed (405), not_ready (503), overflow, ...
 *   from this side (status = 0: no HTTP answer):
 *     network (the gateway cannot be reached), timeout (no answer within the call's deadline),
 *     disconnected (an Object System request whose /ws connection dropped), closed (a call on a
 *     closed connection), buffer_full (too many objects waiting for a connection), protocol
 *     (the gateway answered something this package cannot read).
 *
 * An aborted call rejects with its signal's `reason` (an `AbortError` DOMException unless the
 * caller gave another), as `fetch` does: it is not a failure of the gateway.
 */
/** A call failed: the gateway's status, its `code`, and what came with it. */
export class BusgateError extends Error {
    /** The HTTP status; 0 when no HTTP answer came (network, client-side timeout, /ws). */
    status;
    /** The gateway's error code (`nak`, `timeout`, `bad_request`, ...), or this side's. */
    code;
    rcd;
    field;
    response;
    retryAfter;
    received;
    body;
    constructor(init) {
        super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
        this.name = "BusgateError";
        this.status = init.status;
        this.code = init.code;
        this.rcd = init.rcd;
        this.field = init.field;
        this.response = init.response;
        this.retryAfter = init.retryAfter;
        this.received = init.received;
        this.body = init.body;
    }
}
/** The status a stream's marker stands for (the plain answer would have had it). */
const STATUS_OF_CODE = {
    timeout: 504,
    no_responders: 503,
    bus_unavailable: 503,
    not_ready: 503,
    bad_request: 400,
    unauthorized: 401,
    forbidden: 403,
    not_found: 404,
    too_large: 413,
    rate_limited: 429,
};
function text(value) {
    return typeof value === "string" ? value : undefined;
}
function number(value) {
    return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}
/**
 * The error of a gateway answer: `{"error": {code, message, rcd?, field?, response?}}`.
 *
 * @param status the HTTP status (0 for an error inside a stream: taken from the code).
 * @param body the parsed body (or its text when it was not JSON).
 * @param retryAfter the `Retry-After` header, if any.
 */
export function errorFromBody(status, body, retryAfter) {
    const outer = body !== null && typeof body === "object" ? body : {};
    const inner = outer["error"];
    const error = inner !== null && typeof inner === "object" ? inner : outer;
    const code = text(error["code"]) ?? (status === 0 ? "error" : `http_${status}`);
    const rcd = number(error["rcd"]);
    let httpStatus = status;
    if (httpStatus === 0) {
        httpStatus = code === "nak" ? (rcd !== undefined && rcd >= 400 && rcd <= 599 ? rcd : 502) : (STATUS_OF_CODE[code] ?? 502);
    }
    const fallback = typeof body === "string" && body ? body.slice(0, 200) : `HTTP ${httpStatus}`;
    const response = error["response"];
    const seconds = retryAfter ? Number(retryAfter) : NaN;
    return new BusgateError({
        status: httpStatus,
        code,
        message: text(error["message"]) ?? text(inner) ?? fallback,
        rcd,
        field: text(error["field"]),
        response: response !== null && typeof response === "object" ? response : undefined,
        retryAfter: Number.isFinite(seconds) ? seconds : undefined,
        received: number(error["received"]),
        body,
    });
}
/** An error of this side (no HTTP answer): `network`, `timeout`, `closed`, ... */
export function localError(code, message, cause) {
    return new BusgateError({ status: 0, code, message, cause });
}
/** A NAK inside a stream (NDJSON line or Object System reply) as the error a single answer gives. */
export function nakError(rcd, message, response) {
    const status = rcd !== undefined && rcd >= 400 && rcd <= 599 ? rcd : 502;
    return new BusgateError({ status, code: "nak", message, rcd, response });
}
