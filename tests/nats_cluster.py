"""A real N-node nats-server cluster with JetStream on loopback, for the tests that lose a node.

Each node is its own ``nats-server`` child process: free client, route and monitoring ports,
its store directory and log file under the directory it is given, every node routed to every
other one (one cluster name, JetStream on). :meth:`NatsCluster.start` returns once every node
says it is healthy (``/healthz``: JetStream is up and in contact with a meta leader), so a
stream made right after finds its peers. A node can be killed (``kill -9``, as a crash) and
started again on the same ports and store, after which :meth:`NatsCluster.wait_healthy` says
when it has rejoined.

    cluster = NatsCluster(tmp_path, size=3).start()
    client = await connect(cluster.url)          # nats://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
    cluster.kill(0); ...; cluster.restart(0); cluster.wait_healthy()
    cluster.stop()

The ``nats_cluster`` fixture (``tests/conftest.py``) is one such cluster per test module.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["NATS_SERVER", "NatsCluster", "NatsNode"]

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"

#: Seconds a cluster (or a restarted node) may take to become healthy: a bound on two loaded
#: cores, not a speed check (an idle machine needs about 2 s for three nodes).
START_WAIT = 60.0


def free_tcp_port() -> int:
    """A TCP port free on the loopback interface right now."""
    return free_tcp_ports(1)[0]


def free_tcp_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on the loopback interface right now.

    Every socket stays bound until all are chosen: ports picked one at a time can repeat (the
    kernel may hand the port of a socket just closed to the next bind), which once gave two nodes
    of a cluster the same client port.
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class NatsNode:
    """One node: ``nats-server`` with a client port, a route port and a monitoring port."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.port = self.cluster_port = self.monitor_port = 0
        self.take_ports(free_tcp_ports(3))
        self.store = root / name
        self.log = root / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.wanted = False  # started, not killed or stopped since

    def take_ports(self, ports: Sequence[int]) -> None:
        """Use these client, route and monitoring ports from the next start on."""
        self.port, self.cluster_port, self.monitor_port = ports

    def lost_a_port(self) -> bool:
        """Whether the node exited because one of its ports was taken (by another process)."""
        return not self.alive and self.wanted and b"address already in use" in self.log.read_bytes()

    @property
    def url(self) -> str:
        """This node alone: ``nats://127.0.0.1:PORT``."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, as a cluster URL lists it."""
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, cluster: str, routes: Sequence[str]) -> None:
        """Start the process (on the same ports and store as before, after a kill)."""
        self.store.mkdir(parents=True, exist_ok=True)
        self.wanted = True
        command = [
            NATS_SERVER,
            "-a", "127.0.0.1", "-p", str(self.port), "-n", self.name,
            "-m", str(self.monitor_port),
            "-js", "-sd", str(self.store),
            "--cluster_name", cluster,
            "--cluster", f"nats://127.0.0.1:{self.cluster_port}",
            "--routes", ",".join(routes),
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed, no peer is told."""
        self.wanted = False
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM (nats-server shuts down cleanly), SIGKILL if it does not within 10 s."""
        self.wanted = False
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def monitor(self, path: str) -> tuple[int, dict[str, Any]]:
        """GET one monitoring endpoint: ``(status, JSON body)``; ``(0, {})`` when it does not
        answer (not started yet, killed)."""
        url = f"http://127.0.0.1:{self.monitor_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read() or b"{}")
            except ValueError:
                return exc.code, {}
        except (OSError, ValueError):
            return 0, {}

    def healthy(self) -> bool:
        """Up, JetStream enabled and current with a meta leader (nats-server's ``/healthz``)."""
        status, _ = self.monitor("/healthz")
        return self.alive and status == 200

    def meta_leader(self) -> str:
        """The name of the JetStream meta leader this node knows ("" when none)."""
        _, body = self.monitor("/jsz")
        return str((body.get("meta_cluster") or {}).get("leader") or "")

    def tail(self, lines: int = 30) -> str:
        """The end of this node's log, for a failure's message."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class NatsCluster:
    """``size`` nodes of one cluster, each routed to all (see the module doc).

    Args:
        root: a directory for the nodes' stores and logs (a test's tmp directory).
        size: the number of nodes.
        name: the cluster's name.
    """

    def __init__(self, root: Path, size: int = 3, name: str = "busgate") -> None:
        self.name = name
        self.root = root
        self.nodes = [NatsNode(f"n{index + 1}", root) for index in range(size)]
        self._new_ports()

    def _new_ports(self) -> None:
        ports = free_tcp_ports(3 * len(self.nodes))
        for index, node in enumerate(self.nodes):
            node.take_ports(ports[3 * index : 3 * index + 3])

    @property
    def url(self) -> str:
        """Every node: ``nats://127.0.0.1:p1,127.0.0.1:p2,...``, the bus URL of the cluster."""
        return "nats://" + ",".join(node.address for node in self.nodes)

    def urls(self, *indexes: int) -> str:
        """The bus URL of some nodes, in the order given: ``urls(1, 0)``."""
        return "nats://" + ",".join(self.nodes[index].address for index in indexes)

    def _routes(self) -> list[str]:
        return [f"nats://127.0.0.1:{node.cluster_port}" for node in self.nodes]

    def start(self, attempts: int = 3) -> NatsCluster:
        """Start every node and wait until all are healthy.

        A port chosen free can be taken by another process before a node binds it (tests run side
        by side): when a node exits for that reason, the cluster starts again, new and empty, on
        new ports (up to ``attempts`` times).
        """
        for attempt in range(1, attempts + 1):
            for node in self.nodes:
                node.start(self.name, self._routes())
            try:
                self.wait_healthy()
                return self
            except TimeoutError:
                lost = any(node.lost_a_port() for node in self.nodes)
                self.stop()
                if not lost or attempt == attempts:
                    raise
            except BaseException:
                self.stop()
                raise
            for node in self.nodes:
                shutil.rmtree(node.store, ignore_errors=True)
                node.log.rename(node.log.with_suffix(f".attempt{attempt}.log"))
            self._new_ports()
        raise AssertionError("unreachable")

    def kill(self, index: int) -> None:
        """``kill -9`` one node."""
        self.nodes[index].kill()

    def restart(self, index: int) -> None:
        """Start a killed or stopped node again (same ports and store); see :meth:`wait_healthy`."""
        node = self.nodes[index]
        if node.alive:
            raise RuntimeError(f"{node.name} is running")
        node.start(self.name, self._routes())

    def wait_healthy(self, timeout: float = START_WAIT) -> None:
        """Wait until every running node is healthy and they agree on a meta leader that runs.

        Raises:
            TimeoutError: not within ``timeout`` seconds (with the end of each node's log).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [node for node in self.nodes if node.wanted]
            if not all(node.alive for node in running):
                break  # a node exited by itself
            if running and all(node.healthy() for node in running):
                leaders = {node.meta_leader() for node in running}
                if len(leaders) == 1 and leaders <= {node.name for node in running}:
                    return
            time.sleep(0.1)
        logs = "\n".join(f"--- {node.name}\n{node.tail()}" for node in self.nodes)
        raise TimeoutError(f"the NATS cluster is not healthy within {timeout:g} s\n{logs}")

    def meta_leader(self) -> int:
        """The index of the node that is the JetStream meta leader now (-1: none known)."""
        for node in self.nodes:
            if node.alive:
                names = [other.name for other in self.nodes]
                leader = node.meta_leader()
                if leader in names:
                    return names.index(leader)
        return -1

    def stream_leader(self, stream: str) -> int:
        """The index of the node that leads ``stream`` now (-1: none known)."""
        names = [node.name for node in self.nodes]
        for node in self.nodes:
            if not node.alive:
                continue
            _, body = node.monitor("/jsz?streams=true")
            for account in body.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") == stream:
                        leader = (detail.get("cluster") or {}).get("leader")
                        if leader in names:
                            return names.index(leader)
        return -1

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()
