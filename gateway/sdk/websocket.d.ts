/**
 * Which WebSocket `objects()` uses: the one given (`{ WebSocket }`), else the platform's
 * (browsers; Node 22+, or Node 20 with `--experimental-websocket`), else this package's own small
 * client for Node (node-websocket.ts), loaded only then, so browsers never fetch it.
 */
/** The part of the WebSocket API `objects()` uses (the browser's, `ws`'s and ours have it). */
export interface WebSocketLike {
    binaryType: string;
    readonly readyState: number;
    send(data: string | ArrayBufferLike | ArrayBufferView): void;
    close(code?: number, reason?: string): void;
    onopen: ((event: any) => void) | null;
    onmessage: ((event: any) => void) | null;
    onclose: ((event: any) => void) | null;
    onerror: ((event: any) => void) | null;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;
/** The WebSocket class to use: `given`, the platform's, or the Node fallback. */
export declare function webSocketClass(given?: WebSocketConstructor): Promise<WebSocketConstructor>;
/** A new WebSocket to `url`, reading binary messages as ArrayBuffers. */
export declare function openWebSocket(url: string, given?: WebSocketConstructor): Promise<WebSocketLike>;
