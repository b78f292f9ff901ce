"""Connection scale: thousands of idle subscribers on busgate's ``/ws`` and SSE, and on
nats-server's own WebSocket listener, side by side in the same run.

For each size and each server, every party its own process:

- ``busgate /ws``: ``busgate gateway --workers W`` (W = one per 10,000 sockets: a process may
  hold 20,000 here), linked to a broker's Object System hub; each subscriber upgrades, sends
  ``routing/subscribe`` to ``bus/bench.*`` and is joined at the reply;
- ``busgate SSE``: the same gateway; each subscriber opens ``GET /v1/subscribe?types=bench.*``
  and is joined at the response head;
- ``nats-server WS``: nats-server with a ``websocket { port, no_tls: true }`` block; each
  subscriber upgrades, sends ``CONNECT``, ``SUB bench.tick`` and ``PING``, joined at the ``PONG``.

The subscribers (``bench/connections.py``) are raw sockets with a minimal frame reader, one
process per 5,000, each on its own source address (127.0.0.x), joining 64 at a time each. Per
row: server memory per subscriber (the servers' resident memory once all joined, less what
they held before the first, over the subscribers), the servers' CPU while every subscriber is
idle (over ``BENCH_IDLE_S`` seconds; by default the row's own keepalive interval: ``/ws``'s
ping interval, SSE's keepalive interval, and for nats-server the ``/ws`` one, as it is compared
with that row; a window of one whole interval holds exactly one keepalive of each subscriber
however their joins were spread, as a steady state does), the
join rate (all of them, the first tenth and the last tenth: a rate that falls as the count grows
is a walk over everyone per join) and one event to all: from its publication to the first
subscriber, the median and the last (wall clock, same machine).

Sizes: ``BENCH_CONNECTIONS`` (a comma-separated list, or ``full`` for 1k, 10k, 20k, 50k and
100k; default ``1000,10000``: the quick run of ``make bench``, a few minutes). The gateway gets
``--workers`` one per 10,000 subscribers (50k runs 5 workers and 100k runs 10), or
``BENCH_WORKERS`` (e.g. 3 for 50k: a process may hold 20,000 sockets here). nats-server is
one process, so it runs up to 20,000 (its file descriptors are capped there, as ours are per
process). The sizes that ran are printed first.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psutil

from bench._common import BUSGATE, HERE, NATS_SERVER, Proc, free_port, placement, started
from gateway.process.settings import GatewaySettings

__all__ = ["Row", "broker", "main", "run", "sizes"]

QUICK: Final = (1000, 10000)
FULL: Final = (1000, 10000, 20000, 50000, 100000)
PER_CLIENT: Final = 5000  # subscribers per client process
PER_WORKER: Final = 10000  # busgate sockets per gateway worker
NATS_MAX: Final = 20000  # one process: its descriptors are capped there
#: The idle window: a whole keepalive interval and more (every stream and /ws client gets its
#: keepalive in it, at the gateway's default intervals).
_DEFAULTS: Final = GatewaySettings()
IDLE_S: Final = float(os.environ.get("BENCH_IDLE_S", "0")) or None
#: each row's idle window when ``BENCH_IDLE_S`` does not set one: its keepalive interval
KEEPALIVE_S: Final = {
    "ws": _DEFAULTS.ws_ping_interval,
    "sse": _DEFAULTS.sse_keepalive_interval,
    "nats": _DEFAULTS.ws_ping_interval,  # compared with /ws (its own pings: every 2 min)
}
WORKERS: Final = int(os.environ.get("BENCH_WORKERS", "0"))
SETTLE_S: Final = 2.0
START_S: Final = 120.0  # for a server to be ready (a loaded machine starts Python slowly)


def sizes() -> tuple[int, ...]:
    """The sizes asked for by ``BENCH_CONNECTIONS``."""
    text = os.environ.get("BENCH_CONNECTIONS", "").strip()
    if not text:
        return QUICK
    if text == "full":
        return FULL
    return tuple(int(part) for part in text.split(",") if part.strip())


def _memory(proc: Proc) -> int:
    """Resident bytes of a process and its children."""
    try:
        root = psutil.Process(proc.process.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


@dataclass
class Row:
    """One server at one size."""

    name: str
    size: int
    joined: int = 0
    errors: int = 0
    error: str = ""
    retried: int = 0
    join_s: float = 0.0
    rate_first: float = 0.0
    rate_last: float = 0.0
    memory_kb: float = 0.0
    idle_pct: float = 0.0
    first_ms: float = 0.0
    p50_ms: float = 0.0
    last_ms: float = 0.0
    arrived: int = 0
    still_open: int = 0
    note: str = ""


class Clients:
    """The subscriber processes of one row."""

    def __init__(self, kind: str, port: int, count: int) -> None:
        per = math.ceil(count / max(1, math.ceil(count / PER_CLIENT)))
        self.procs: list[subprocess.Popen[str]] = []
        left = count
        while left > 0:
            n = min(per, left)
            source = f"127.0.0.{10 + len(self.procs)}"
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.connections", kind, "127.0.0.1", str(port),
                 "--count", str(n), "--source", source],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE.parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            ))  # fmt: skip
            left -= n

    def read(self) -> list[dict[str, Any]]:
        out = []
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("a subscriber process died")
            out.append(json.loads(line))
        return out

    def tell(self, command: str) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(command + "\n")
            proc.stdin.flush()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    self.tell_one(proc, "close")
                except (BrokenPipeError, OSError):
                    pass
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()

    @staticmethod
    def tell_one(proc: subprocess.Popen[str], command: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(command + "\n")
        proc.stdin.flush()


def _publish_bus(bus_url: str, token: str) -> float:
    import asyncio  # noqa: PLC0415

    from bus.asyncio.client import connect  # noqa: PLC0415

    async def go() -> float:
        client = await connect(bus_url)
        try:
            await asyncio.sleep(0.2)
            sent = time.time()
            await client.publish("bench.tick", {"token": token})
            await client.flush()
            return sent
        finally:
            await client.close()

    return asyncio.run(go())


@contextmanager
def _nats_publisher(port: int) -> Iterator[socket.socket]:
    """A NATS connection made before the subscribers: at 20,000 they fill nats-server's
    descriptors, and a publisher connecting then would wait in its backlog for good."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.recv(4096)  # INFO
        sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        sock.recv(4096)  # PONG
        yield sock


