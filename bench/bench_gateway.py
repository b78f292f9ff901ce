"""Requests through the gateway next to what a user would pick instead, in one run.

All of these run at once, each in its own process, on loopback:

- ``bare``: a bare Starlette JSON echo under uvicorn (``bench/alt/bare.py``): the ceiling, HTTP
  and JSON with no bus at all;
- ``alt``: the hand-written alternative (``bench/alt/natsgw.py`` + ``natsecho.py``): Starlette
  calling nats-py ``request()`` through ``nats-server`` to a nats-py responder;
- ``busgate``: ``busgate gateway`` -> ``busgate broker`` -> ``busgate demo`` (echo);
- ``busgate x2``: the same with ``busgate gateway --workers 2``, next to the alternative under
  ``uvicorn --workers 2`` (each worker its own NATS connection), so both use the machine alike;
- ``busgate typed``: the same gateway's typed route, ``POST /v1/demo/echo`` (the command's
  declared schema checked before the request goes on).

Load: ``wrk -t1`` (C, one thread) POSTing ``{"CMD":"echo","x":1}`` over 16 and 64 keep-alive
connections, two rounds, the best of each kept. Every row prints each process's CPU per request
(wrk's own included), so the reader sees who spent what; the last lines give the ratios and the
sequential keep-alive latency of ``busgate run`` next to ``busgate gateway`` (Nagle's delay
would show there as ~40 ms).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Final

import httpx

from bench._common import (
    BUSGATE,
    HERE,
    NATS_SERVER,
    Proc,
    WrkResult,
    free_port,
    placement,
    started,
    wrk,
)

__all__ = ["main"]

BODY: Final = b'{"CMD":"echo","x":1}'
SECONDS: Final = float(os.environ.get("BENCH_SECONDS", "6"))
ROUNDS: Final = 2
CONCURRENCY: Final = (16, 64)
UVICORN: Final = [sys.executable, "-m", "uvicorn", "--log-level", "warning", "--no-access-log"]


@dataclass
class Target:
    """One measured path: its URL and the processes that serve it."""

    name: str
    url: str
    procs: list[Proc]


@dataclass
class Row:
    path: str
    connections: int
    result: WrkResult
    cpu_us: dict[str, float]


def _ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.post(url, content=BODY, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} never answered 200")
        time.sleep(0.2)


def _measure(path: Target, connections: int) -> Row:
    before = {proc.role: proc.cpu() for proc in path.procs}
    result, wrk_cpu = wrk(path.url, connections=connections, seconds=SECONDS, body=BODY)
    if result.errors:
        raise RuntimeError(f"{path.name}: {result.errors} errors under load")
    cpu = {
        proc.role: (proc.cpu() - before[proc.role]) / result.requests * 1e6 for proc in path.procs
    }
    cpu["wrk"] = wrk_cpu / result.requests * 1e6
    return Row(path.name, connections, result, cpu)


def _start_all(stack: ExitStack) -> tuple[list[Target], str, str]:
    nats_port, bare_port, alt_port = free_port(), free_port(), free_port()
    broker_port, gw_port, gw2_port = free_port(), free_port(), free_port()
    run_port, run_bus, run_objects = free_port(), free_port(), free_port()
    nats_env = {"NATS_URL": f"nats://127.0.0.1:{nats_port}"}
    alt_dir = str(HERE / "alt")

    def up(role: str, command: Sequence[str], port: int = 0, **env: str) -> Proc:
        return stack.enter_context(started(role, command, env=dict(env), port=port))

    nats_server = up(
        "nats-server", [NATS_SERVER, "-a", "127.0.0.1", "-p", str(nats_port)], nats_port
    )
    echo = up("echo", [sys.executable, f"{alt_dir}/natsecho.py"], **nats_env)
    alt = up("app", [*UVICORN, "--app-dir", alt_dir, "--port", str(alt_port), "natsgw:app"],
             alt_port, **nats_env)  # fmt: skip
    alt2_port = free_port()
    alt2 = up("app x2", [*UVICORN, "--app-dir", alt_dir, "--port", str(alt2_port), "--workers",
                         "2", "natsgw:app"], alt2_port, **nats_env)  # fmt: skip
    bare = up("app", [*UVICORN, "--app-dir", alt_dir, "--port", str(bare_port), "bare:app"],
              bare_port)  # fmt: skip
    bus = f"bus://127.0.0.1:{broker_port}"
    broker = up("broker", [BUSGATE, "broker", "--open", "--port", str(broker_port),
                           "--log-level", "WARNING"], broker_port)  # fmt: skip
    demo = up("demo", [BUSGATE, "demo", "--bus", bus])
    gateway = up("gateway", [BUSGATE, "gateway", "--bus", bus, "--port", str(gw_port),
                             "--log-level", "warning"], gw_port)  # fmt: skip
    gateway2 = up("gateway x2", [BUSGATE, "gateway", "--bus", bus, "--port", str(gw2_port),
                                 "--workers", "2", "--log-level", "warning"], gw2_port)  # fmt: skip
    up("run", [BUSGATE, "run", "--port", str(run_port), "--bus-port", str(run_bus),
               "--objects-port", str(run_objects)], run_port)  # fmt: skip
    path = "/v1/request/demo"
    paths = [
        Target("bare starlette (ceiling)", f"http://127.0.0.1:{bare_port}{path}", [bare]),
        Target(
            "starlette + nats-py (alt)",
            f"http://127.0.0.1:{alt_port}{path}",
            [alt, nats_server, echo],
        ),  # fmt: skip
        Target("busgate gateway", f"http://127.0.0.1:{gw_port}{path}", [gateway, broker, demo]),
        Target(
            "busgate gateway --workers 2",
            f"http://127.0.0.1:{gw2_port}{path}",
            [gateway2, broker, demo],
        ),  # fmt: skip
        Target(
            "alt, uvicorn --workers 2",
            f"http://127.0.0.1:{alt2_port}{path}",
            [alt2, nats_server, echo],
        ),  # fmt: skip
        Target(
            "busgate typed /v1/demo/echo",
            f"http://127.0.0.1:{gw_port}/v1/demo/echo",
            [gateway, broker, demo],
        ),  # fmt: skip
    ]
    run_url = f"http://127.0.0.1:{run_port}{path}"
    for url in [p.url for p in paths] + [run_url]:
        _ready(url)
    return paths, run_url, paths[2].url


def _line(row: Row) -> str:
    cpu = "  ".join(f"{role} {us:.0f}" for role, us in row.cpu_us.items())
    r = row.result
    return (
        f"{row.connections:>4} {row.path:30} {r.rps:9,.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f}   {cpu}"
    )


def main() -> None:
    """Start everything, measure, print the table and the ratios."""
    with ExitStack() as stack:
        paths, run_url, gateway_url = _start_all(stack)
        for path in paths:  # warm up every process (imports, caches, JIT-free but lazy)
            wrk(path.url, connections=16, seconds=2, body=BODY)
        print(f"placement: {placement([p for path in paths for p in path.procs])}; wrk -t1 too")
        print(f"{'conn':>4} {'path':30} {'req/s':>9} {'p50 ms':>7} {'p99 ms':>7}"
              "   CPU us per request, by process")  # fmt: skip
        best: dict[tuple[str, int], Row] = {}
        for connections in CONCURRENCY:
            for _ in range(ROUNDS):
                for path in paths:
                    row = _measure(path, connections)
                    key = (path.name, connections)
                    if key not in best or row.result.rps > best[key].result.rps:
                        best[key] = row
            for path in paths:
                print(_line(best[(path.name, connections)]))
        for connections in CONCURRENCY:
            bare, alt, ours, ours2, alt2, typed = (best[(p.name, connections)] for p in paths)
            print(
                f"c{connections}: busgate/alt {ours.result.rps / alt.result.rps:.2f} "
                f"(p99 {ours.result.p99_ms:.1f} vs {alt.result.p99_ms:.1f} ms), "
                f"both with 2 workers {ours2.result.rps / alt2.result.rps:.2f} "
                f"(busgate x2 / alt x1 {ours2.result.rps / alt.result.rps:.2f}), "
                f"busgate/bare {ours.result.rps / bare.result.rps:.2f} (goal 1.0, issue 35); "
                f"typed route/alt {typed.result.rps / alt.result.rps:.2f}"
            )
        run, _ = wrk(run_url, connections=1, seconds=3, body=BODY)
        gateway, _ = wrk(gateway_url, connections=1, seconds=3, body=BODY)
        print(
            f"sequential keep-alive echo (wrk -c1): busgate run p50 {run.p50_ms:.2f} ms "
            f"p99 {run.p99_ms:.2f} ms, busgate gateway p50 {gateway.p50_ms:.2f} ms "
            f"p99 {gateway.p99_ms:.2f} ms (goal: both under 2 ms)"
        )


if __name__ == "__main__":
    main()
