/**
 * busgate: the gateway's whole API for browsers and Node 20+ (ESM, no dependencies).
 *
 *     import { Busgate, BusgateError } from "busgate";       // npm
 *     import { Busgate } from "http://gateway:8080/sdk/busgate.js";  // a page, no build step
 *
 * The wires are docs/PROTOCOL.md section 9 (HTTP, NDJSON, SSE) and sections 6-7 (the Object
 * System over /ws).
 */
export { Backoff, type ReconnectOptions } from "./backoff.js";
export { Admin, Busgate, type BusgateOptions, type History } from "./client.js";
export { BusgateError, type BusgateErrorInit } from "./errors.js";
export type { CallOptions, Credential } from "./http.js";
export { LineSplitter } from "./ndjson.js";
export { BusObject, decodeObject, encodeObject, type Payload } from "./objectcodec.js";
export { type ObjectRequestOptions, Objects, type ObjectsOptions, type ReceiveMode } from "./objects.js";
export type { Published, PublishOptions, Reply } from "./requests.js";
export type { Command, CommandParams, CommandSchema, ServiceInfo, Services, UntypedService } from "./services.js";
export { type SseEvent, SseParser } from "./sse.js";
export { type BusEvent, type ConnectionState, type StateChange, type SubscribeOptions, Subscription } from "./subscription.js";
export type { WebSocketConstructor, WebSocketLike } from "./websocket.js";
