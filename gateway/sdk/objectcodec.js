/**
 * Object System objects on a WebSocket (docs/PROTOCOL.md 6.1 and 6.8), sans-I/O: one WebSocket
 * message is one object. A text message is the metadata alone (JSON); a binary message is the
 * metadata, one NUL byte, then `size` payload bytes. We write compact JSON, keys in the order
 * given, `size` last when there is a payload.
 */
import { localError } from "./errors.js";
const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** One object: its metadata and its payload bytes (if any). */
export class BusObject {
    meta;
    payload;
    constructor(meta, payload = undefined) {
        this.meta = meta;
        this.payload = payload;
    }
    /** `routing/subscribe/reply`, `services/reply`, ... (undefined for content). */
    get event() {
        return typeof this.meta["event"] === "string" ? this.meta["event"] : undefined;
    }
    /** The payload's content type (`text/plain`, `bus/sensor.temp`, ...). */
    get type() {
        return typeof this.meta["type"] === "string" ? this.meta["type"] : undefined;
    }
    get id() {
        return typeof this.meta["id"] === "string" ? this.meta["id"] : undefined;
    }
    /** The payload as UTF-8 text ("" without one). */
    text() {
        return this.payload ? decoder.decode(this.payload) : "";
    }
    /** The payload as JSON (undefined without one). */
    json() {
        return (this.payload && this.payload.length ? JSON.parse(this.text()) : undefined);
    }
}
function bytesOf(payload) {
    if (typeof payload === "string")
        return { bytes: encoder.encode(payload), json: false };
    if (payload instanceof Uint8Array)
        return { bytes: payload, json: false };
    if (payload instanceof ArrayBuffer)
        return { bytes: new Uint8Array(payload), json: false };
    if (ArrayBuffer.isView(payload))
        return { bytes: new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength), json: false };
    return { bytes: encoder.encode(JSON.stringify(payload)), json: true };
}
/**
 * The WebSocket message of an object: text without payload, else bytes.
 *
 * A payload that is not text or bytes is sent as JSON, typed `application/json` unless `meta`
 * names a type.
 */
export function encodeObject(meta, payload) {
    if (meta === null || typeof meta !== "object" || Array.isArray(meta))
        throw new TypeError("an object's metadata is a plain object");
    const { size: _size, ...rest } = meta;
    if (payload === undefined)
        return JSON.stringify(rest);
    const { bytes, json } = bytesOf(payload);
    const head = json && rest["type"] === undefined ? { ...rest, type: "application/json" } : rest;
    const text = encoder.encode(JSON.stringify({ ...head, size: bytes.length }));
    const out = new Uint8Array(text.length + 1 + bytes.length);
    out.set(text, 0);
    out.set(bytes, text.length + 1); // out[text.length] is the NUL
    return out;
}
/** An object from a WebSocket message (a string, or bytes as an ArrayBuffer or a view). */
export function decodeObject(data) {
    if (typeof data === "string")
        return new BusObject(parseMeta(data));
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const nul = bytes.indexOf(0);
    const meta = parseMeta(decoder.decode(nul < 0 ? bytes : bytes.subarray(0, nul)));
    if (nul < 0)
        return new BusObject(meta);
    return new BusObject(meta, bytes.slice(nul + 1));
}
function parseMeta(text) {
    let meta;
    try {
        meta = JSON.parse(text);
    }
    catch (exc) {
        throw localError("protocol", `an object whose metadata is not JSON: ${text.slice(0, 80)}`, exc);
    }
    if (meta === null || typeof meta !== "object" || Array.isArray(meta)) {
        throw localError("protocol", `an object whose metadata is not a JSON object: ${text.slice(0, 80)}`);
    }
    return meta;
}
