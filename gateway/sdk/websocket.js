/**
 * Which WebSocket `objects()` uses: the one given (`{ WebSocket }`), else the platform's
 * (browsers; Node 22+, or Node 20 with `--experimental-websocket`), else this package's own small
 * client for Node (node-websocket.ts), loaded only then, so browsers never fetch it.
 */
let fallback;
/** The WebSocket class to use: `given`, the platform's, or the Node fallback. */
export async function webSocketClass(given) {
    if (given)
        return given;
    const platform = globalThis.WebSocket;
    if (typeof platform === "function")
        return platform;
    const where = new URL("./node-websocket.js", import.meta.url).href;
    fallback ??= import(/* webpackIgnore: true */ /* @vite-ignore */ where).then((module) => module.NodeWebSocket);
    return fallback;
}
/** A new WebSocket to `url`, reading binary messages as ArrayBuffers. */
export async function openWebSocket(url, given) {
    const Class = await webSocketClass(given);
    const socket = new Class(url);
    socket.binaryType = "arraybuffer";
    return socket;
}