def _publish_nats(sock: socket.socket, token: str) -> float:
    payload = json.dumps({"token": token}).encode()
    sent = time.time()
    sock.sendall(b"PUB bench.tick %d\r\n%s\r\nPING\r\n" % (len(payload), payload))
    sock.recv(4096)
    return sent


def _measure(
    row: Row,
    kind: str,
    port: int,
    servers: Sequence[Proc],
    publish: Any,
    idle_s: float | None = IDLE_S,
    settle_s: float = SETTLE_S,
) -> Row:
    time.sleep(settle_s)
    memory_before = sum(_memory(p) for p in servers)
    clients = Clients(kind, port, row.size)
    try:
        joins = clients.read()
        started_at = min(j["start"] for j in joins)
        times = sorted(t for j in joins for t in j["times"])
        row.joined, row.errors = len(times), sum(j["errors"] for j in joins)
        row.retried = sum(j["retried"] for j in joins)
        row.error = "; ".join(e for j in joins for e in j["error"])[:200]
        if times:
            tenth = max(1, len(times) // 10)
            row.join_s = times[-1] - started_at
            row.rate_first = tenth / max(times[tenth - 1] - started_at, 1e-6)
            row.rate_last = tenth / max(times[-1] - times[-tenth], 1e-6)
        time.sleep(settle_s)
        row.memory_kb = (
            (sum(_memory(p) for p in servers) - memory_before) / 1024 / max(row.joined, 1)
        )
        window = idle_s or KEEPALIVE_S[kind]
        cpu = sum(p.cpu() for p in servers)
        time.sleep(window)
        row.idle_pct = (sum(p.cpu() for p in servers) - cpu) / window * 100
        token = secrets.token_hex(8)
        clients.tell(f"expect {token} 120")
        clients.read()  # every process looks for the token: an event sent earlier went unseen
        sent = publish(token)
        arrivals = sorted(t for j in clients.read() for t in j["arrivals"])
        row.arrived = len(arrivals)
        if arrivals:
            row.first_ms = (arrivals[0] - sent) * 1000
            row.p50_ms = (statistics.median(arrivals) - sent) * 1000
            row.last_ms = (arrivals[-1] - sent) * 1000
        clients.tell("status")
        row.still_open = sum(j["open"] for j in clients.read())
    finally:
        clients.close()
    return row


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _gateway_ready(port: int, bus_url: str, workers: int) -> bool:
    """``/readyz`` is 200 from this gateway (its bus, not another process's that took the port)
    and, with ``--workers``, every worker is ready (a 200 is one worker's answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            body = json.loads(response.read())
    except (OSError, ValueError):
        return False
    if body.get("bus") != bus_url:
        return False
    count = body.get("workers", {"ready": 1, "count": 1})
    return bool(count["ready"] == count["count"] == workers)


@contextmanager
def _serving(
    role: str,
    command: Callable[[list[int]], list[str]],
    ports: int,
    ready: Callable[[list[int]], bool],
) -> Iterator[tuple[Proc, list[int]]]:
    """Start ``command(ports)`` on fresh free ports until it is ``ready`` (within
    :data:`START_S`); a process that exits first (another took a port it chose meanwhile) is
    started again on other ports, up to three times."""
    for _ in range(3):
        chosen: list[int] = []
        while len(chosen) < ports:  # distinct ports: a port is free until someone binds it
            if (port := free_port()) not in chosen:
                chosen.append(port)
        with started(role, command(chosen)) as proc:
            deadline = time.monotonic() + START_S
            while proc.process.poll() is None and not ready(chosen):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{role} not ready after {START_S:g} s: see {proc.log}")
                time.sleep(0.1)
            if proc.process.poll() is None:
                yield proc, chosen
                return
    raise RuntimeError(f"{role} exited at start three times: see {proc.log}")


@contextmanager
def _busgate(
    size: int, broker_port: int, objects_port: int, per_worker: int = PER_WORKER
) -> Iterator[tuple[Proc, int, int]]:
    workers = WORKERS or max(1, math.ceil(size / per_worker))
    bus_url = f"bus://127.0.0.1:{broker_port}"

    def command(ports: list[int]) -> list[str]:
        return [BUSGATE, "gateway", "--bus", bus_url, "--port", str(ports[0]), "--workers",
                str(workers), "--objects-link", f"127.0.0.1:{objects_port}", "--log-level",
                "warning"]  # fmt: skip

    with _serving(
        f"gateway-{size}", command, 1, lambda ports: _gateway_ready(ports[0], bus_url, workers)
    ) as (proc, ports):
        yield proc, ports[0], workers


@contextmanager
def _nats(size: int) -> Iterator[tuple[Proc, int, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "nats.conf"

        def command(ports: list[int]) -> list[str]:
            config.write_text(
                f"port: {ports[0]}\nwebsocket {{\n  port: {ports[1]}\n  no_tls: true\n}}\n"
            )
            return [NATS_SERVER, "-c", str(config)]

        def ready(ports: list[int]) -> bool:
            return all(_answers(port) for port in ports)

        with _serving(f"nats-ws-{size}", command, 2, ready) as (proc, ports):
            yield proc, ports[0], ports[1]


def _rows(
    size: int,
    broker_port: int,
    objects_port: int,
    idle_s: float | None,
    settle_s: float,
    per_worker: int = PER_WORKER,
    one_gateway: bool = False,
) -> list[Row]:
    rows = []
    bus_url = f"bus://127.0.0.1:{broker_port}"
    with ExitStack() as both:
        shared = None
        if one_gateway:
            shared = both.enter_context(_busgate(size, broker_port, objects_port, per_worker))
        for kind, name in (("ws", "busgate /ws"), ("sse", "busgate SSE")):
            with ExitStack() as own:
                gateway, port, workers = shared or own.enter_context(
                    _busgate(size, broker_port, objects_port, per_worker)
                )
                row = Row(name, size, note=f"{workers} worker{'s' * (workers > 1)}")
                rows.append(
                    _measure(
                        row,
                        kind,
                        port,
                        [gateway],
                        lambda token: _publish_bus(bus_url, token),
                        idle_s,
                        settle_s,
                    )
                )
    if size <= NATS_MAX:
        with _nats(size) as (nats, port, ws_port), _nats_publisher(port) as publisher:
            row = Row("nats-server WS", size, note="1 process")
            rows.append(
                _measure(
                    row,
                    "nats",
                    ws_port,
                    [nats],
                    lambda token: _publish_nats(publisher, token),
                    idle_s,
                    settle_s,
                )
            )
    return rows


def _print(rows: list[Row]) -> None:
    print(f"  {'server':16} {'size':>7} {'joined':>7} {'join s':>7} {'joins/s':>8} "
          f"{'first10%':>8} {'last10%':>8} {'KB/sub':>7} {'idle %':>7} "
          f"{'first ms':>8} {'p50 ms':>7} {'last ms':>8} {'got':>7} {'open':>7}")  # fmt: skip
    for r in rows:
        rate = r.joined / r.join_s if r.join_s else 0.0
        print(
            f"  {r.name:16} {r.size:7,} {r.joined:7,} {r.join_s:7.1f} {rate:8,.0f} "
            f"{r.rate_first:8,.0f} {r.rate_last:8,.0f} {r.memory_kb:7.1f} {r.idle_pct:7.2f} "
            f"{r.first_ms:8.0f} {r.p50_ms:7.0f} {r.last_ms:8.0f} {r.arrived:7,} "
            f"{r.still_open:7,}  {r.note}",
            flush=True,
        )
        if r.errors:
            print(f"    {r.errors} joins failed: {r.error}")
        if r.retried:
            print(f"    {r.retried} joins refused with 503 (not ready) and tried again")


@contextmanager
def broker() -> Iterator[tuple[Proc, int, int]]:
    """A broker with an Object System hub: the process, its bus port and its objects port."""

    def command(ports: list[int]) -> list[str]:
        return [BUSGATE, "broker", "--open", "--port", str(ports[0]), "--objects-port",
                str(ports[1]), "--objects-server-peer", "127.0.0.1", "--log-level",
                "WARNING"]  # fmt: skip

    def ready(ports: list[int]) -> bool:
        return all(_answers(port) for port in ports)

    with _serving("broker", command, 2, ready) as (proc, ports):
        yield proc, ports[0], ports[1]


def run(
    size: int, broker_port: int, objects_port: int, idle_s: float | None = IDLE_S,
    settle_s: float = SETTLE_S, per_worker: int = PER_WORKER, one_gateway: bool = False,
) -> list[Row]:  # fmt: skip
    """The rows of one size: busgate /ws, busgate SSE (one gateway worker per ``per_worker``
    subscribers; a gateway of their own each, unless ``one_gateway``: then their memory rows
    are not apart, which a test of the pieces does not read) and (up to 20,000) nats-server
    WS."""
    return _rows(size, broker_port, objects_port, idle_s, settle_s, per_worker, one_gateway)


def main() -> None:
    """Start a broker, then each server per size; print the table."""
    wanted = sizes()
    how = (
        "the quick default; BENCH_CONNECTIONS=20000 or =full (1k..100k) for more"
        if wanted == QUICK
        else "BENCH_CONNECTIONS"
    )
    idle = f"{IDLE_S:g} s" if IDLE_S else "each row's keepalive interval"
    print(f"sizes: {', '.join(f'{n:,}' for n in wanted)} ({how}); idle over {idle}")
    with broker() as (proc, broker_port, objects_port):
        rows: list[Row] = []
        for size in wanted:
            rows += run(size, broker_port, objects_port)
            _print(rows[-3:] if size <= NATS_MAX else rows[-2:])
        print(f"placement: {placement([proc])}; subscribers: one process per "
              f"{PER_CLIENT:,}, each on its own 127.0.0.x")  # fmt: skip
        print("  (KB/sub: the server's resident memory per subscriber; idle %: of one core, all")
        print("   subscribers joined and quiet, over one keepalive interval: busgate pings each")
        print("   /ws client every 25 s and writes each SSE stream a comment every 30 s;")
        print("   nats-server pings every 2 min, so its window holds none; first/p50/last: one")
        print("   event from its publication)")


if __name__ == "__main__":
    main()
