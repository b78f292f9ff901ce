// The real parts the Node tests run against, as processes on free loopback ports: the broker
// (open, with a journal and its Object System listener), the demo service, and gateways that a
// test may kill and start again on the same port. `busgate` is $BUSGATE_BIN, else the repository's
// .venv/bin/busgate, else the one on the PATH.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const venv = resolve(here, "..", "..", "..", ".venv", "bin", "busgate");
export const BUSGATE = process.env.BUSGATE_BIN || (existsSync(venv) ? venv : "busgate");
/** Bounds on steps that take a second on an idle machine (two shared cores in CI). */
const START_MS = 60_000;

/** A port nobody listens on now (the OS picks it). */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

class Process {
  constructor(name, args) {
    this.name = name;
    this.output = "";
    this.child = spawn(BUSGATE, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PYTHONUNBUFFERED: "1" } });
    this.exited = new Promise((done) => this.child.on("exit", (code, signal) => done({ code, signal })));
    for (const stream of [this.child.stdout, this.child.stderr]) {
      stream.setEncoding("utf8");
      stream.on("data", (text) => {
        this.output = (this.output + text).slice(-20000);
      });
    }
  }

  get running() {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Stop it: SIGTERM (or `signal`), then SIGKILL after 10 s. */
  async stop(signal = "SIGTERM") {
    if (!this.running) return this.exited;
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 10_000);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

async function waitFor(what, condition, process) {
  const end = Date.now() + START_MS;
  for (;;) {
    if (process && !process.running) throw new Error(`${process.name} exited while starting:\n${process.output}`);
    try {
      if (await condition()) return;
    } catch {
      // not yet
    }
    if (Date.now() > end) throw new Error(`${what} did not come up in ${START_MS / 1000} s:\n${process?.output ?? ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export class Stack {
  async start() {
    this.journal = mkdtempSync(join(tmpdir(), "busgate-js-journal-"));
    this.busPort = await freePort();
    this.objectsPort = await freePort();
    this.bus = `bus://127.0.0.1:${this.busPort}`;
    this.broker = new Process("broker", [
      "broker", "--open", "--port", String(this.busPort), "--journal", this.journal,
      "--objects-port", String(this.objectsPort), "--objects-server-peer", "127.0.0.1",
    ]);
    this.gateways = new Map();
    this.extras = new Map();
    await waitFor("the broker", () => portOpen(this.busPort), this.broker);
    this.demo = new Process("demo", ["demo", "--bus", this.bus]);
    this.url = await this.startGateway();
    await waitFor("the demo service", async () => {
      const response = await fetch(`${this.url}/v1/services`);
      return (await response.json()).services.some((s) => s.group === "demo");
    }, this.demo);
    return this;
  }

  /** A gateway on the broker (on `port`, or a free one); resolves with its URL once ready. */
  async startGateway(port, ...extra) {
    const chosen = port ?? (await freePort());
    const gateway = new Process(`gateway :${chosen}`, [
      "gateway", "--bus", this.bus, "--port", String(chosen), "--objects-link", `127.0.0.1:${this.objectsPort}`, "--log-level", "warning", ...extra,
    ]);
    const url = `http://127.0.0.1:${chosen}`;
    this.gateways.set(url, gateway);
    this.extras.set(url, extra);
    await waitFor(`the gateway at ${url}`, async () => (await fetch(`${url}/readyz`)).ok, gateway);
    return url;
  }

  /** Kill the gateway at `url` outright (no orderly end: a crash). */
  async killGateway(url) {
    await this.gateways.get(url)?.stop("SIGKILL");
  }

  /** Start the gateway at `url` again, on the same port. */
  async restartGateway(url) {
    return this.startGateway(Number(new URL(url).port), ...(this.extras.get(url) ?? []));
  }

  async stop() {
    for (const gateway of this.gateways.values()) await gateway.stop();
    await this.demo?.stop();
    await this.broker?.stop();
    if (this.journal) rmSync(this.journal, { recursive: true, force: true });
  }
}

function portOpen(port) {
  return new Promise((resolveOpen) => {
    const socket = connect(port, "127.0.0.1");
    socket.on("connect", () => {
      socket.destroy();
      resolveOpen(true);
    });
    socket.on("error", () => resolveOpen(false));
  });
}
