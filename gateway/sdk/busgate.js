/**
 * busgate: the gateway's whole API for browsers and Node 20+ (ESM, no dependencies).
 *
 *     import { Busgate, BusgateError } from "busgate";       // npm
 *     import { Busgate } from "http://gateway:8080/sdk/busgate.js";  // a page, no build step
 *
 * The wires are docs/PROTOCOL.md section 9 (HTTP, NDJSON, SSE) and sections 6-7 (the Object
 * System over /ws).
 */
export { Backoff } from "./backoff.js";
export { Admin, Busgate } from "./client.js";
export { BusgateError } from "./errors.js";
export { LineSplitter } from "./ndjson.js";
export { BusObject, decodeObject, encodeObject } from "./objectcodec.js";
export { Objects } from "./objects.js";
export { SseParser } from "./sse.js";
export { Subscription } from "./subscription.js";
