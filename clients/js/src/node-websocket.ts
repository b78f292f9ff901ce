/**
 * A small WebSocket client (RFC 6455) for Node versions without a global `WebSocket` (Node 20
 * without `--experimental-websocket`), with the browser's interface as far as `objects()` uses
 * it: `new NodeWebSocket(url)`, `onopen`, `onmessage` (`data`: a string or an ArrayBuffer),
 * `onclose` (`code`, `reason`, `wasClean`), `onerror`, `send`, `close`, `readyState`.
 *
 * It masks what it sends, answers pings, reassembles fragmented messages, refuses a frame
 * larger than `maxMessage` (close 1009) and a bad handshake; no extensions (the gateway sends
 * uncompressed frames unless told otherwise, PROTOCOL.md 6.8). Loaded only when needed
 * (websocket.ts): browsers never import it.
 */

import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import type { Socket } from "node:net";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const CLOSE_WAIT_MS = 5000;

type Handler = ((event: any) => void) | null;

export class NodeWebSocket {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSING = 2;
  static readonly CLOSED = 3;
  readyState = NodeWebSocket.CONNECTING;
  binaryType = "arraybuffer";
  onopen: Handler = null;
  onmessage: Handler = null;
  onclose: Handler = null;
  onerror: Handler = null;
  readonly url: string;
  private socket: Socket | undefined;
  private input: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentOpcode = 0;
  private closeCode = 1006;
  private closeReason = "";
  private closeSent = false;
  private closeReceived = false;
  private closed = false;
  private errored = false;
  private readonly abortHandshake: () => void;

