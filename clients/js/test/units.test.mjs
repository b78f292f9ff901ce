// The sans-I/O parts, without a gateway: the object codec against docs/PROTOCOL.md 6.1's
// examples, the SSE and NDJSON splitting fed whole and byte by byte, the backoff's bounds, and the
// error mapping of 9.3's bodies.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Backoff, Busgate, BusgateError, decodeObject, encodeObject, LineSplitter, SseParser } from "../../../gateway/sdk/busgate.js";
import { errorFromBody } from "../../../gateway/sdk/errors.js";

const hex = (text) => Uint8Array.from(text.trim().split(/\s+/).map((b) => parseInt(b, 16)));

test("objects encode and decode as PROTOCOL.md 6.1 shows", () => {
  // example text-payload: {"type":"text/plain; charset=UTF-8"} + "hyvä"
  const wire = hex(`7b 22 74 79 70 65 22 3a 22 74 65 78 74 2f 70 6c 61 69 6e 3b 20 63 68 61 72 73 65 74
    3d 55 54 46 2d 38 22 2c 22 73 69 7a 65 22 3a 35 7d 00 68 79 76 c3 a4`);
  assert.deepEqual(encodeObject({ type: "text/plain; charset=UTF-8" }, "hyvä"), wire);
  const object = decodeObject(wire.buffer);
  assert.equal(object.type, "text/plain; charset=UTF-8");
  assert.equal(object.text(), "hyvä");
  // example ping: metadata only is a text message
  assert.equal(encodeObject({ event: "ping", id: "1" }), '{"event":"ping","id":"1"}');
  assert.equal(decodeObject('{"event":"ping","id":"1"}').event, "ping");
  // a payload with NULs: only the first NUL ends the metadata; size is written last
  const bytes = encodeObject({ size: 99, type: "x/y" }, new Uint8Array([0, 0, 7]));
  assert.equal(new TextDecoder().decode(bytes.subarray(0, bytes.indexOf(0))), '{"type":"x/y","size":3}');
  assert.deepEqual([...decodeObject(bytes).payload], [0, 0, 7]);
  // anything else is JSON, typed application/json unless typed already
  const json = decodeObject(encodeObject({}, { a: 1 }));
  assert.equal(json.type, "application/json");
  assert.deepEqual(json.json(), { a: 1 });
  assert.throws(() => decodeObject("[1]"), (e) => e instanceof BusgateError && e.code === "protocol");
  assert.throws(() => decodeObject("{nope"), (e) => e instanceof BusgateError && e.code === "protocol");
});

function parseSse(chunks) {
  const lines = new LineSplitter();
  const parser = new SseParser();
  const items = [];
  for (const chunk of chunks) {
    for (const line of lines.push(chunk)) {
      const item = parser.line(line);
      if (item) items.push(item);
    }
  }
  return { items, lastId: parser.lastId };
}

function pushSse(chunks) {
  const parser = new SseParser();
  const items = chunks.flatMap((chunk) => parser.push(chunk));
  return { items, lastId: parser.lastId };
}

test("SSE: events, ids, comments, retry; whole or byte by byte, LF or CRLF", () => {
  const stream =
    "retry: 2000\n: subscribed\n\nid: 41\nevent: message\ndata: {\"a\":\ndata: 1}\n\n: keepalive\n\n" +
    "data:no space\n\nid: 5-2\nevent: error\ndata: {\"code\":\"overflow\"}\n\n";
  const expected = [
    { kind: "retry", ms: 2000 },
    { kind: "comment", text: "subscribed" },
    { kind: "event", event: { event: "message", data: '{"a":\n1}', id: "41" } },
    { kind: "comment", text: "keepalive" },
    { kind: "event", event: { event: "message", data: "no space", id: "41" } },
    { kind: "event", event: { event: "error", data: '{"code":"overflow"}', id: "5-2" } },
  ];
  assert.deepEqual(parseSse([stream]).items, expected);
  assert.deepEqual(parseSse([...stream]).items, expected);
  assert.deepEqual(parseSse([stream.replaceAll("\n", "\r\n")]).items, expected);
  assert.equal(parseSse([stream]).lastId, "5-2");
  // an event not yet ended by its blank line is not dispatched
  assert.deepEqual(parseSse(["id: 1\ndata: x\n"]).items, []);
  // push (what subscribe feeds): the same items from text cut anywhere, lines read in place
  const cuts = [[stream], [...stream], [stream.replaceAll("\n", "\r\n")], [...stream.replaceAll("\n", "\r\n")], [stream.slice(0, 30), stream.slice(30, 31), stream.slice(31)]];
  for (const chunks of cuts) assert.deepEqual(pushSse(chunks).items, expected);
  assert.equal(pushSse([stream]).lastId, "5-2");
  assert.deepEqual(pushSse(["id: 1\ndata: x\n"]).items, []);
});

