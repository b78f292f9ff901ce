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

let fallback: Promise<WebSocketConstructor> | undefined;

/** The WebSocket class to use: `given`, the platform's, or the Node fallback. */
export async function webSocketClass(given?: WebSocketConstructor): Promise<WebSocketConstructor> {
  if (given) return given;
  const platform = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (typeof platform === "function") return platform;
  const where = new URL("./node-websocket.js", import.meta.url).href;
  fallback ??= import(/* webpackIgnore: true */ /* @vite-ignore */ where).then((module: { NodeWebSocket: WebSocketConstructor }) => module.NodeWebSocket);
  return fallback;
}

/** A new WebSocket to `url`, reading binary messages as ArrayBuffers. */
export async function openWebSocket(url: string, given?: WebSocketConstructor): Promise<WebSocketLike> {
  const Class = await webSocketClass(given);
  const socket = new Class(url);
  socket.binaryType = "arraybuffer";
  return socket;
}
