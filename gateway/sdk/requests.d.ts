/**
 * Requests to services through the gateway (docs/PROTOCOL.md 9.2-9.4 and 9.9): one answer as
 * JSON, several as NDJSON lines read as they arrive, and publications (9.5).
 *
 * A timeout (milliseconds here) goes to the gateway as `?timeout=` (seconds), where it bounds the
 * whole exchange (a stream's too); this side waits 2 s longer for the gateway's own 504, then
 * gives up with a `timeout` of its own.
 */
import { type CallOptions, type Http } from "./http.js";
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
export declare function commandBody(cmd: string, args: object | undefined): string;
/** A NAK reply as the error a single answer would give. */
export declare function nakOf(reply: Reply): Error;
/** POST a JSON body and read one JSON answer. */
export declare function postJson<T>(http: Http, path: string, body: string, call: CallOptions, query?: Record<string, string | undefined>): Promise<T>;
/**
 * Every response to a request, as it arrives (NDJSON): ACKs and NAKs as {@link Reply}, then the
 * end marker when the service sends one. A `timeout` or `error` marker throws.
 */
export declare function replies<T>(http: Http, path: string, body: string, call: CallOptions): AsyncGenerator<Reply<T>>;
/** The payload of each ACK, until the stream ends; a NAK throws. */
export declare function payloads<T>(source: AsyncGenerator<Reply<T>>): AsyncGenerator<T>;