  constructor(
    url: string,
    readonly maxMessage = 64 * 1024 * 1024,
  ) {
    this.url = url;
    const target = new URL(url);
    const secure = target.protocol === "wss:";
    const key = randomBytes(16).toString("base64");
    const request = (secure ? httpsRequest : httpRequest)({
      hostname: target.hostname.replace(/^\[|\]$/g, ""),
      port: target.port || (secure ? 443 : 80),
      path: `${target.pathname}${target.search}`,
      headers: { Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13" },
    });
    this.abortHandshake = () => request.destroy();
    request.on("upgrade", (response: IncomingMessage, socket: Socket, head: Buffer) => {
      const expected = createHash("sha1").update(key + GUID).digest("base64");
      if (response.headers["sec-websocket-accept"] !== expected) {
        socket.destroy();
        return this.fail(1002, "the server's Sec-WebSocket-Accept is wrong");
      }
      this.opened(socket, head);
    });
    request.on("response", (response: IncomingMessage) => {
      response.resume();
      this.fail(1006, `the server answered HTTP ${response.statusCode} instead of a WebSocket`);
    });
    request.on("error", (error: Error) => this.fail(1006, error.message));
    request.end();
  }

  /** Send a text (a string) or binary (bytes) message; ignored once closing, as browsers do. */
  send(data: string | ArrayBufferLike | ArrayBufferView): void {
    if (this.readyState === NodeWebSocket.CONNECTING) throw new Error("InvalidStateError: still CONNECTING");
    if (this.readyState !== NodeWebSocket.OPEN) return;
    if (typeof data === "string") this.write(0x1, Buffer.from(data, "utf8"));
    else if (ArrayBuffer.isView(data)) this.write(0x2, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    else this.write(0x2, Buffer.from(data as ArrayBuffer));
  }

  close(code = 1000, reason = ""): void {
    if (this.readyState === NodeWebSocket.CONNECTING) {
      this.abortHandshake();
      return this.fail(1006, "closed before the connection opened");
    }
    if (this.readyState !== NodeWebSocket.OPEN) return;
    this.readyState = NodeWebSocket.CLOSING;
    this.sendClose(code, reason);
    setTimeout(() => this.socket?.destroy(), CLOSE_WAIT_MS).unref();
  }

  private opened(socket: Socket, head: Buffer): void {
    this.socket = socket;
    socket.setNoDelay(true);
    this.readyState = NodeWebSocket.OPEN;
    socket.on("data", (chunk: Buffer) => this.receive(chunk));
    socket.on("error", () => undefined); // "close" follows
    socket.on("close", () => this.ended());
    this.onopen?.({ type: "open" });
    if (head.length) this.receive(head);
  }

  private receive(chunk: Buffer): void {
    this.input = this.input.length ? Buffer.concat([this.input, chunk]) : chunk;
    while (this.input.length >= 2 && !this.closed) {
      const first = this.input[0] as number;
      const second = this.input[1] as number;
      let length = second & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (this.input.length < 4) return;
        length = this.input.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (this.input.length < 10) return;
        length = Number(this.input.readBigUInt64BE(2));
        offset = 10;
      }
      if (second & 0x80) return this.protocolError(1002, "the server masked a frame");
      if (length > this.maxMessage) return this.protocolError(1009, `a frame of ${length} bytes`);
      if (this.input.length < offset + length) return;
      const payload = this.input.subarray(offset, offset + length);
      this.input = this.input.subarray(offset + length);
      this.frame((first & 0x80) !== 0, first & 0x0f, payload);
    }
  }

  private frame(fin: boolean, opcode: number, payload: Buffer): void {
    switch (opcode) {
      case 0x0:
        this.fragments.push(payload);
        if (fin) {
          const whole = Buffer.concat(this.fragments);
          this.fragments = [];
          this.deliver(this.fragmentOpcode, whole);
        }
        return;
      case 0x1:
      case 0x2:
        if (fin) return this.deliver(opcode, payload);
        this.fragmentOpcode = opcode;
        this.fragments = [Buffer.from(payload)];
        return;
      case 0x8:
        this.closeReceived = true;
        this.closeCode = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        this.closeReason = payload.subarray(2).toString("utf8");
        this.readyState = NodeWebSocket.CLOSING;
        this.sendClose(this.closeCode === 1005 ? 1000 : this.closeCode, "");
        this.socket?.end();
        return;
      case 0x9:
        this.write(0xa, payload);
        return;
      case 0xa:
        return;
      default:
        this.protocolError(1002, `unknown opcode ${opcode}`);
    }
  }

  private deliver(opcode: number, payload: Buffer): void {
    if (this.readyState !== NodeWebSocket.OPEN) return;
    const data = opcode === 0x1 ? payload.toString("utf8") : payload.buffer.slice(payload.byteOffset, payload.byteOffset + payload.length);
    this.onmessage?.({ type: "message", data });
  }

  private write(opcode: number, payload: Buffer): void {
    const socket = this.socket;
    if (!socket || socket.destroyed) return;
    const length = payload.length;
    const size = length < 126 ? 2 : length < 65536 ? 4 : 10;
    const frame = Buffer.allocUnsafe(size + 4 + length);
    frame[0] = 0x80 | opcode;
    if (length < 126) frame[1] = 0x80 | length;
    else if (length < 65536) {
      frame[1] = 0x80 | 126;
      frame.writeUInt16BE(length, 2);
    } else {
      frame[1] = 0x80 | 127;
      frame.writeBigUInt64BE(BigInt(length), 2);
    }
    const mask = randomBytes(4);
    mask.copy(frame, size);
    for (let i = 0; i < length; i++) frame[size + 4 + i] = (payload[i] as number) ^ (mask[i & 3] as number);
    socket.write(frame);
  }

  private sendClose(code: number, reason: string): void {
    if (this.closeSent) return;
    this.closeSent = true;
    const text = Buffer.from(reason.slice(0, 120), "utf8");
    const payload = Buffer.alloc(2 + text.length);
    payload.writeUInt16BE(code, 0);
    text.copy(payload, 2);
    this.write(0x8, payload);
  }

  private protocolError(code: number, why: string): void {
    this.closeCode = code;
    this.closeReason = why;
    this.sendClose(code, why);
    this.socket?.destroy();
  }

  private fail(code: number, why: string): void {
    if (this.closed) return;
    this.closeCode = code;
    this.closeReason = why;
    this.errored = true;
    this.onerror?.({ type: "error", message: why });
    this.ended();
  }

  private ended(): void {
    if (this.closed) return;
    this.closed = true;
    this.readyState = NodeWebSocket.CLOSED;
    const clean = this.closeReceived && this.closeSent;
    if (!clean && this.closeCode === 1006 && !this.errored) this.onerror?.({ type: "error", message: "connection lost" });
    this.onclose?.({ type: "close", code: this.closeCode, reason: this.closeReason, wasClean: clean });
  }
}
