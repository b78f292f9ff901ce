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
type Handler = ((event: any) => void) | null;
export declare class NodeWebSocket {
    readonly maxMessage: number;
    static readonly CONNECTING = 0;
    static readonly OPEN = 1;
    static readonly CLOSING = 2;
    static readonly CLOSED = 3;
    readyState: number;
    binaryType: string;
    onopen: Handler;
    onmessage: Handler;
    onclose: Handler;
    onerror: Handler;
    readonly url: string;
    private socket;
    private input;
    private fragments;
    private fragmentOpcode;
    private closeCode;
    private closeReason;
    private closeSent;
    private closeReceived;
    private closed;
    private errored;
    private readonly abortHandshake;
    constructor(url: string, maxMessage?: number);
    /** Send a text (a string) or binary (bytes) message; ignored once closing, as browsers do. */
    send(data: string | ArrayBufferLike | ArrayBufferView): void;
    close(code?: number, reason?: string): void;
    private opened;
    private receive;
    private frame;
    private deliver;
    private write;
    private sendClose;
    private protocolError;
    private fail;
    private ended;
}
export {};
