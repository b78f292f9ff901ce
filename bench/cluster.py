"""What ``bench_cluster`` runs: a 3-node nats-server cluster, and an HTTP load that notes when
each request was sent and how it ended.

- :func:`start_cluster` starts the nodes (JetStream, each routed to all, stores under a temporary
  directory) as processes of the bench and waits until each says it is healthy (``/healthz``:
  JetStream has a meta leader).
- ``python -m bench.cluster load URL --seconds S --connections C`` posts the echo request over C
  keep-alive connections, each one request at a time, and prints one JSON line: for each
  request when it was sent and when it ended (monotonic: the clock every process of the machine
  shares) and its status (0: no answer), so the bench can say which ones failed once it killed
  a node (those in flight then included), and until when.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from bench._common import NATS_SERVER, Proc, free_port, started
from bus.asyncio.loop import run

__all__ = ["Node", "start_cluster"]

BODY: Final = b'{"CMD":"echo","x":1}'


@dataclass
class Node:
    """One node: its process, client port and monitoring port."""

    name: str
    proc: Proc
    port: int
    monitor: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.monitor}/healthz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def start_cluster(stack: ExitStack, root: Path, size: int = 3, timeout: float = 60.0) -> list[Node]:
    """Start ``size`` nodes of one cluster; they are stopped when ``stack`` closes.

    Raises:
        RuntimeError: not all healthy within ``timeout`` seconds.
    """
    ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
    routes = ",".join(f"nats://127.0.0.1:{route}" for _, route, _ in ports)
    nodes = []
    for index, (port, route, monitor) in enumerate(ports, 1):
        name = f"n{index}"
        command = [
            NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-n", name, "-m", str(monitor),
            "-js", "-sd", str(root / name), "--cluster_name", "bench",
            "--cluster", f"nats://127.0.0.1:{route}", "--routes", routes,
        ]  # fmt: skip
        proc = stack.enter_context(started(f"nats {name}", command, port=port))
        nodes.append(Node(name, proc, port, monitor))
    deadline = time.monotonic() + timeout
    while not all(node.healthy() for node in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the NATS cluster is not healthy after {timeout:g} s")
        time.sleep(0.1)
    return nodes


async def _load(url: str, seconds: float, connections: int) -> list[tuple[float, float, int]]:
    sent: list[tuple[float, float, int]] = []
    end = time.monotonic() + seconds
    headers = {"content-type": "application/json"}

    async def one_connection() -> None:
        async with httpx.AsyncClient(timeout=15.0) as http:
            while time.monotonic() < end:
                at = time.monotonic()
                try:
                    status = (await http.post(url, content=BODY, headers=headers)).status_code
                except httpx.HTTPError:
                    status = 0
                    await asyncio.sleep(0.05)  # a refused connection: not a busy loop
                sent.append((at, time.monotonic(), status))

    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster")
    parser.add_argument("role", choices=("load",))
    parser.add_argument("url")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args(argv)
    print(json.dumps({"ready": True}), flush=True)
    print(json.dumps(run(_load(args.url, args.seconds, args.connections))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
