"""Confirms at JetStream's pace (issue 35 goal 4): confirmed publishes, 64 in flight.

Side by side in every round, each its own process: a busgate broker journaling under fsync
``none``, one under ``interval`` (PROTOCOL.md 5.12), and nats-server with JetStream (a file
stream; ``js.publish`` waits for the stream's ack; JetStream's own fsync is ``sync_interval``,
2 min by default, so it compares with ``interval`` and ``none``). One confirmer process
(``bench/drivers.py confirmer --phases parallel``) drives each in turn: 64 confirmed publishes
in flight for ``BENCH_SECONDS`` (busgate: ``publish(confirm=True)`` of bus.client; nats-py:
``js.publish``). The goal is a ratio >= 1.0 against ``js.publish`` and a broker CPU per confirm
no higher than nats-server's.

Each row: confirms/s, the ratio to ``js.publish`` measured in the same round, and CPU
microseconds per confirm of the server (from /proc, over the driver's run) and of the client
(its own CPU over the confirms, start-up and connect left out). ``BENCH_ROUNDS`` rounds
(default 3; the order of the sides turns each round), then the median and the spread (min-max)
of every figure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

from bench._common import BUSGATE, HERE, NATS_SERVER, Proc, free_port, placement, started

__all__ = ["main"]

SECONDS: Final = float(os.environ.get("BENCH_SECONDS", "3"))
ROUNDS: Final = int(os.environ.get("BENCH_ROUNDS", "3"))
IN_FLIGHT: Final = 64
SIDES: Final = ("busgate, fsync none", "busgate, fsync interval", "alt: JetStream js.publish")


def _confirmed(kind: str, url: str, server: Proc) -> dict[str, float]:
    """One confirmer run: its rate and CPU per confirm, server and client."""
    before = server.cpu()
    driver = subprocess.Popen(
        [sys.executable, "-m", "bench.drivers", "confirmer", kind, url, "--seconds",
         str(SECONDS), "--in-flight", str(IN_FLIGHT), "--phases", "parallel"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    out, _ = driver.communicate(timeout=SECONDS * 10 + 60)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if driver.returncode != 0 or not lines:
        raise RuntimeError(
            f"the {kind} confirmer failed (status {driver.returncode}): {out[-500:]}"
        )
    result = json.loads(lines[-1])
    calls = max(int(result["calls"]), 1)
    return {
        "rate": float(result["parallel"]),
        "server": (server.cpu() - before) / calls * 1e6,
        "client": float(result["cpu"]) / calls * 1e6,
    }


def _servers(stack: ExitStack, tmp: Path) -> dict[str, tuple[str, str, Proc]]:
    sides: dict[str, tuple[str, str, Proc]] = {}
    for policy in ("none", "interval"):
        port = free_port()
        broker = stack.enter_context(started(
            f"broker confirms {policy}",
            [BUSGATE, "broker", "--open", "--port", str(port), "--log-level", "WARNING",
             "--journal", str(tmp / f"journal-{policy}"), "--journal-fsync", policy],
            port=port,
        ))  # fmt: skip
        sides[f"busgate, fsync {policy}"] = ("bus", f"bus://127.0.0.1:{port}", broker)
    port = free_port()
    nats_server = stack.enter_context(started(
        "nats-server confirms",
        [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp / "jetstream")],
        port=port,
    ))  # fmt: skip
    sides[SIDES[2]] = ("nats", f"nats://127.0.0.1:{port}", nats_server)
    return sides


def _spread(values: list[float], digits: int) -> str:
    median = statistics.median(values)
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    """Start the servers, run the rounds, print each round and the median and spread."""
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="busgate-confirms-")))
        sides = _servers(stack, tmp)
        print(f"placement: {placement([proc for _, _, proc in sides.values()])}; drivers float")
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in SIDES}
        print(f"{'confirmed publish, 64 in flight':32} {'round':>5} {'confirms/s':>11} "
              f"{'/ js.publish':>12} {'CPU us/confirm: server':>23} {'client':>7}")  # fmt: skip
        for round_number in range(ROUNDS):
            turn = round_number % len(SIDES)
            order = SIDES[turn:] + SIDES[:turn]
            measured: dict[str, dict[str, float]] = {}
            for name in order:
                kind, url, server = sides[name]
                measured[name] = _confirmed(kind, url, server)
            alt = measured[SIDES[2]]["rate"]
            for name in SIDES:
                figure = measured[name]
                figure["ratio"] = figure["rate"] / alt
                figures[name].append(figure)
                print(f"  {name:30} {round_number + 1:5} {figure['rate']:11,.0f} "
                      f"{figure['ratio']:12.2f} {figure['server']:23.1f} "
                      f"{figure['client']:7.1f}")  # fmt: skip
        print(f"  median (min-max) of {ROUNDS} rounds:")
        nats_cpu = [figure["server"] for figure in figures[SIDES[2]]]
        for name in SIDES:
            rows: list[dict[str, Any]] = figures[name]
            cpu = [figure["server"] for figure in rows]
            versus = [ours / theirs for ours, theirs in zip(cpu, nats_cpu, strict=True)]
            print(f"  {name:30} {_spread([f['rate'] for f in rows], 0):>20} confirms/s, "
                  f"ratio {_spread([f['ratio'] for f in rows], 2)}, server CPU us/confirm "
                  f"{_spread(cpu, 1)} = {_spread(versus, 2)}x nats-server's, client "
                  f"{_spread([f['client'] for f in rows], 1)}")  # fmt: skip
        print("  (goal: ratio >= 1.0 under none and interval, server CPU per confirm <= 1.0x "
              "nats-server's; same run)")  # fmt: skip
