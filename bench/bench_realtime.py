"""History reads and push delivery (PROTOCOL.md 5.15, 9.10, 9.14), next to what a user would
do instead, every party its own process (``bench/realtime.py``).

- **History**: a broker journaling (fsync ``none``) and a gateway; ``BENCH_HISTORY_EVENTS``
  (50,000) events published on two types; one HTTP client pages through ``GET
  /v1/history/bench.hist.*?since=...&limit=1000`` from the start to the end. The alternative,
  for someone with the journal's files at hand: ``busgate journal cat DIR`` of the same range,
  every record as a JSON line (it also decodes the header and payload of each). Events/s and CPU
  per event of each reading process (and the broker and gateway for history).
- **Push**: a local HTTP endpoint (asyncio + h11, answering 204) and a push subscription of the
  gateway (``--push-dir``), ``BENCH_PUSH_EVENTS`` (5,000) events published on one type (in
  order, one delivery at a time) and on eight (eight at once); the rate is the endpoint's,
  first to last arrival. The alternative: a plain loop POSTing the same event bodies one after
  another over one kept-alive connection (``http.client``), which has no journal, no retry, no
  order across restarts.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

from bench._common import BUSGATE, Proc, free_port, placement, started, wait_port

__all__ = ["main"]

HISTORY_EVENTS: Final = int(os.environ.get("BENCH_HISTORY_EVENTS", "50000"))
PUSH_EVENTS: Final = int(os.environ.get("BENCH_PUSH_EVENTS", "5000"))


def _driver(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.realtime", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def _line(process: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line:
            data: dict[str, Any] = json.loads(line)
            return data
        if process.poll() is not None:
            break
    raise RuntimeError(f"bench.realtime {process.args} gave no answer")


def _http(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
    response = conn.getresponse()
    text = response.read()
    return response.status, json.loads(text) if text else None


def _ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while _http(port, "GET", "/readyz")[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not reach the bus")
        time.sleep(0.1)


def _history(url: str, gateway_port: int, journal: Path, procs: list[Proc]) -> None:
    publisher = _driver("publish", url, "--count", str(HISTORY_EVENTS),
                        "--types", "bench.hist.a,bench.hist.b")  # fmt: skip
    _line(publisher)
    before = {proc.role: proc.cpu() for proc in procs}
    reader = _driver("history", f"http://127.0.0.1:{gateway_port}", "bench.hist.*")
    ours = _line(reader)
    spent = {proc.role: proc.cpu() - before[proc.role] for proc in procs}
    if ours["events"] != HISTORY_EVENTS:
        raise RuntimeError(f"history read {ours['events']} of {HISTORY_EVENTS} events")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cat_started = time.perf_counter()
    done = subprocess.run([BUSGATE, "journal", "cat", str(journal)], capture_output=True,
                          check=True)  # fmt: skip
    cat_seconds = time.perf_counter() - cat_started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cat_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    lines = done.stdout.count(b"\n")
    rate, alt = ours["events"] / ours["seconds"], lines / cat_seconds
    n = ours["events"]
    print(f"{'history, ' + format(n, ',') + ' events from the start (events/s)':52} "
          f"{'busgate':>9} {'alt':>9} {'ratio':>6}")  # fmt: skip
    print(f"  {'GET /v1/history pages of 1000 vs journal cat':50} {rate:9,.0f} {alt:9,.0f} "
          f"{rate / alt:6.2f}")  # fmt: skip
    cpu = ", ".join(f"{role} {seconds / n * 1e6:.1f}" for role, seconds in spent.items())
    print(f"  CPU us per event: {cpu}, HTTP reader {ours['cpu'] / n * 1e6:.1f} "
          f"({ours['pages']} pages); journal cat {cat_cpu / max(lines, 1) * 1e6:.1f} "
          f"({lines:,} records)")  # fmt: skip


def _receiver(port: int) -> subprocess.Popen[str]:
    receiver = _driver("receiver", str(port), "--expect", str(PUSH_EVENTS))
    _line(receiver, 30)  # ready
    wait_port(port)
    return receiver


def _push(url: str, gateway_port: int, types: int, procs: list[Proc]) -> dict[str, float]:
    port = free_port()
    receiver = _receiver(port)
    try:
        name = f"bench{types}"
        declared = {"pattern": f"bench.push{types}.*", "url": f"http://127.0.0.1:{port}/hook",
                    "concurrency": 16}  # fmt: skip
        status, _ = _http(gateway_port, "PUT", f"/v1/admin/push/{name}", declared)
        if status not in (200, 201):
            raise RuntimeError(f"push subscription refused: HTTP {status}")
        deadline = time.monotonic() + 30
        while _http(gateway_port, "GET", "/v1/admin/push")[1]["push"][-1]["status"] != "running":
            if time.monotonic() > deadline:
                raise RuntimeError("the push subscription did not start")
            time.sleep(0.05)
        before = {proc.role: proc.cpu() for proc in procs}
        kinds = ",".join(f"bench.push{types}.t{k}" for k in range(types))
        publisher = _driver("publish", url, "--count", str(PUSH_EVENTS), "--types", kinds)
        published = _line(publisher)
        arrived = _line(receiver)
        spent = {p.role: (p.cpu() - before[p.role]) / PUSH_EVENTS * 1e6 for p in procs}
        _http(gateway_port, "DELETE", f"/v1/admin/push/{name}")
        return {
            "rate": PUSH_EVENTS / (arrived["last_at"] - arrived["first_at"]),
            "end_to_end": PUSH_EVENTS / (arrived["last_at"] - published["started_at"]),
            **{f"cpu {role}": us for role, us in spent.items()},
        }
    finally:
        receiver.terminate()
        receiver.wait(10)


def _plain_loop() -> dict[str, float]:
    port = free_port()
    receiver = _receiver(port)
    try:
        poster = _driver("poster", f"http://127.0.0.1:{port}/hook", "--count", str(PUSH_EVENTS),
                         "--types", "bench.push1.t0")  # fmt: skip
        posted = _line(poster)
        arrived = _line(receiver)
        return {
            "rate": PUSH_EVENTS / (arrived["last_at"] - arrived["first_at"]),
            "cpu poster": posted["cpu"] / PUSH_EVENTS * 1e6,
        }
    finally:
        receiver.terminate()
        receiver.wait(10)


def main() -> None:
    """Start a journaling broker and a gateway, run both rows, print them."""
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="busgate-bench-rt-")))
        port, gateway_port = free_port(), free_port()
        journal = tmp / "journal"
        broker = stack.enter_context(started(
            "broker", [BUSGATE, "broker", "--open", "--port", str(port), "--log-level",
                       "WARNING", "--journal", str(journal), "--journal-fsync", "none"],
            port=port,
        ))  # fmt: skip
        url = f"bus://127.0.0.1:{port}"
        gateway = stack.enter_context(started(
            "gateway", [BUSGATE, "gateway", "--bus", url, "--port", str(gateway_port),
                        "--push-dir", str(tmp / "push"), "--log-level", "warning"],
            port=gateway_port,
        ))  # fmt: skip
        _ready(gateway_port)
        procs = [broker, gateway]
        print(f"placement: {placement(procs)}; drivers float too")
        _history(url, gateway_port, journal, procs)
        figures = {types: _push(url, gateway_port, types, procs) for types in (1, 8)}
        plain = _plain_loop()
        print(f"{'push to a local endpoint, ' + format(PUSH_EVENTS, ',') + ' events (events/s)':52}"
              f" {'busgate':>9} {'alt':>9} {'ratio':>6}   end to end")  # fmt: skip
        for types, figure in figures.items():
            label = "one type (in order)" if types == 1 else f"{types} types at once"
            print(f"  {'push subscription, ' + label:50} {figure['rate']:9,.0f} "
                  f"{plain['rate']:9,.0f} {figure['rate'] / plain['rate']:6.2f}   "
                  f"{figure['end_to_end']:,.0f}")  # fmt: skip
        for types, figure in figures.items():
            cpu = ", ".join(f"{k[4:]} {v:.1f}" for k, v in figure.items() if k.startswith("cpu"))
            print(f"  CPU us per event, {types} type(s): {cpu}")
        print(f"  (alt: a plain loop POSTing the same bodies over one kept-alive connection, "
              f"CPU {plain['cpu poster']:.1f} us per event; no journal, retries or order "
              f"across restarts)")  # fmt: skip


if __name__ == "__main__":
    main()
