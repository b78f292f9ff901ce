"""Fan-out: one publication delivered to 100 WebSocket or SSE subscribers, next to websockets.

Same run, every party its own process:

- ``websockets``: the reference, the websockets library's own ``broadcast()`` from one server
  process to 100 clients (``bench/alt/broadcast.py``);
- ``busgate /ws``: 100 Object System clients on the gateway's ``/ws``, subscribed to
  ``bus/bench.*``; a bus client publishes the events (publisher -> broker -> the broker's
  Object System hub -> the gateway's object server -> 100 sockets);
- ``busgate SSE``: 100 streams of ``GET /v1/subscribe?types=bench.*`` on the gateway; the same
  publisher (publisher -> broker -> the gateway's bus link -> 100 streams).

Each delivers 2,000 small events to each of its 100 clients. The receivers (``bench/fanout.py``)
are one Python process reading all 100 connections; they count deliveries from the first to the
last and test each one's payload for the event's type (text from the reference, bytes from
busgate; nothing decoded). The same receivers serve every server, twice:

- **frame reader** (the ratio that measures the servers): a minimal RFC 6455 reader, about 1 us
  per delivery, so what sets the rate is the server (as with 100 browsers on 100 machines);
- **websockets' client** (what a Python subscriber runs): ``async for message in connection``,
  about 9 us per delivery, more than either server spends, so this one receiving process sets
  the rate for both and the ratio says how the two servers' frames suit that client.

Each row prints how busy the receiving process was from the first delivery to the last (its CPU
time over that time; near 1.0, it set the rate). The ratio is busgate / websockets with the
same receivers; CPU per delivery is given for every process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack
from typing import Any, Final

from bench._common import BUSGATE, HERE, Proc, free_port, placement, started

__all__ = ["main"]

CLIENTS: Final = int(os.environ.get("BENCH_CLIENTS", "100"))
EVENTS: Final = int(os.environ.get("BENCH_EVENTS_FANOUT", "2000"))


def _python(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _run(
    kind: str, url: str, serving: list[Proc], bus_url: str | None, reader: str
) -> dict[str, Any]:
    receiver = _python("-m", "bench.fanout", kind, url, "--clients", str(CLIENTS),
                       "--count", str(EVENTS), "--reader", reader)  # fmt: skip
    assert receiver.stdout is not None
    line = receiver.stdout.readline()
    if '"ready"' not in line:
        receiver.kill()
        raise RuntimeError(f"{kind}: the receivers did not start: {line!r}")
    before = {proc.role: proc.cpu() for proc in serving}
    if bus_url is not None:
        publisher = _python("-m", "bench.drivers", "publisher", "bus", bus_url,
                            "--count", str(EVENTS))  # fmt: skip
        publisher.communicate(timeout=300)
    out = receiver.stdout.read()
    _, _, usage = os.wait4(receiver.pid, 0)
    receiver.returncode = 0
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    deliveries = max(result["deliveries"], 1)
    result["cpu"] = {
        proc.role: (proc.cpu() - before[proc.role]) / deliveries * 1e6 for proc in serving
    }
    result["receiver_cpu"] = (usage.ru_utime + usage.ru_stime) / deliveries * 1e6
    return result


def _table(title: str, results: dict[str, dict[str, Any]]) -> None:
    reference_rate = results["websockets broadcast()"]["rate"]
    print(f"receivers: {title}")
    print(f"{'  fan-out to ' + str(CLIENTS) + ' clients':30} {'deliveries/s':>13} {'ratio':>6}"
          f" {'arrived':>9} {'busy':>5}   CPU us per delivery")  # fmt: skip
    for name, result in results.items():
        cpu = ", ".join(f"{role} {us:.1f}" for role, us in result["cpu"].items())
        print(
            f"  {name:28} {result['rate']:13,.0f} {result['rate'] / reference_rate:6.2f} "
            f"{result['deliveries']:>9,} {result['busy']:5.2f}   {cpu}; "
            f"receivers {result['receiver_cpu']:.1f}"
        )


def main() -> None:
    """Start the servers, fan out on each, print the table."""
    with ExitStack() as stack:
        broker_port, objects_port, gateway_port, ws_port = (free_port() for _ in range(4))
        bus_url = f"bus://127.0.0.1:{broker_port}"
        broker = stack.enter_context(started(
            "broker", [BUSGATE, "broker", "--open", "--port", str(broker_port),
                       "--objects-port", str(objects_port), "--objects-server-peer", "127.0.0.1",
                       "--log-level", "WARNING"],
            port=broker_port,
        ))  # fmt: skip
        gateway = stack.enter_context(started(
            "gateway", [BUSGATE, "gateway", "--bus", bus_url, "--port", str(gateway_port),
                        "--objects-link", f"127.0.0.1:{objects_port}", "--log-level", "warning"],
            port=gateway_port,
        ))  # fmt: skip
        reference = stack.enter_context(started(
            "websockets", [sys.executable, str(HERE / "alt" / "broadcast.py"), str(ws_port)],
            port=ws_port,
        ))  # fmt: skip
        http = f"http://127.0.0.1:{gateway_port}"
        ws_url, gateway_ws = f"ws://127.0.0.1:{ws_port}/", f"ws://127.0.0.1:{gateway_port}/ws"
        tables = {
            "a minimal frame reader (the servers set the rate)": {
                "websockets broadcast()": _run("websockets", ws_url, [reference], None, "frames"),
                "busgate /ws": _run("ws", gateway_ws, [gateway, broker], bus_url, "frames"),
                "busgate SSE": _run("sse", http, [gateway, broker], bus_url, "frames"),
            },
            "websockets' client (the receiving process sets the rate)": {
                "websockets broadcast()": _run("websockets", ws_url, [reference], None, "library"),
                "busgate /ws": _run("ws", gateway_ws, [gateway, broker], bus_url, "library"),
            },
        }
        print(f"placement: {placement([broker, gateway, reference])}; receivers in one process")
        for title, results in tables.items():
            _table(title, results)
        print("  (ratio: / websockets broadcast() with the same receivers; busy: the receiving")
        print("   process's CPU time over the delivery time; every client must get every event)")
        for title, results in tables.items():
            for name, result in results.items():
                if result["deliveries"] != result["expected"]:
                    raise RuntimeError(
                        f"{name} ({title}): {result['deliveries']} of {result['expected']}"
                    )


if __name__ == "__main__":
    main()
