// The client against real processes (stack.mjs): the shared cases (cases.mjs, which Chromium
// runs too), then what only Node can arrange: killing and restarting the gateway under a
// subscription and an Object System connection, a gateway that never answers, credentials.

import { after, before, describe, test } from "node:test";
import { createServer } from "node:http";
import { Busgate, BusgateError } from "../../../gateway/sdk/busgate.js";
import { cases, check, equal, failure, until } from "./cases.mjs";
import { freePort, Stack } from "./stack.mjs";

const stack = new Stack();
before(() => stack.start(), { timeout: 120_000 });
after(() => stack.stop(), { timeout: 60_000 });

describe("against a real gateway", () => {
  for (const { name, run } of cases) {
    test(name, { timeout: 60_000 }, () => run({ Busgate, BusgateError, url: stack.url }));
  }
});

describe("across a gateway restart", () => {
  test("subscribe resumes by Last-Event-ID: none lost, none twice", { timeout: 120_000 }, async () => {
    const other = await stack.startGateway();
    const url = await stack.startGateway();
    const bus = new Busgate(url, { reconnect: { initial: 100, max: 500 } });
    const publisher = new Busgate(other);
    const type = `jsresume${Date.now().toString(36)}`;
    const sub = bus.subscribe(`${type}.*`);
    const states = [];
    sub.on("state", (change) => states.push(change.state));
    const got = [];
    const reading = (async () => {
      for await (const event of sub) {
        got.push(event);
        if (got.length === 9) return;
      }
    })();
    await sub.ready();
    for (let n = 1; n <= 3; n++) await publisher.publish(`${type}.t`, { n });
    await until(() => got.length === 3, "the first three events");
    await stack.killGateway(url);
    await until(() => states.includes("reconnecting"), "the subscription to notice");
    for (let n = 4; n <= 6; n++) await publisher.publish(`${type}.t`, { n }); // while it is down
    await stack.restartGateway(url);
    await until(() => got.length >= 6, "what was missed, from the journal", 30_000);
    for (let n = 7; n <= 9; n++) await publisher.publish(`${type}.t`, { n });
    await reading;
    equal(got.map((event) => event.payload.n), [1, 2, 3, 4, 5, 6, 7, 8, 9], "every event once, in order");
    const seqs = got.map((event) => event.seq);
    check(seqs.every((seq, i) => Number.isInteger(seq) && (i === 0 || seq > seqs[i - 1])), `rising seqs: ${seqs}`);
    check(states.filter((state) => state === "open").length >= 2, `opened again: ${states}`);
    await stack.killGateway(other);
  });

  test("objects reconnect, subscribe again, and send what waited", { timeout: 120_000 }, async () => {
    const url = await stack.startGateway();
    const bus = new Busgate(url, { reconnect: { initial: 100, max: 500 } });
    const listener = await new Busgate(stack.url).objects({ types: ["text/plain"] });
    const heard = [];
    listener.on("object", (object) => object.type === "text/plain" && heard.push(object.text()));
    const objects = await bus.objects({ types: ["text/plain"] });
    const states = [];
    objects.on("state", (change) => states.push(change.state));
    const first = objects.routingId;
    objects.send({ type: "text/plain" }, "before");
    await until(() => heard.includes("before"), "an object before the restart");
    await stack.killGateway(url);
    await until(() => states.includes("reconnecting"), "the connection to notice");
    objects.send({ type: "text/plain" }, "while down");
    await stack.restartGateway(url);
    await until(() => objects.state === "open", "the connection to reopen", 30_000);
    await until(() => heard.includes("while down"), "the object sent while it was down");
    check(objects.routingId && objects.routingId !== first, "a new routing id");
    equal(await objects.request("demo", "echo", { again: true }), { again: true }, "services/request after the restart");
    objects.close();
    listener.close();
    await stack.killGateway(url);
  });
});

