"""busgate on a 3-node NATS cluster (``docs/PROTOCOL.md`` 10.4), in one run:

- **HTTP request/reply through 1 gateway and through 2 gateways on 2 nodes**: the demo service
  with an instance on each of two nodes, ``busgate gateway`` on node 1 (and another on node 2);
  ``wrk -t1`` posting the echo request over 64 connections to the one gateway, then 32 to each
  of the two at once (the rates added).
- **Confirmed publish on a stream of 3 replicas and of 1**: ``publish(confirm=True)`` one at a
  time and 64 in flight (``bench.drivers confirmer``, the bus's stream made with ``?replicas=N``),
  next to nats-py's ``js.publish`` on a stream of the same replicas, what a user would write.
- **Failover**: ``busgate gateway`` and the demo service on one node (given only that node: the
  others are learnt), an HTTP load of 8 connections, and the node killed (``kill -9``) under
  it; next to Starlette + nats-py (``bench/alt/natsgw.py``, ``natsecho.py``, nats-py's own
  reconnection) set up the same way on another node. Printed: the requests that failed after
  the kill and when the last failed one was sent (the time to recover).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from bench._common import BUSGATE, HERE, Proc, free_port, placement, started, wrk
from bench.cluster import BODY, Node, start_cluster

__all__ = ["main"]

SECONDS: Final = float(os.environ.get("BENCH_SECONDS", "6"))
IN_FLIGHT: Final = 64
#: Seconds of HTTP load before and after the kill.
BEFORE_KILL, AFTER_KILL = 3.0, 12.0
UVICORN: Final = [sys.executable, "-m", "uvicorn", "--log-level", "warning", "--no-access-log"]


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


def _gateway(stack: ExitStack, role: str, bus: str) -> tuple[Proc, str]:
    port = free_port()
    proc = stack.enter_context(started(role, [
        BUSGATE, "gateway", "--bus", bus, "--port", str(port), "--log-level", "warning",
    ], port=port))  # fmt: skip
    return proc, f"http://127.0.0.1:{port}/v1/request/demo"


def _wrk_together(urls: list[str], connections: int) -> tuple[float, int, float]:
    """wrk on each URL at once: the rates added, the requests, wrk's CPU seconds."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRK_ONE, url, str(connections), str(SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE.parent,
        )
        for url in urls
    ]
    results = [json.loads(run.communicate(timeout=SECONDS + 60)[0]) for run in runs]
    errors = sum(result["errors"] for result in results)
    if errors:
        raise RuntimeError(f"{errors} errors under load")
    return (
        sum(result["rps"] for result in results),
        sum(result["requests"] for result in results),
        sum(result["cpu"] for result in results),
    )


_WRK_ONE = """
import json, sys
from bench._common import wrk
result, cpu = wrk(sys.argv[1], connections=int(sys.argv[2]), seconds=float(sys.argv[3]),
                  body=b'{"CMD":"echo","x":1}')
print(json.dumps({"rps": result.rps, "requests": result.requests, "errors": result.errors,
                  "cpu": cpu}))
"""


def _requests(stack: ExitStack, nodes: list[Node]) -> None:
    one, two = nodes[0].address, nodes[1].address
    demos = [
        stack.enter_context(started(f"demo {n}", [BUSGATE, "demo", "--bus", f"nats://{bus}"]))
        for n, bus in ((1, one), (2, two))
    ]
    gateway1, url1 = _gateway(stack, "gateway 1", f"nats://{one},{two}")
    gateway2, url2 = _gateway(stack, "gateway 2", f"nats://{two},{one}")
    for url in (url1, url2):
        _ready(url)
        wrk(url, connections=16, seconds=2, body=BODY)  # warm up
    procs = [gateway1, gateway2, *demos, *(node.proc for node in nodes)]
    print(f"placement: {placement(procs)}; wrk -t1 too")
    rows = []
    for label, urls, connections in (
        ("1 gateway, 64 connections", [url1], 64),
        ("2 gateways on 2 nodes, 32 + 32", [url1, url2], 32),
    ):
        before = {proc.role: proc.cpu() for proc in procs}
        rate, requests, wrk_cpu = _wrk_together(urls, connections)
        cpu = {role: (proc.cpu() - before[role]) / requests * 1e6 for role, proc in
               ((p.role, p) for p in procs)}  # fmt: skip
        gateways = cpu["gateway 1"] + cpu["gateway 2"]
        nats = sum(cpu[f"nats {node.name}"] for node in nodes)
        demo = cpu["demo 1"] + cpu["demo 2"]
        rows.append(rate)
        per_wrk = wrk_cpu / requests * 1e6
        print(f"  {label:34} {rate:9,.0f} req/s   CPU us per request: gateways {gateways:.0f}  "
              f"nats-servers {nats:.0f}  demo {demo:.0f}  wrk {per_wrk:.0f}")  # fmt: skip
    print(f"  2 gateways / 1 gateway: {rows[1] / rows[0]:.2f} (one machine: the processes "
          "share its cores; on machines of their own each gateway brings its own)")  # fmt: skip


