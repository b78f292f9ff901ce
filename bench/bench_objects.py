"""The Object System over TCP next to a plain asyncio relay of the same objects.

Same run, every party its own process: a sender streams 200,000 small objects (JSON metadata,
NUL, a 22-byte payload) and a receiver subscribed to everything counts them, once through
``busgate broker --objects-port`` (the Object System router: subscriptions, routing ids,
``route`` loop protection) and once through ``bench/alt/relay.py`` (parse to the end of each
object, forward it whole to every other client). The ratio is busgate / relay (goal >= 1.0).

Both servers run on the same event loop (uvloop when installed, as ``busgate`` does), so the
ratio compares the servers, not the loops; and they take turns, ``BENCH_OBJECTS_ROUNDS`` rounds
(default 3) of busgate then relay, medians reported: on a shared two-core machine one run of
each, minutes apart in load, could differ by half.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from contextlib import ExitStack
from typing import Any, Final

from bench._common import BUSGATE, HERE, Proc, free_port, placement, started

__all__ = ["main"]

COUNT: Final = int(os.environ.get("BENCH_OBJECTS", "200000"))
ROUNDS: Final = max(1, int(os.environ.get("BENCH_OBJECTS_ROUNDS", "3")))


def _client(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.objects", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _run(port: int, server: Proc) -> dict[str, Any]:
    receiver = _client("receive", "127.0.0.1", str(port), "--count", str(COUNT))
    assert receiver.stdout is not None
    if '"ready"' not in receiver.stdout.readline():
        receiver.kill()
        raise RuntimeError("the receiver did not start")
    before = server.cpu()
    sender = _client("send", "127.0.0.1", str(port), "--count", str(COUNT))
    sender.communicate(timeout=300)
    out, _ = receiver.communicate(timeout=300)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["cpu"] = (server.cpu() - before) / max(result["received"], 1) * 1e6
    return result


def main() -> None:
    """Start both servers, stream through each, print the ratio."""
    with ExitStack() as stack:
        broker_port, objects_port, relay_port = free_port(), free_port(), free_port()
        broker = stack.enter_context(started(
            "broker", [BUSGATE, "broker", "--open", "--port", str(broker_port),
                       "--objects-port", str(objects_port), "--log-level", "WARNING"],
            port=objects_port,
        ))  # fmt: skip
        relay = stack.enter_context(started(
            "relay", [sys.executable, str(HERE / "alt" / "relay.py"), str(relay_port)],
            port=relay_port,
        ))  # fmt: skip
        runs: dict[str, list[dict[str, Any]]] = {"busgate": [], "relay": []}
        for _ in range(ROUNDS):
            runs["busgate"].append(_run(objects_port, broker))
            runs["relay"].append(_run(relay_port, relay))
        print(f"placement: {placement([broker, relay])}; sender and receiver float too")
        medians = {}
        for key, name in (("busgate", "busgate Object System"), ("relay", "plain asyncio relay")):
            rates = [result["rate"] for result in runs[key]]
            cpu = statistics.median(result["cpu"] for result in runs[key])
            medians[key] = statistics.median(rates)
            print(f"{name:24} {medians[key]:11,.0f} objects/s (median of "
                  f"{', '.join(f'{rate:,.0f}' for rate in rates)})  server CPU {cpu:.1f} "
                  "us/object")  # fmt: skip
        print(f"ratio busgate/relay {medians['busgate'] / medians['relay']:.2f} (goal >= 1.0)")
        for result in runs["busgate"] + runs["relay"]:
            if result["received"] != COUNT:
                raise RuntimeError(f"objects lost: {result['received']} of {COUNT}")


if __name__ == "__main__":
    main()
