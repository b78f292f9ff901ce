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

/** What the gateway's error body and the NAK behind it carry. */
export interface BusgateErrorInit {
  status: number;
  code: string;
  message: string;
  /** A NAK's RCD (its return code). */
  rcd?: number | undefined;
  /** The argument a typed route refused (`qty`, `items/0/sku`; `""` for the whole object). */
  field?: string | undefined;
  /** The NAK itself, `{header, payload}`, when the gateway sent it. */
  response?: { header: Record<string, unknown>; payload: unknown } | undefined;
  /** Seconds to wait before trying again (a 429's `Retry-After`). */
  retryAfter?: number | undefined;
  /** Responses received before a stream failed. */
  received?: number | undefined;
  /** The whole error body as answered, for anything not mapped above. */
  body?: unknown;
  cause?: unknown;
}

/** A call failed: the gateway's status, its `code`, and what came with it. */
export class BusgateError extends Error {
  /** The HTTP status; 0 when no HTTP answer came (network, client-side timeout, /ws). */
  readonly status: number;
  /** The gateway's error code (`nak`, `timeout`, `bad_request`, ...), or this side's. */
  readonly code: string;
  readonly rcd: number | undefined;
  readonly field: string | undefined;
  readonly response: BusgateErrorInit["response"];
  readonly retryAfter: number | undefined;
  readonly received: number | undefined;
  readonly body: unknown;

  constructor(init: BusgateErrorInit) {
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
const STATUS_OF_CODE: Record<string, number> = {
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

function text(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function number(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

/**
 * The error of a gateway answer: `{"error": {code, message, rcd?, field?, response?}}`.
 *
 * @param status the HTTP status (0 for an error inside a stream: taken from the code).
 * @param body the parsed body (or its text when it was not JSON).
 * @param retryAfter the `Retry-After` header, if any.
 */
export function errorFromBody(status: number, body: unknown, retryAfter?: string | null): BusgateError {
  const outer = body !== null && typeof body === "object" ? (body as Record<string, unknown>) : {};
  const inner = outer["error"];
  const error = inner !== null && typeof inner === "object" ? (inner as Record<string, unknown>) : outer;
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
    response: response !== null && typeof response === "object" ? (response as BusgateErrorInit["response"]) : undefined,
    retryAfter: Number.isFinite(seconds) ? seconds : undefined,
    received: number(error["received"]),
    body,
  });
}

/** An error of this side (no HTTP answer): `network`, `timeout`, `closed`, ... */
export function localError(code: string, message: string, cause?: unknown): BusgateError {
  return new BusgateError({ status: 0, code, message, cause });
}

/** A NAK inside a stream (NDJSON line or Object System reply) as the error a single answer gives. */
export function nakError(rcd: number | undefined, message: string, response?: BusgateErrorInit["response"]): BusgateError {
  const status = rcd !== undefined && rcd >= 400 && rcd <= 599 ? rcd : 502;
  return new BusgateError({ status, code: "nak", message, rcd, response });
}
