// An Object System client in a few lines of Node.js (built-in `net` only).
// Usage: node node_os_client.js HOST PORT SERVICE COMMAND
// Joins, subscribes, waits until SERVICE shows in services/discovery, calls COMMAND with
// {"a": 40, "b": 2}, and prints the subscribe reply, the discovery reply and the service reply
// (its JSON payload under "payload") as three JSON lines.
"use strict";
const net = require("net");
const [host, port, service, command] = process.argv.slice(2);

const sock = net.connect(Number(port), host);
let buffer = Buffer.alloc(0);
const send = (meta, payload = Buffer.alloc(0)) => {
  if (payload.length) meta = { ...meta, size: payload.length };
  sock.write(Buffer.concat([Buffer.from(JSON.stringify(meta)), Buffer.from([0]), payload]));
};
const discover = () => send({ event: "services/discovery", id: "d" });

sock.on("connect", () => send({ event: "routing/subscribe", id: "s", "receive-mode": "no_echo" }));
sock.on("data", (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  for (;;) {
    const nul = buffer.indexOf(0);
    if (nul < 0) return;
    const meta = JSON.parse(buffer.subarray(0, nul).toString("utf8"));
    const size = meta.size || 0;
    if (buffer.length < nul + 1 + size) return;
    const payload = buffer.subarray(nul + 1, nul + 1 + size);
    buffer = buffer.subarray(nul + 1 + size);
    handle(meta, payload);
  }
});

function handle(meta, payload) {
  if (meta.event === "routing/subscribe/reply") {
    console.log(JSON.stringify(meta));
    discover();
  } else if (meta.event === "services/discovery/reply") {
    if (!meta.services.some((s) => s.name === service)) return setTimeout(discover, 100);
    console.log(JSON.stringify(meta));
    const args = Buffer.from(JSON.stringify({ a: 40, b: 2 }));
    send({ event: "services/request", id: "q", name: service, request: command,
           type: "application/json" }, args);
  } else if (meta.event === "services/reply" && meta["in-reply-to"] === "q") {
    console.log(JSON.stringify({ ...meta, payload: JSON.parse(payload.toString("utf8")) }));
    sock.end();
  }
}
sock.setTimeout(30000, () => { console.error("timeout"); process.exit(2); });
sock.on("error", (err) => { console.error(err.message); process.exit(1); });
