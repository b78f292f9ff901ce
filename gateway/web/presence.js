// Who subscribes (presence, PROTOCOL.md 9.11): GET /v1/presence/{pattern} every 2 s, on the
// Services view: how many clients of every gateway and the bus subscribe to types matching the
// pattern (all of them by default), by transport, and who they are.

import { bus } from "./api.js";
import { ago } from "./model.js";

const POLL_MS = 2000;
const $ = (selector) => document.querySelector(selector);

let clients = [];
let refused = "";

export function start() {
  $("#presence-pattern").addEventListener("change", poll);
  poll();
  setInterval(poll, POLL_MS);
}

export function keyChanged() {
  poll();
}

async function poll() {
  const pattern = $("#presence-pattern").value.trim() || ">";
  try {
    const body = await bus.presence(pattern);
    clients = Array.isArray(body?.clients) ? body.clients : [];
    refused = "";
  } catch (exc) {
    clients = [];
    refused = exc?.status === 403 ? "this API key may not see presence" : String(exc?.message ?? exc);
  }
  draw(pattern);
}

function draw(pattern) {
  const byTransport = {};
  for (const client of clients) byTransport[client.transport] = (byTransport[client.transport] ?? 0) + 1;
  const parts = Object.entries(byTransport).map(([transport, count]) => `${count} ${transport}`);
  const count = $("#presence-count");
  count.textContent = refused || `${clients.length} subscribed to ${pattern}${parts.length ? ` (${parts.join(", ")})` : ""}`;
  count.dataset.count = String(clients.length);
  const now = Date.now() / 1000;
  const body = $("#presence-body");
  body.innerHTML = "";
  for (const client of clients.slice(0, 50)) {
    const tr = document.createElement("tr");
    for (const text of [client.transport, client.caller || "—", client.id, ago(client.since, now)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}