describe("what this side decides", () => {
  test("a request is what a bare fetch sends: the same line, headers and body", { timeout: 30_000 }, async () => {
    const seen = [];
    const answer = JSON.stringify({ header: { TYP: "ACK" }, payload: { n: 1 } });
    const server = createServer((request, response) => {
      const chunks = [];
      request.on("data", (chunk) => chunks.push(chunk));
      request.on("end", () => {
        const headers = Object.entries(request.headers).filter(([name]) => name !== "host").sort();
        seen.push({ line: `${request.method} ${request.url}`, headers, body: Buffer.concat(chunks).toString() });
        response.writeHead(200, { "content-type": "application/json" }).end(answer);
      });
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${server.address().port}`;
      equal(await new Busgate(url).request("demo", "echo", { n: 1 }), { n: 1 });
      const bare = await fetch(`${url}/v1/request/demo?timeout=5`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ CMD: "echo", n: 1 }),
      });
      equal((await bare.json()).payload, { n: 1 });
      equal(seen[0], seen[1], "the package's request and the bare fetch's");
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test("a gateway that never answers: the call's own timeout", { timeout: 30_000 }, async () => {
    const silent = createServer(() => undefined); // takes requests, never answers
    await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const bus = new Busgate(`http://127.0.0.1:${silent.address().port}`, { timeout: 200 });
      const started = Date.now();
      const error = await failure(bus.request("demo", "echo", {}), BusgateError, { status: 0, code: "timeout" });
      check(Date.now() - started < 10_000, "it gave up");
      check(error.message.includes("2.2 s"), error.message);
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });

  test("subscribe's idleTimeout: keepalives hold the stream open, silence gives it up", { timeout: 60_000 }, async () => {
    let sent = 0;
    let lastSent;
    const quietAfter = new Promise((resolve) => {
      lastSent = resolve;
    });
    const server = createServer((request, response) => {
      response.writeHead(200, { "Content-Type": "text/event-stream" });
      response.write(": subscribed\n\n");
      const beat = setInterval(() => {
        response.write(": keepalive\n\n");
        if (++sent === 25) {
          clearInterval(beat); // then silence, the connection left open
          lastSent();
        }
      }, 100);
      request.on("close", () => clearInterval(beat));
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const bus = new Busgate(`http://127.0.0.1:${server.address().port}`);
      const sub = bus.subscribe("x.y", { reconnect: false, idleTimeout: 1_000 });
      const closed = new Promise((resolve) => sub.on("state", (change) => change.state === "closed" && resolve(change)));
      await sub.ready();
      await quietAfter; // 2.5 s of keepalives: well past one idleTimeout
      equal(sub.state, "open", "keepalives every 0.1 s kept a 1 s idleTimeout from firing");
      const change = await closed;
      check(change.error instanceof BusgateError && change.error.code === "timeout", String(change.error));
      check(change.error.message.includes("1 s"), change.error.message);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test("subscribe hands out a chunk's events in order: a slow reader loses none, close() stops mid-chunk", { timeout: 60_000 }, async () => {
    // Events come 50 to a write, so each chunk carries many of them.
    const event = (seq) => `id: ${seq}\nevent: message\ndata: {"type":"x.y","header":{"SEQ":${seq}},"payload":{"n":${seq}}}\n\n`;
    const server = createServer((request, response) => {
      response.writeHead(200, { "Content-Type": "text/event-stream" });
      let text = ": subscribed\n\n";
      for (let seq = 1; seq <= 300; seq++) {
        text += event(seq);
        if (seq % 50 === 0) {
          response.write(text);
          text = "";
        }
      }
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const bus = new Busgate(`http://127.0.0.1:${server.address().port}`);
      const slow = bus.subscribe("x.y", { reconnect: false, highWater: 4 });
      const seen = [];
      for await (const ev of slow) {
        seen.push(ev.seq);
        await new Promise((resolve) => setImmediate(resolve)); // slower than the stream
        if (seen.length === 300) break;
      }
      equal(seen, Array.from({ length: 300 }, (_, i) => i + 1), "every event, in order, through a 4-event queue");
      equal(slow.state, "closed", "break closes");

      const closing = bus.subscribe("x.y", { reconnect: false });
      const heard = [];
      closing.on("event", (ev) => {
        heard.push(ev.seq);
        if (ev.seq === 7) closing.close(); // in the middle of the first chunk's 50 events
      });
      const iterated = [];
      for await (const ev of closing) iterated.push(ev.seq);
      equal(heard, [1, 2, 3, 4, 5, 6, 7], "no event after close(), even from the same chunk");
      equal(iterated, [1, 2, 3, 4, 5, 6], "the iterator ends after what was queued before close()");
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test("nobody at the address: network", async () => {
    const bus = new Busgate(`http://127.0.0.1:${await freePort()}`);
    await failure(bus.request("demo", "echo", {}), BusgateError, { status: 0, code: "network" });
    const sub = bus.subscribe("x.y", { reconnect: false });
    await failure(sub.ready(), BusgateError, { code: "network" });
    await failure(bus.objects({ reconnect: false }), BusgateError, { code: "disconnected" });
  });

  test("credentials: an API key in headers, ?key= on /ws, refusals", { timeout: 60_000 }, async () => {
    const url = await stack.startGateway(undefined, "--api-key", "ops:k3y-for-js", "--auth-fail-limit", "0");
    try {
      await failure(new Busgate(url).request("demo", "echo", {}), BusgateError, { status: 401, code: "unauthorized" });
      await failure(new Busgate(url, { key: "wrong" }).request("demo", "echo", {}), BusgateError, { status: 401 });
      let key = "k3y-for-js";
      const bus = new Busgate(url, { key: () => key });
      equal(await bus.request("demo", "echo", { k: 1 }), { k: 1 }, "with the key");
      const sub = bus.subscribe("jskey.*");
      await sub.ready();
      const objects = await bus.objects({});
      check(objects.state === "open", "/ws with ?key=");
      objects.close();
      sub.close();
      key = "changed";
      await failure(bus.request("demo", "echo", {}), BusgateError, { status: 401 });
      await failure(bus.objects({}), BusgateError, { status: 401, code: "unauthorized" });
      const refused = bus.subscribe("jskey.*");
      await failure(refused.ready(), BusgateError, { status: 401, code: "unauthorized" });
    } finally {
      await stack.killGateway(url);
    }
  });
});