def _driver(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.drivers", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _confirmed(kind: str, url: str, replicas: int, nodes: list[Node]) -> dict[str, Any]:
    before = sum(node.proc.cpu() for node in nodes)
    confirmer = _driver("confirmer", kind, url, "--seconds", str(SECONDS / 2),
                        "--in-flight", str(IN_FLIGHT), "--replicas", str(replicas))  # fmt: skip
    out, _ = confirmer.communicate(timeout=300)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if confirmer.returncode != 0 or not lines:
        raise RuntimeError(f"the {kind} confirmer failed: {out[-500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    confirms = (result["sequential"] + result["parallel"]) * SECONDS / 2
    result["cpu"] = (sum(node.proc.cpu() for node in nodes) - before) / max(confirms, 1) * 1e6
    return result


def _confirms(nodes: list[Node]) -> None:
    everyone = ",".join(node.address for node in nodes)
    plain = ",".join(f"nats://{node.address}" for node in nodes)
    print(f"  {'confirmed publish (events/s)':34} {'one at a time':>14} {'64 in flight':>13} "
          f"{'CPU us/confirm, 3 servers':>26}")  # fmt: skip
    for replicas in (3, 1):
        bus = f"nats://{everyone}?prefix=r{replicas}&stream=BENCH_R{replicas}&replicas={replicas}"
        for label, kind, url in (
            (f"busgate, {replicas} replica(s)", "bus", bus),
            (f"alt: js.publish, {replicas} replica(s)", "nats", plain),
        ):
            figure = _confirmed(kind, url, replicas, nodes)
            print(f"  {label:34} {figure['sequential']:14,.0f} {figure['parallel']:13,.0f} "
                  f"{figure['cpu']:26.1f}")  # fmt: skip


def _load(url: str, seconds: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.cluster", "load", url, "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=HERE.parent,
    )
    assert process.stdout is not None
    if '"ready"' not in process.stdout.readline():
        raise RuntimeError("the HTTP load did not start")
    return process


def _failover(stack: ExitStack, nodes: list[Node]) -> None:
    """Kill node 3 under busgate's load and node 2 under the alternative's (each on its own)."""
    alt_dir = str(HERE / "alt")
    busgate_node, alt_node = nodes[2], nodes[1]
    bus = f"nats://{busgate_node.address}"
    stack.enter_context(started("demo failover", [BUSGATE, "demo", "--bus", bus]))
    _, busgate_url = _gateway(stack, "gateway failover", bus)
    env = {"NATS_URL": f"nats://{alt_node.address}"}
    stack.enter_context(started("alt echo", [sys.executable, f"{alt_dir}/natsecho.py"], env=env))
    alt_port = free_port()
    app = [*UVICORN, "--app-dir", alt_dir, "--port", str(alt_port), "natsgw:app"]
    stack.enter_context(started("alt app", app, env=env, port=alt_port))
    alt_url = f"http://127.0.0.1:{alt_port}/v1/request/demo"
    print("  failover: requests that failed once the node the gateway and the service are on "
          "was killed (kill -9; those in flight then included), 8 connections")  # fmt: skip
    for label, url, node in (
        ("busgate gateway + demo", busgate_url, busgate_node),
        ("alt: starlette + nats-py", alt_url, alt_node),
    ):
        _ready(url)
        load = _load(url, BEFORE_KILL + AFTER_KILL)
        time.sleep(BEFORE_KILL)
        killed = time.monotonic()
        node.proc.process.kill()
        node.proc.process.wait(10)
        out, _ = load.communicate(timeout=AFTER_KILL + 60)
        sent = json.loads(out.strip().splitlines()[-1])
        ended = [(at - killed, status) for at, done, status in sent if done >= killed]
        failed = [max(at, 0.0) for at, status in ended if status != 200]
        last = max(failed) if failed else 0.0
        ok = sum(1 for _, status in ended if status == 200)
        still = sum(1 for at, status in ended if status != 200 and at > AFTER_KILL - 2)
        print(f"  {label:34} {len(failed):5} failed, {ok:6,} answered; the last failure sent "
              f"{last:5.2f} s after the kill" + (f"; still failing at the end ({still})"
                                                 if still else ""))  # fmt: skip


def main() -> None:
    """Start the cluster, measure, print the rows."""
    with tempfile.TemporaryDirectory(prefix="busgate-bench-cluster-") as tmp, ExitStack() as stack:
        nodes = start_cluster(stack, Path(tmp))
        _requests(stack, nodes)
        _confirms(nodes)
        _failover(stack, nodes)


if __name__ == "__main__":
    main()