test("SSE fields as the standard reads them: the name before the first colon, one space dropped", () => {
  const stream =
    "data\n\n" + // a field without a colon: data with an empty value
    "dat: no\ndatum: no\ndata:  two spaces\ndata:\n\n" +
    "event:messages\ndata: a\n\nevent: message\ndata: b\n\nevent\ndata: c\n\n" +
    "id: 7\nid: x\0y\nid\ndata: d\n\nid: 9\n\n" + // an id with NUL is ignored; "id" alone sets ""
    "retry: 12x\nretry: 250\nretry\n:\n:no space\nfield:with:colons\n\n";
  const expected = [
    { kind: "event", event: { event: "message", data: "", id: "" } },
    { kind: "event", event: { event: "message", data: " two spaces\n", id: "" } },
    { kind: "event", event: { event: "messages", data: "a", id: "" } },
    { kind: "event", event: { event: "message", data: "b", id: "" } },
    { kind: "event", event: { event: "message", data: "c", id: "" } },
    { kind: "event", event: { event: "message", data: "d", id: "" } },
    { kind: "retry", ms: 250 },
    { kind: "comment", text: "" },
    { kind: "comment", text: "no space" },
  ];
  assert.deepEqual(parseSse([stream]).items, expected);
  assert.deepEqual(pushSse([stream]).items, expected);
  assert.deepEqual(pushSse([...stream]).items, expected);
  assert.equal(pushSse([stream]).lastId, "9"); // an event without data still sets the last id
});

test("NDJSON lines: a partial line waits for its end", () => {
  const lines = new LineSplitter();
  assert.deepEqual(lines.push('{"a":1}\n{"b"'), ['{"a":1}']);
  assert.deepEqual(lines.push(":2}\n"), ['{"b":2}']);
  assert.deepEqual(lines.push("tail"), []);
  assert.equal(lines.end(), "tail");
});

test("backoff: doubling steps, each between half and all of its step, reset after success", () => {
  const low = new Backoff({ initial: 100, max: 1000 }, () => 0);
  const high = new Backoff({ initial: 100, max: 1000 }, () => 1);
  assert.deepEqual([1, 2, 3, 4, 5].map(() => low.next()), [50, 100, 200, 400, 500]);
  assert.deepEqual([1, 2, 3, 4, 5].map(() => high.next()), [100, 200, 400, 800, 1000]);
  high.reset();
  assert.equal(high.next(), 100);
  const limited = new Backoff({ attempts: 2 });
  assert.ok(limited.next() !== undefined && limited.next() !== undefined);
  assert.equal(limited.next(), undefined);
  const told = new Backoff({ initial: 500, max: 10000 }, () => 1);
  told.suggest(2000); // an SSE retry: field
  assert.equal(told.next(), 2000);
});

test("errors: the gateway's bodies (PROTOCOL.md 9.3) and a stream's markers", () => {
  const nak = errorFromBody(409, { error: { code: "nak", message: "busy", rcd: 409, response: { header: { TYP: "NAK" }, payload: {} } } });
  assert.deepEqual([nak.status, nak.code, nak.rcd, nak.message, nak.response.header.TYP], [409, "nak", 409, "busy", "NAK"]);
  const field = errorFromBody(400, { error: { code: "bad_request", message: "argument 'qty'", field: "qty" } });
  assert.equal(field.field, "qty");
  const limited = errorFromBody(429, { error: { code: "rate_limited", message: "slow down" } }, "6");
  assert.equal(limited.retryAfter, 6);
  const marker = errorFromBody(0, { event: "timeout", final: true, error: { code: "timeout", message: "late", received: 2 } });
  assert.deepEqual([marker.status, marker.code, marker.received], [504, "timeout", 2]);
  const plain = errorFromBody(502, "Bad Gateway");
  assert.deepEqual([plain.status, plain.code, plain.message], [502, "http_502", "Bad Gateway"]);
  assert.ok(nak instanceof Error && nak.name === "BusgateError");
});

test("the URL of a call: the path under the base, the query as URLSearchParams writes it", async () => {
  const seen = [];
  const fetch = async (url, init) => {
    seen.push({ url: String(url), init });
    return new Response('{"payload":{},"events":[]}', { status: 200, headers: { "content-type": "application/json" } });
  };
  const odd = "a b/c*!'()~é&=+%.-_";
  const bus = new Busgate("http://gw.example:8080/prefix?x=1#y", { fetch, key: "K" });
  await bus.history(`t.${odd}`, { since: odd, limit: 5 });
  await bus.request("demo", "echo", { x: 1 }, { timeout: 1500 });
  await bus.typescript({ group: "g h" });
  const expected = new URL(`v1/history/${encodeURIComponent(`t.${odd}`)}`, "http://gw.example:8080/prefix/");
  expected.searchParams.set("limit", "5");
  expected.searchParams.set("since", odd);
  assert.deepEqual(
    seen.map((call) => call.url),
    [expected.href, "http://gw.example:8080/prefix/v1/request/demo?timeout=1.5", "http://gw.example:8080/prefix/v1/typescript?group=g%20h"],
  );
  // a GET is never answered from a browser's cache; a POST goes as a bare fetch would send it
  assert.deepEqual(seen.map((call) => call.init.cache), ["no-store", undefined, "no-store"]);
  assert.deepEqual(seen[1].init.headers, { "X-API-Key": "K", Accept: "application/json", "Content-Type": "application/json" });
  assert.equal(seen[1].init.body, '{"CMD":"echo","x":1}');
});
