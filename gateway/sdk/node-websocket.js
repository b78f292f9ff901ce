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
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const CLOSE_WAIT_MS = 5000;
export class NodeWebSocket {
    maxMessage;
    static CONNECTING = 0;
    static OPEN = 1;
    static CLOSING = 2;
    static CLOSED = 3;
    readyState = NodeWebSocket.CONNECTING;
    binaryType = "arraybuffer";
    onopen = null;
    onmessage = null;
    onclose = null;
    onerror = null;
    url;
    socket;
    input = Buffer.alloc(0);
    fragments = [];
    fragmentOpcode = 0;
    closeCode = 1006;
    closeReason = "";
    closeSent = false;
    closeReceived = false;
    closed = false;
    errored = false;
    abortHandshake;
    constructor(url, maxMessage = 64 * 1024 * 1024) {
        this.maxMessage = maxMessage;
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
        request.on("upgrade", (response, socket, head) => {
            const expected = createHash("sha1").update(key + GUID).digest("base64");
            if (response.headers["sec-websocket-accept"] !== expected) {
                socket.destroy();
                return this.fail(1002, "the server's Sec-WebSocket-Accept is wrong");
            }
            this.opened(socket, head);
        });
        request.on("response", (response) => {
            response.resume();
            this.fail(1006, `the server answered HTTP ${response.statusCode} instead of a WebSocket`);
        });
        request.on("error", (error) => this.fail(1006, error.message));
        request.end();
    }
    /** Send a text (a string) or binary (bytes) message; ignored once closing, as browsers do. */
    send(data) {
        if (this.readyState === NodeWebSocket.CONNECTING)
            throw new Error("InvalidStateError: still CONNECTING");
        if (this.readyState !== NodeWebSocket.OPEN)
            return;
        if (typeof data === "string")
            this.write(0x1, Buffer.from(data, "utf8"));
        else if (ArrayBuffer.isView(data))
            this.write(0x2, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
        else
            this.write(0x2, Buffer.from(data));
    }
    close(code = 1000, reason = "") {
        if (this.readyState === NodeWebSocket.CONNECTING) {
            this.abortHandshake();
            return this.fail(1006, "closed before the connection opened");
        }
        if (this.readyState !== NodeWebSocket.OPEN)
            return;
        this.readyState = NodeWebSocket.CLOSING;
        this.sendClose(code, reason);
        setTimeout(() => this.socket?.destroy(), CLOSE_WAIT_MS).unref();
    }
    opened(socket, head) {
        this.socket = socket;
        socket.setNoDelay(true);
        this.readyState = NodeWebSocket.OPEN;
        socket.on("data", (chunk) => this.receive(chunk));
        socket.on("error", () => undefined); // "close" follows
        socket.on("close", () => this.ended());
        this.onopen?.({ type: "open" });
        if (head.length)
            this.receive(head);
    }
    receive(chunk) {
        this.input = this.input.length ? Buffer.concat([this.input, chunk]) : chunk;
        while (this.input.length >= 2 && !this.closed) {
            const first = this.input[0];
            const second = this.input[1];
            let length = second & 0x7f;
            let offset = 2;
            if (length === 126) {
                if (this.input.length < 4)
                    return;
                length = this.input.readUInt16BE(2);
                offset = 4;
            }
            else if (length === 127) {
                if (this.input.length < 10)
                    return;
                length = Number(this.input.readBigUInt64BE(2));
                offset = 10;
            }
            if (second & 0x80)
                return this.protocolError(1002, "the server masked a frame");
            if (length > this.maxMessage)
                return this.protocolError(1009, `a frame of ${length} bytes`);
            if (this.input.length < offset + length)
                return;
            const payload = this.input.subarray(offset, offset + length);
            this.input = this.input.subarray(offset + length);
            this.frame((first & 0x80) !== 0, first & 0x0f, payload);
        }
    }
    frame(fin, opcode, payload) {
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
                if (fin)
                    return this.deliver(opcode, payload);
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
    deliver(opcode, payload) {
        if (this.readyState !== NodeWebSocket.OPEN)
            return;
        const data = opcode === 0x1 ? payload.toString("utf8") : payload.buffer.slice(payload.byteOffset, payload.byteOffset + payload.length);
        this.onmessage?.({ type: "message", data });
    }
    write(opcode, payload) {
        const socket = this.socket;
        if (!socket || socket.destroyed)
            return;
        const length = payload.length;
        const size = length < 126 ? 2 : length < 65536 ? 4 : 10;
        const frame = Buffer.allocUnsafe(size + 4 + length);
        frame[0] = 0x80 | opcode;
        if (length < 126)
            frame[1] = 0x80 | length;
        else if (length < 65536) {
            frame[1] = 0x80 | 126;
            frame.writeUInt16BE(length, 2);
        }
        else {
            frame[1] = 0x80 | 127;
            frame.writeBigUInt64BE(BigInt(length), 2);
        }
        const mask = randomBytes(4);
        mask.copy(frame, size);
        for (let i = 0; i < length; i++)
            frame[size + 4 + i] = payload[i] ^ mask[i & 3];
        socket.write(frame);
    }
    sendClose(code, reason) {
        if (this.closeSent)
            return;
        this.closeSent = true;
        const text = Buffer.from(reason.slice(0, 120), "utf8");
        const payload = Buffer.alloc(2 + text.length);
        payload.writeUInt16BE(code, 0);
        text.copy(payload, 2);
        this.write(0x8, payload);
    }
    protocolError(code, why) {
        this.closeCode = code;
        this.closeReason = why;
        this.sendClose(code, why);
        this.socket?.destroy();
    }
    fail(code, why) {
        if (this.closed)
            return;
        this.closeCode = code;
        this.closeReason = why;
        this.errored = true;
        this.onerror?.({ type: "error", message: why });
        this.ended();
    }
    ended() {
        if (this.closed)
            return;
        this.closed = true;
        this.readyState = NodeWebSocket.CLOSED;
        const clean = this.closeReceived && this.closeSent;
        if (!clean && this.closeCode === 1006 && !this.errored)
            this.onerror?.({ type: "error", message: "connection lost" });
        this.onclose?.({ type: "close", code: this.closeCode, reason: this.closeReason, wasClean: clean });
    }
}
