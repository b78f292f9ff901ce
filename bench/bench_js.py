"""The JavaScript client (``clients/js``, served as ``/sdk/busgate.js``) next to the platform alone.

Same run, same gateway (``busgate run``: broker, demo service, gateway), Node driving
(``bench/js_client.mjs``):

- request/reply: ``bus.request("demo", "echo", {...})`` against bare ``fetch`` of the same
  ``POST /v1/request/demo`` with a status check and ``JSON.parse`` of the answer (the same bytes
  on the wire), 16 in flight, all in one Node process in ``BENCH_JS_PAIRS`` (24) sets of
  ``BENCH_JS_ROUND_SECONDS`` (0.5 s) rounds, one per side, their order rotating: the row is the
  median of the sets' CPU ratios, with their spread, next to a control, the bare fetch against
  itself (a third side), whose ratio is what the host's noise alone gives. Sides in separate
  processes minutes apart gave ratios from 0.87 to 2.46 on a loaded host (undici's own 1-3 ms of
  CPU per request here moves with the host's load more than the package's part of it);
- SSE delivery: ``bus.subscribe("bench.*")`` read with ``for await`` against a bare reader
  (``fetch`` with ``Accept: text/event-stream``, events cut at blank lines, ``JSON.parse`` of each
  ``data``: what ``EventSource`` plus a parse does) while a bus publisher sends
  ``BENCH_JS_WARM_EVENTS`` (4,000) then ``BENCH_JS_EVENTS`` (4,000) events (together under the
  gateway's 10,000-event queue per SSE client), each side in its own Node process, in
  ``BENCH_JS_ROUNDS`` (5) alternating rounds (medians and the per-round spread reported).

Both print the rate and the Node process's CPU per request or event: the package's cost is the
difference (goal: under 10 %). SSE figures count from the first event after the warm-up ones
(both clocks start there), so connecting and the JIT compiling the reader, paid once, are not
charged per event (the request loops warm up with 200 calls alike): a long-lived subscription's
cost. The warm-up's own CPU per event is printed apart (in a fresh Node process the package's
reader costs more per event than the bare one's few lines until the JIT has compiled it). The
gateway and the publisher set most of the rate, so the CPU figures say more about the package
than the rates do.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from contextlib import ExitStack
from typing import Any, Final

from bench._common import BUSGATE, HERE, free_port, placement, started

__all__ = ["main"]

ROUNDS: Final = max(1, int(os.environ.get("BENCH_JS_ROUNDS", "5")))
PAIRS: Final = max(1, int(os.environ.get("BENCH_JS_PAIRS", "24")))
ROUND_SECONDS: Final = float(os.environ.get("BENCH_JS_ROUND_SECONDS", "0.5"))
EVENTS: Final = int(os.environ.get("BENCH_JS_EVENTS", "4000"))
WARM_EVENTS: Final = int(os.environ.get("BENCH_JS_WARM_EVENTS", "4000"))
IN_FLIGHT: Final = 16
DRIVER: Final = HERE / "js_client.mjs"


def _node(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["node", str(DRIVER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE.parent,
    )


def _last_json(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise RuntimeError(f"the Node driver failed: {err.strip()[-400:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _requests(url: str, pairs: int) -> dict[str, list[dict[str, Any]]]:
    driver = _node("request", url, str(ROUND_SECONDS), str(IN_FLIGHT), str(pairs))
    return _last_json(driver, 2 * pairs * ROUND_SECONDS + 120)


def _events(url: str, bus: str, how: str) -> dict[str, Any]:
    total = WARM_EVENTS + EVENTS
    reader = _node("subscribe", url, str(EVENTS), how, str(WARM_EVENTS))
    assert reader.stdout is not None
    if '"ready"' not in reader.stdout.readline():
        reader.kill()
        raise RuntimeError("the SSE reader did not subscribe")
    subprocess.run(
        [sys.executable, "-m", "bench.drivers", "publisher", "bus", bus, "--count", str(total)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=HERE.parent,
        check=True,
    )
    try:
        return _last_json(reader, 120)
    except subprocess.TimeoutExpired:
        reader.kill()
        raise RuntimeError("the SSE reader did not get every event in 120 s") from None


def _row(label: str, package: list[dict[str, Any]], bare: list[dict[str, Any]], unit: str) -> None:
    rate = statistics.median(r["rate"] for r in package)
    base = statistics.median(r["rate"] for r in bare)
    cpu = statistics.median(r["cpu_us"] for r in package)
    base_cpu = statistics.median(r["cpu_us"] for r in bare)
    print(
        f"{label}: package {rate:,.0f} {unit}/s, Node {cpu:.1f} us CPU each | platform alone "
        f"{base:,.0f} {unit}/s, {base_cpu:.1f} us each | rate ratio {rate / base:.2f}, "
        f"CPU {(cpu / base_cpu - 1) * 100:+.0f} %"
    )
    rounds = ", ".join(
        f"{p['rate']:,.0f}/{b['rate']:,.0f}" for p, b in zip(package, bare, strict=True)
    )
    print(f"   rounds (package/alone): {rounds}")
    ratios = sorted(p["cpu_us"] / b["cpu_us"] for p, b in zip(package, bare, strict=True))
    cpus = ", ".join(
        f"{p['cpu_us']:.1f}/{b['cpu_us']:.1f}" for p, b in zip(package, bare, strict=True)
    )
    print(f"   CPU us per {unit[:-1] if unit.endswith('s') else unit} (package/alone): {cpus}")
    print(f"   CPU ratio per round: {', '.join(f'{r:.2f}' for r in ratios)} (spread)")


def _quartiles(values: list[float]) -> str:
    low, mid, high = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{min(values):.2f} | {low:.2f} {mid:.2f} {high:.2f} | {max(values):.2f}"


def _pairs(label: str, rounds: dict[str, list[dict[str, Any]]]) -> None:
    package, bare, control = rounds["package"], rounds["fetch"], rounds["control"]
    ratios = [p["cpu_us"] / b["cpu_us"] for p, b in zip(package, bare, strict=True)]
    noise = [c["cpu_us"] / b["cpu_us"] for c, b in zip(control, bare, strict=True)]
    rates = [p["rate"] / b["rate"] for p, b in zip(package, bare, strict=True)]
    cpu = statistics.median(r["cpu_us"] for r in package)
    base_cpu = statistics.median(r["cpu_us"] for r in bare)
    rate = statistics.median(r["rate"] for r in package)
    base = statistics.median(r["rate"] for r in bare)
    ratio = statistics.median(ratios)
    print(
        f"{label}: package {rate:,.0f} req/s, Node {cpu:,.0f} us CPU each | platform alone "
        f"{base:,.0f} req/s, {base_cpu:,.0f} us each | median of {len(ratios)} sets: rate ratio "
        f"{statistics.median(rates):.2f}, CPU ratio {ratio:.2f} ({(ratio - 1) * 100:+.0f} %)"
    )
    print(f"   CPU ratio per set, min | quartiles | max: {_quartiles(ratios)}")
    print(f"   control, bare fetch / bare fetch, the same way: {_quartiles(noise)}")
    under = sum(r < 1.10 for r in ratios)
    counts = sum(r["count"] for r in package), sum(r["count"] for r in bare)
    print(
        f"   sets with the package under 1.10x: {under} of {len(ratios)}; "
        f"requests per side {counts[0]:,} / {counts[1]:,}"
    )


def _warm_up(package: list[dict[str, Any]], bare: list[dict[str, Any]]) -> None:
    if WARM_EVENTS == 0:
        return
    cpus = ", ".join(
        f"{p['warm_cpu_us']:.1f}/{b['warm_cpu_us']:.1f}" for p, b in zip(package, bare, strict=True)
    )
    print(f"   warm-up, CPU us per event over events 2-{WARM_EVENTS + 1:,} (package/alone): {cpus}")


def main() -> None:
    """Start ``busgate run``, run each side in turn, print both rows."""
    with ExitStack() as stack:
        port, bus_port, objects_port = free_port(), free_port(), free_port()
        run = stack.enter_context(started(
            "busgate run", [BUSGATE, "run", "--port", str(port), "--bus-port", str(bus_port),
                            "--objects-port", str(objects_port), "--no-mop"],
            port=port,
        ))  # fmt: skip
        url, bus = f"http://127.0.0.1:{port}", f"bus://127.0.0.1:{bus_port}"
        _requests(url, 1)  # the demo service is up and answering before the measured pairs
        calls = _requests(url, PAIRS)
        events: dict[str, list[dict[str, Any]]] = {"package": [], "reader": []}
        for _ in range(ROUNDS):
            for how in events:
                events[how].append(_events(url, bus, how))
        print(f"placement: {placement([run])}; the Node drivers and the publisher float")
        _pairs(f"request/reply from Node, {IN_FLIGHT} in flight, one process", calls)
        _row(
            f"SSE delivery to Node (after {WARM_EVENTS:,} warm-up events)",
            events["package"],
            events["reader"],
            "events",
        )
        _warm_up(events["package"], events["reader"])


if __name__ == "__main__":
    main()
