// The client's behaviour against a real gateway, broker (with a journal) and demo service, in
// any JavaScript runtime: Node's test runner runs these (client.test.mjs) on the module the
// gateway serves (gateway/sdk/, built from src/), and Chromium runs the same file on a page that
// imports /sdk/busgate.js from the gateway (tests/web/test_js_client.py). Each case gets
// { Busgate, BusgateError, url } and throws on failure.

export class CheckFailed extends Error {}

export function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

export function equal(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  check(a === e, `${what}: expected ${e}, got ${a}`);
}

/** Wait until `condition()` is true (polling), or fail after `ms`. */
export async function until(condition, what, ms = 15000) {
  const end = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > end) throw new CheckFailed(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The BusgateError `promise` rejects with; fails if it resolves or rejects with anything else. */
export async function failure(promise, BusgateError, expected) {
  let error;
  try {
    await promise;
  } catch (exc) {
    error = exc;
  }
  check(error instanceof BusgateError, `expected a BusgateError ${JSON.stringify(expected)}, got ${error}`);
  for (const [name, value] of Object.entries(expected)) equal(error[name], value, `error.${name}`);
  return error;
}

const token = () => Math.random().toString(36).slice(2, 10);

export const cases = [
  {
    name: "request returns the ACK's payload",
    async run({ Busgate, url }) {
      const bus = new Busgate(url);
      equal(await bus.request("demo", "echo", { x: 1, name: "Ann" }), { x: 1, name: "Ann" }, "echo");
    },
  },
  {
    name: "a NAK is a BusgateError with the status, rcd and the NAK itself",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      const error = await failure(bus.request("demo", "fail", { rcd: 409, msg: "busy" }), BusgateError, { status: 409, code: "nak", rcd: 409, message: "busy" });
      equal(error.response.header.TYP, "NAK", "the NAK's header");
      await failure(bus.request("demo", "fail", { rcd: 7, msg: "own code" }), BusgateError, { status: 502, code: "nak", rcd: 7 });
    },
  },
  {
    name: "no responders is 503 and the gateway's timeout is 504",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      await failure(bus.request(`nobody-${token()}`, "echo", {}), BusgateError, { status: 503, code: "no_responders" });
      const error = await failure(bus.request("demo", "sleep", { seconds: 3 }, { timeout: 300 }), BusgateError, { status: 504, code: "timeout" });
      check(/0\.3 s/.test(error.message), `the gateway's message names the timeout: ${error.message}`);
    },
  },
  {
    name: "a typed route refuses a wrong argument with 400 and its field",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      const demo = await bus.service("demo");
      const error = await failure(demo.fail({ rcd: "x" }), BusgateError, { status: 400, code: "bad_request", field: "rcd" });
      check(error.message.includes("rcd"), error.message);
      equal(Object.keys(demo).sort(), ["count", "echo", "fail", "sleep", "time"], "the demo's commands");
      equal(await demo.echo({ y: 2 }), { y: 2 }, "typed echo");
      check(typeof (await demo.time()).epoch_ms === "number", "time answers epoch_ms");
      equal(demo.count.schema.answer.required, ["i", "n"], "the command's schema");
      const counted = [];
      for await (const part of demo.count.stream({ n: 2 })) counted.push(part.i);
      equal(counted, [1, 2], "a typed stream");
      await failure(bus.service(`nobody-${token()}`), BusgateError, { status: 404, code: "not_found" });
    },
  },
  {
    name: "stream yields each response and ends at the end marker",
    async run({ Busgate, url }) {
      const bus = new Busgate(url);
      const seen = [];
      for await (const part of bus.stream("demo", "count", { n: 3, interval: 0.05 })) seen.push(part);
      equal(seen, [{ i: 1, n: 3 }, { i: 2, n: 3 }, { i: 3, n: 3 }], "the stream");
      const kinds = [];
      for await (const reply of bus.responses("demo", "count", { n: 2 })) kinds.push([reply.kind, reply.final]);
      equal(kinds, [["ACK", false], ["ACK", false], ["end", true]], "the replies with the end marker");
      const single = [];
      for await (const part of bus.stream("demo", "echo", { z: 3 })) single.push(part);
      equal(single, [{ z: 3 }], "a single answer as a stream");
    },
  },
  {
    name: "a NAK in a stream throws, and a stream past its timeout throws timeout",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      await failure(
        (async () => {
          for await (const _ of bus.stream("demo", "fail", { rcd: 418, msg: "teapot" }));
        })(),
        BusgateError,
        { status: 418, code: "nak", rcd: 418 },
      );
      const seen = [];
      const error = await failure(
        (async () => {
          for await (const part of bus.stream("demo", "count", { n: 50, interval: 0.1 }, { timeout: 450 })) seen.push(part.i);
        })(),
        BusgateError,
        { status: 504, code: "timeout" },
      );
      check(seen.length >= 1 && seen.length < 50, `some responses came before the timeout: ${seen.length}`);
      equal(error.received, seen.length, "the responses received before the timeout");
    },
  },
  {
    name: "publish answers the MID, and with confirm the journal's seq",
    async run({ Busgate, url }) {
      const bus = new Busgate(url);
      const plain = await bus.publish("jspub.plain", { a: 1 });
      equal(plain.type, "jspub.plain", "type");
      check(typeof plain.mid === "string" && plain.mid.length > 10, "a MID");
      const confirmed = await bus.publish("jspub.confirmed", { a: 2 }, { confirm: true });
      check(Number.isInteger(confirmed.seq) && confirmed.seq > 0, `a seq: ${confirmed.seq}`);
    },
  },
  {
    name: "subscribe delivers live events with their seq, and since= replays the journal",
    async run({ Busgate, url }) {
      const bus = new Busgate(url);
      const type = `jssub${token()}`;
      const sub = bus.subscribe(`${type}.*`);
      await sub.ready();
      const first = await bus.publish(`${type}.a`, { n: 1 }, { confirm: true });
      await bus.publish(`${type}.b`, { n: 2 });
      const got = [];
      for await (const event of sub) {
        got.push(event);
        if (got.length === 2) break;
      }
      equal(got.map((e) => [e.type, e.payload.n]), [[`${type}.a`, 1], [`${type}.b`, 2]], "the live events");
      equal(got[0].seq, first.seq, "the event's seq is the confirmed publish's");
      equal(sub.state, "closed", "break closes the subscription");
      const replay = bus.subscribe([`${type}.*`], { since: first.seq - 1 });
      const again = [];
      for await (const event of replay) {
        again.push(event.payload.n);
        if (again.length === 2) break;
      }
      equal(again, [1, 2], "replayed from the journal");
    },
  },
  {
    name: "history pages through the journal, oldest first",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      const type = `jshist${token()}`;
      for (let n = 1; n <= 3; n++) await bus.publish(`${type}.t`, { n }, { confirm: true });
      const newest = await bus.history(`${type}.*`, { limit: 2 });
      equal(newest.events.map((e) => [e.type, e.payload.n]), [[`${type}.t`, 2], [`${type}.t`, 3]], "the newest two");
      check(newest.more === true && newest.next, "more before them");
      const older = await bus.history(`${type}.*`, { limit: 2, ...newest.next });
      equal(older.events.map((e) => e.payload.n), [1], "the page before");
      await failure(bus.history(`${type}.t`, { limit: 5000 }), BusgateError, { status: 400, code: "bad_request" });
    },
  },
  {
    name: "a refused subscription closes with the gateway's error",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      const sub = bus.subscribe("not..a.type");
      await failure(sub.ready(), BusgateError, { status: 400, code: "bad_request" });
      equal(sub.state, "closed", "state");
    },
  },
  {
    name: "objects: receive modes, types and echo",
    async run({ Busgate, url }) {
      const bus = new Busgate(url);
      const mark = token();
      const keep = (objects) => {
        const list = [];
        objects.on("object", (object) => list.push(object));
        return list;
      };
      const watcher = await bus.objects({ receive: "events_only" });
      const watched = keep(watcher);
      const quiet = await bus.objects({ receive: "no_echo", types: ["text/plain"] });
      const all = await bus.objects({ receive: "all", types: ["text/*"] });
      const quietGot = keep(quiet);
      const allGot = keep(all);
      const texts = (list) => list.filter((o) => o.type === "text/plain").map((o) => o.text());
      quiet.send({ type: "text/plain" }, `x-${mark}`);
      await until(() => texts(allGot).includes(`x-${mark}`), "the no_echo client's object at the other");
      all.send({ type: "text/plain" }, `y-${mark}`);
      await until(() => texts(quietGot).includes(`y-${mark}`), "the other's object at the no_echo client");
      await until(() => texts(allGot).includes(`y-${mark}`), "its own object at the 'all' client (echo)");
      const gone = quiet.routingId;
      check(typeof gone === "string" && gone.length > 0, "a routing id");
      quiet.close();
      await until(() => watched.some((o) => o.event === "routing/disconnect" && o.meta["routing-id"] === gone), "routing/disconnect at the events_only client");
      check(!texts(quietGot).includes(`x-${mark}`), "no_echo: its own object did not come back");
      check(texts(watched).length === 0, "events_only: no content objects");
      check(watched.some((o) => o.event === "routing/subscribe/notify" || o.event === "routing/subscribe/notification"), "events_only: subscribe notices");
      watcher.close();
      all.close();
    },
  },
  {
    name: "objects: bus events through the bridge, binary payloads, and services/request",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      const type = `jsobj${token()}`;
      const objects = await bus.objects({ types: [`bus/${type}.*`, "application/octet-stream"] });
      const got = [];
      objects.on("object", (o) => got.push(o));
      await bus.publish(`${type}.t`, { c: 18.5 });
      await until(() => got.some((o) => o.type === `bus/${type}.t`), "the bus event as an object");
      equal(got.find((o) => o.type === `bus/${type}.t`).json(), { c: 18.5 }, "the event's payload");
      const bytes = new Uint8Array([0, 1, 2, 255, 0]);
      objects.send({ type: "application/octet-stream" }, bytes);
      await until(() => got.some((o) => o.type === "application/octet-stream"), "the binary object (echo)");
      equal([...got.find((o) => o.type === "application/octet-stream").payload], [0, 1, 2, 255, 0], "the bytes, NULs included");
      equal(await objects.request("demo", "echo", { q: 1 }), { q: 1 }, "services/request");
      const parts = [];
      for await (const part of objects.stream("demo", "count", { n: 3 })) parts.push(part.i);
      equal(parts, [1, 2, 3], "a streamed services/request");
      const error = await failure(objects.request("demo", "fail", { rcd: 409, msg: "busy" }), BusgateError, { code: "nak", rcd: 409, status: 409 });
      check(error.message.includes("busy"), error.message);
      await failure(objects.request(`nobody-${token()}`, "echo", {}), BusgateError, { code: "nak", rcd: 503 });
      objects.close();
      await failure(Promise.resolve().then(() => objects.send({ type: "text/plain" }, "late")), BusgateError, { code: "closed" });
    },
  },
  {
    name: "abort: a request, a stream, a subscription and objects stop at the signal",
    async run({ Busgate, BusgateError, url }) {
      const bus = new Busgate(url);
      const controller = new AbortController();
      const started = Date.now();
      setTimeout(() => controller.abort(), 100);
      let error;
      try {
        await bus.request("demo", "sleep", { seconds: 3 }, { signal: controller.signal });
      } catch (exc) {
        error = exc;
      }
      equal(error?.name, "AbortError", "the request rejects with the signal's reason");
      check(Date.now() - started < 2500, "at once, not when the service answers");
      const streaming = new AbortController();
      const parts = [];
      error = undefined;
      try {
        for await (const part of bus.stream("demo", "count", { n: 100 }, { signal: streaming.signal, timeout: 20000 })) {
          parts.push(part.i);
          if (parts.length === 2) streaming.abort();
        }
      } catch (exc) {
        error = exc;
      }
      equal(error?.name, "AbortError", "the stream rejects with the signal's reason");
      equal(parts, [1, 2], "nothing after the abort");
      const closing = new AbortController();
      const sub = bus.subscribe("jsabort.*", { signal: closing.signal });
      await sub.ready();
      closing.abort();
      equal(sub.state, "closed", "the subscription closed");
      const ended = [];
      for await (const event of sub) ended.push(event);
      equal(ended, [], "its iterator ends");
      const before = new AbortController();
      before.abort();
      error = undefined;
      try {
        await bus.request("demo", "echo", {}, { signal: before.signal });
      } catch (exc) {
        error = exc;
      }
      equal(error?.name, "AbortError", "an aborted signal never sends");
      const unsent = bus.subscribe("jsabort.*", { signal: before.signal });
      await failure(unsent.ready(), BusgateError, { code: "closed" });
      await failure(bus.objects({ signal: before.signal, timeout: 2000 }), BusgateError, { code: "closed" });
      const objecting = new AbortController();
      const objects = await bus.objects({ signal: objecting.signal });
      objecting.abort();
      equal(objects.state, "closed", "the Object System connection closed");
    },
  },
  {
    name: "the read-only endpoints",
    async run({ Busgate, url }) {
      const bus = new Busgate(url);
      equal((await bus.healthz()).status, "ok", "healthz");
      equal((await bus.readyz()).status, "ready", "readyz");
      const services = await bus.services();
      check(services.services.some((s) => s.group === "demo"), "the demo is listed");
      check(typeof (await bus.stats()).as_of === "number", "stats");
      check((await bus.metrics()).includes("busgate_gateway_requests_total"), "metrics");
      check((await bus.openapi()).openapi === "3.1.0", "openapi");
      const declarations = await bus.typescript({ group: "demo" });
      check(declarations.includes('"demo": {') && declarations.includes('"echo": Command<'), "typescript declarations");
    },
  },
];
