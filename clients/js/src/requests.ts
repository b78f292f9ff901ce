/**
 * Requests to services through the gateway (docs/PROTOCOL.md 9.2-9.4 and 9.9): one answer as
 * JSON, several as NDJSON lines read as they arrive, and publications (9.5).
 *
 * A timeout (milliseconds here) goes to the gateway as `?timeout=` (seconds), where it bounds the
 * whole exchange (a stream's too); this side waits 2 s longer for the gateway's own 504, then
 * gives up with a `timeout` of its own.
 */

import { errorFromBody, localError, nakError } from "./errors.js";
import { type CallOptions, GRACE_MS, type Http, readBody, seconds } from "./http.js";
import { bodyLines } from "./ndjson.js";

/** One response of a service, as the gateway wrote it. */
export interface Reply<T = any> {
  /** `ACK`, `NAK`, or `end`: the end-of-stream marker (no data of its own). */
  kind: "ACK" | "NAK" | "end";
  /** No more responses follow. */
  final: boolean;
  /** The bus header (`MID`, `RID`, `TYP`, `RCD`, `MSG`, `SRC`, `TRC`, ...). */
  header: Record<string, unknown>;
  payload: T;
  /** A NAK's (or an ACK's) return code. */
  rcd: number | undefined;
  /** The response's MSG. */
  msg: string | undefined;
}

/** The answer to a publication: its type, its MID, and with `confirm` its journal sequence number. */
export interface Published {
  type: string;
  mid: string;
  seq?: number;
}

export interface PublishOptions extends CallOptions {
  /** Wait until the broker has journaled the event (200 with `seq`; PROTOCOL.md 5.12). */
  confirm?: boolean;
}

/** The body of `POST /v1/request/{group}`: `CMD`, then the arguments. */
export function commandBody(cmd: string, args: object | undefined): string {
  // One copy of the arguments, CMD first; an argument named CMD does not replace `cmd`.
  const body: Record<string, unknown> = { CMD: cmd, ...args };
  body["CMD"] = cmd;
  return JSON.stringify(body);
}

/** The headers of a JSON body (copied into each call's headers, never changed). */
const JSON_BODY: Readonly<Record<string, string>> = { "Content-Type": "application/json" };
/** The same, asking for the responses as NDJSON lines. */
const NDJSON_BODY: Readonly<Record<string, string>> = { "Content-Type": "application/json", Accept: "application/x-ndjson" };

function replyOf(line: Record<string, unknown>): Reply {
  const header = (line["header"] ?? {}) as Record<string, unknown>;
  const rcd = typeof header["RCD"] === "number" ? header["RCD"] : undefined;
  const msg = typeof header["MSG"] === "string" ? header["MSG"] : undefined;
  const kind = line["event"] === "end" ? "end" : header["TYP"] === "NAK" ? "NAK" : "ACK";
  return { kind, final: line["final"] === true, header, payload: line["payload"], rcd, msg };
}

/** A NAK reply as the error a single answer would give. */
export function nakOf(reply: Reply): Error {
  return nakError(reply.rcd, reply.msg ?? `NAK ${reply.rcd ?? ""}`.trim(), { header: reply.header, payload: reply.payload });
}

/** POST a JSON body and read one JSON answer. */
export async function postJson<T>(http: Http, path: string, body: string, call: CallOptions, query?: Record<string, string | undefined>): Promise<T> {
  const timeout = seconds(call.timeout ?? http.timeout);
  return http.json<T>(path, { method: "POST", body, headers: JSON_BODY, query: query === undefined ? { timeout } : { timeout, ...query } }, call);
}

/**
 * Every response to a request, as it arrives (NDJSON): ACKs and NAKs as {@link Reply}, then the
 * end marker when the service sends one. A `timeout` or `error` marker throws.
 */
export async function* replies<T>(http: Http, path: string, body: string, call: CallOptions): AsyncGenerator<Reply<T>> {
  const timeout = call.timeout ?? http.timeout;
  const { response, deadline } = await http.send(
    path,
    { method: "POST", body, headers: NDJSON_BODY, query: { timeout: seconds(timeout) } },
    call,
    timeout + GRACE_MS,
  );
  try {
    if (!response.ok || !response.body) {
      throw errorFromBody(response.status, await readBody(response), response.headers.get("retry-after"));
    }
    if (!(response.headers.get("content-type") ?? "").includes("ndjson")) {
      const single = (await readBody(response)) as Record<string, unknown>;
      yield replyOf({ event: "response", final: true, ...single }) as Reply<T>;
      return;
    }
    for await (const text of bodyLines(response.body)) {
      // Lines already read with the last chunk: none is given out once the signal aborted.
      call.signal?.throwIfAborted();
      if (!text.trim()) continue;
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(text) as Record<string, unknown>;
      } catch (exc) {
        throw localError("protocol", `a stream line that is not JSON: ${text.slice(0, 80)}`, exc);
      }
      if (line["event"] === "timeout" || line["event"] === "error") throw errorFromBody(0, line);
      const reply = replyOf(line) as Reply<T>;
      yield reply;
      if (reply.final) return;
    }
    throw localError("protocol", "the stream ended without its final response");
  } catch (exc) {
    throw deadline.failure(exc);
  } finally {
    deadline.clear();
  }
}

/** The payload of each ACK, until the stream ends; a NAK throws. */
export async function* payloads<T>(source: AsyncGenerator<Reply<T>>): AsyncGenerator<T> {
  for await (const reply of source) {
    if (reply.kind === "NAK") throw nakOf(reply);
    if (reply.kind === "end") return;
    yield reply.payload;
  }
}
