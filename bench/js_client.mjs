// The JavaScript client's load, for bench/bench_js.py: the same work through the package
// (gateway/sdk/busgate.js, what `npm install busgate` gives) and with the platform alone.
//
//   node bench/js_client.mjs request URL ROUND_SECONDS IN_FLIGHT SETS
//   node bench/js_client.mjs subscribe URL COUNT package|reader [WARM]
//
// request: all sides in this one process, in SETS sets of short rounds, one round per side,
// their order rotating (package, bare, control; bare, control, package; ...): in each round
// IN_FLIGHT loops send the demo's echo of {"n": 1, "text": "hello"} for ROUND_SECONDS and read
// the answer's payload (bare: fetch, status check, JSON parse; control: the same bare fetch again,
// whose ratio to bare is the host's noise). Same process, same connection pool, neighbouring
// moments: the host's drift (other processes, CPU frequency) falls on all sides of a set alike,
// which separate processes minutes apart did not give. Prints one JSON line: per side, each
// round's rate and this process's CPU per request (process.cpuUsage).
//
// subscribe: prints a "ready" line once subscribed to bench.*, then counts WARM + COUNT events,
// measuring the last COUNT (bare: fetch with Accept: text/event-stream, events cut at blank lines,
// each data line parsed as JSON, as EventSource and a JSON.parse would); prints one JSON line:
// rate and CPU per event.

import { Busgate } from "../gateway/sdk/busgate.js";

const [mode, url, amount, ...rest] = process.argv.slice(2);
const ARGS = { n: 1, text: "hello" };
const cpu = () => {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1e6;
};

function callers() {
  const bus = new Busgate(url);
  const body = JSON.stringify({ CMD: "echo", ...ARGS });
  const target = `${url}/v1/request/demo?timeout=5`;
  const bare = async () => {
    const response = await fetch(target, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json" }, body });
    const answer = await response.json();
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return answer.payload;
  };
  return { package: () => bus.request("demo", "echo", ARGS), fetch: bare, control: bare };
}

/** IN_FLIGHT loops calling `once` until `seconds` have passed: the rate and CPU per call. */
async function round(once, seconds, inFlight) {
  let done = 0;
  const cpuBefore = cpu();
  const started = performance.now();
  const end = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() < end) {
        const payload = await once();
        if (payload.n !== 1) throw new Error("a wrong answer");
        done += 1;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return { rate: done / elapsed, cpu_us: ((cpu() - cpuBefore) / done) * 1e6, count: done };
}

async function requests(seconds, inFlight, sets) {
  const sides = callers();
  // Warm up at the measured concurrency: 200 calls per side over IN_FLIGHT loops, so the
  // connection pool has grown to what the loops need (undici opens a connection per call in
  // flight) and the JIT has compiled both paths before the first round.
  for (const once of [sides.fetch, sides.control, sides.package]) {
    let warm = 0;
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (warm < 200) {
          warm += 1;
          await once();
        }
      }),
    );
  }
  const rounds = { package: [], fetch: [], control: [] };
  const orders = [
    ["package", "fetch", "control"],
    ["fetch", "control", "package"],
    ["control", "package", "fetch"],
  ];
  for (let set = 0; set < sets; set++) {
    for (const how of orders[set % orders.length]) rounds[how].push(await round(sides[how], seconds, inFlight));
  }
  return rounds;
}

async function bareReader(total, warm, ready) {
  const response = await fetch(`${url}/v1/subscribe?types=bench.*`, { headers: { Accept: "text/event-stream" } });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let seen = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the stream ended");
    buffered += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, cut);
      buffered = buffered.slice(cut + 2);
      if (block.includes(": subscribed")) ready();
      const data = block.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trimStart()).join("\n");
      if (!data) continue;
      const event = JSON.parse(data);
      if (event.payload === undefined) continue;
      mark(++seen, warm);
      if (seen === total) {
        reader.cancel();
        return;
      }
    }
  }
}

async function packageReader(total, warm, ready) {
  const sub = new Busgate(url).subscribe("bench.*");
  sub.ready().then(ready);
  let seen = 0;
  for await (const event of sub) {
    if (event.payload === undefined) continue;
    mark(++seen, warm);
    if (seen === total) break;
  }
}

// Both clocks start at the first event after the WARM ones, so what is paid once (connecting,
// the JIT compiling the reader's code, as the request loop's warm-up does) is not charged per
// event: the figures are for the COUNT - 1 events after it. The warm-up's own CPU per event
// (events 2 to WARM + 1) is reported apart.
const marks = { first: undefined, measured: undefined };
const start = () => ({ at: performance.now(), cpu: cpu() });
function mark(seen, warm) {
  if (seen === 1) marks.first = start();
  if (seen === warm + 1) marks.measured = start();
}

async function subscribe(count, how, warm) {
  const read = how === "package" ? packageReader : bareReader;
  await read(warm + count, warm, () => console.log(JSON.stringify({ ready: true })));
  const { first, measured } = marks;
  const elapsed = (performance.now() - measured.at) / 1000;
  const warmCpu = warm > 0 ? ((measured.cpu - first.cpu) / warm) * 1e6 : undefined;
  return { rate: (count - 1) / elapsed, cpu_us: ((cpu() - measured.cpu) / (count - 1)) * 1e6, warm_cpu_us: warmCpu, count };
}

const result =
  mode === "request"
    ? await requests(Number(amount), Number(rest[0]), Number(rest[1]))
    : await subscribe(Number(amount), rest[0], Number(rest[1] ?? 0));
console.log(JSON.stringify(result));
process.exit(0);
