/**
 * Object System objects on a WebSocket (docs/PROTOCOL.md 6.1 and 6.8), sans-I/O: one WebSocket
 * message is one object. A text message is the metadata alone (JSON); a binary message is the
 * metadata, one NUL byte, then `size` payload bytes. We write compact JSON, keys in the order
 * given, `size` last when there is a payload.
 */
/** A payload to send: text (UTF-8), bytes, or anything else as JSON (`application/json`). */
export type Payload = string | Uint8Array | ArrayBuffer | ArrayBufferView | object | number | boolean | null;
/** One object: its metadata and its payload bytes (if any). */
export declare class BusObject {
    readonly meta: Record<string, unknown>;
    readonly payload: Uint8Array | undefined;
    constructor(meta: Record<string, unknown>, payload?: Uint8Array | undefined);
    /** `routing/subscribe/reply`, `services/reply`, ... (undefined for content). */
    get event(): string | undefined;
    /** The payload's content type (`text/plain`, `bus/sensor.temp`, ...). */
    get type(): string | undefined;
    get id(): string | undefined;
    /** The payload as UTF-8 text ("" without one). */
    text(): string;
    /** The payload as JSON (undefined without one). */
    json<T = any>(): T;
}
/**
 * The WebSocket message of an object: text without payload, else bytes.
 *
 * A payload that is not text or bytes is sent as JSON, typed `application/json` unless `meta`
 * names a type.
 */
export declare function encodeObject(meta: Record<string, unknown>, payload?: Payload): string | Uint8Array;
/** An object from a WebSocket message (a string, or bytes as an ArrayBuffer or a view). */
export declare function decodeObject(data: string | ArrayBuffer | ArrayBufferView): BusObject;
