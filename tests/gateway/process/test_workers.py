"""``busgate gateway --workers N`` and ``busgate run --workers N`` (gateway/process/workers.py):
real
processes on one port, each with its own bus link, stopped and restarted as users expect."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import BrokerProcess
from tests.gateway.conftest import free_port
from tests.gateway.process.test_cli import wait_for

BUSGATE = str(Path(sys.executable).with_name("busgate"))
ECHO = {"CMD": "echo", "x": 1}
ECHOED = {"x": 1}  # the demo's echo answers the arguments


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(line) for line in out.stdout.split()]


def _wait_all_ready(url: str, count: int, timeout: float = 60.0) -> None:
    """Until ``/readyz`` (any worker's) says every worker is linked to the bus."""
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(f"{url}/readyz", timeout=5)
        if response.status_code == 200:
            workers = response.json()["workers"]
            assert workers["count"] == count, workers
            if workers["ready"] == count:
                return
        assert time.monotonic() < deadline, f"not every worker is ready: {response.text}"
        time.sleep(0.1)


def _each_worker_answers(url: str, workers: list[int], timeout: float = 90.0) -> None:
    """Echo requests on new connections, eight held open at a time, until every worker has
    answered one: the kernel hands a connection to one worker, found as the process holding
    its server end."""
    port = int(url.rsplit(":", 1)[1])
    answered: set[int] = set()
    deadline = time.monotonic() + timeout
    while answered != set(workers):
        assert time.monotonic() < deadline, f"no answer from {set(workers) - answered}"
        connections: list[http.client.HTTPConnection] = []
        try:
            for _ in range(8):
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                connections.append(connection)
                headers = {"Content-Type": "application/json"}
                connection.request("POST", "/v1/request/demo", json.dumps(ECHO), headers)
                response = connection.getresponse()
                answer = response.read()
                assert response.status == 200, answer
                assert json.loads(answer)["payload"] == ECHOED, answer
            # still open (the answers were read, not the ends): whose are they?
            peers = {c.sock.getsockname()[1] for c in connections if c.sock is not None}
            assert len(peers) == len(connections)
            for pid in set(workers) - answered:
                held = psutil.Process(pid).net_connections("tcp")
                if any(c.laddr.port == port and c.raddr and c.raddr.port in peers for c in held):
                    answered.add(pid)
        finally:
            for connection in connections:
                connection.close()


@pytest.fixture
def open_broker() -> Iterator[BrokerProcess]:
    broker = BrokerProcess("--open")
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def demo(open_broker: BrokerProcess) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [BUSGATE, "demo", "--bus", open_broker.url, "--wait", "30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield process
    process.terminate()
    process.wait(20)


def _two_workers(bus: str, port: int) -> subprocess.Popen[str]:
    """``busgate gateway --workers 2``; use it in ``with``, so its pipe is closed on the way
    out even when an assertion fails."""
    return subprocess.Popen(
        [BUSGATE, "gateway", "--bus", bus, "--port", str(port), "--workers", "2",
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _started(gateway: subprocess.Popen[str], url: str) -> list[int]:
    """Wait until the gateway answers; its two workers' process ids."""
    wait_for(f"{url}/healthz", timeout=60)  # 20 s was short for two spawned workers at load 12
    workers = _gateway_children(gateway.pid)
    assert len(workers) == 2
    return workers


@pytest.mark.timeout(300)  # two workers started, one replaced: minutes at load 16
def test_two_workers_serve_one_port_each_with_its_own_bus_link(
    open_broker: BrokerProcess, demo: subprocess.Popen[bytes]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with _two_workers(open_broker.url, port) as gateway:
        try:
            workers = _started(gateway, url)
            _wait_all_ready(url, 2)
            # The parent sleeps until a worker exits or a signal comes: it polled five times
            # a second, the CPU of an idle gateway with nothing to do.
            woke = _switches(gateway.pid)
            time.sleep(1.5)
            assert _switches(gateway.pid) - woke <= 2
            _each_worker_answers(url, workers)
            # A worker that dies is replaced, and the port keeps answering meanwhile.
            victim = workers[0]
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while victim in _children(gateway.pid) or len(_gateway_children(gateway.pid)) < 2:
                assert time.monotonic() < deadline, "the dead worker was not replaced"
                time.sleep(0.2)
            _wait_all_ready(url, 2)  # the new worker's flag: cleared for it, set once it is up
            _each_worker_answers(url, _gateway_children(gateway.pid))  # the new one too
            gateway.send_signal(signal.SIGTERM)
            output, _ = gateway.communicate(timeout=60)
        finally:
            _stop(gateway)
    assert gateway.returncode == 0
    assert "2 workers on 127.0.0.1" in output
    assert f"gateway worker {victim} exited" in output
    assert "Traceback" not in output
    assert not [pid for pid in workers[1:] if _alive(pid)]  # none left behind


def test_workers_whose_parent_is_killed_outright_drain_and_exit(
    open_broker: BrokerProcess,
) -> None:
    # SIGKILL leaves the parent no time to stop its workers; they served on as orphans,
    # holding the port and their bus links (a failed test's workers were found 45 min later).
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    workers: list[int] = []
    with _two_workers(open_broker.url, port) as gateway:
        try:
            workers = _started(gateway, url)
            gateway.kill()
            # the workers share the parent's output pipe: it ends when the last one exits
            output, _ = gateway.communicate(timeout=60)
        finally:
            _stop(gateway)
            for pid in workers:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert not [pid for pid in workers if _alive(pid)]
    assert output.count("its supervisor") == 2 and "is gone" in output
    assert "Traceback" not in output
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=5)


def _switches(pid: int) -> int:
    """How many times the process has gone to sleep (its voluntary context switches)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no context switches of {pid}")


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM first, so that the parent stops its workers: a parent killed outright (SIGKILL)
    leaves them serving on, orphans holding the port and their bus links after the test."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _is_gateway(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"spawn_main" in cmdline  # a spawned worker (not the resource tracker)


def _gateway_children(pid: int) -> list[int]:
    return [child for child in _children(pid) if _is_gateway(child)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("zombie") < 0


@pytest.mark.parametrize("count", ["0", "65"])
def test_a_worker_count_out_of_range_is_refused(count: str) -> None:
    result = subprocess.run(
        [BUSGATE, "gateway", "--port", str(free_port()), "--workers", count],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "workers must be 1..64" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(300)  # the whole stack with two workers: minutes at load 16
def test_busgate_run_with_two_workers_answers_and_stops() -> None:
    port, bus_port, objects_port = free_port(), free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    with subprocess.Popen(  # its pipe closed on the way out, even when an assertion fails
        [BUSGATE, "run", "--port", str(port), "--bus-port", str(bus_port),
         "--objects-port", str(objects_port), "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as run:  # fmt: skip
        try:
            wait_for(f"{url}/healthz", timeout=60)
            _wait_all_ready(url, 2)  # both workers linked to the run's broker
            workers = _gateway_children(run.pid)
            assert len(workers) == 2
            deadline = time.monotonic() + 30
            while True:  # the demo service may still be starting
                response = httpx.post(f"{url}/v1/request/demo", json=ECHO, timeout=10)
                if response.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert response.status_code == 200 and response.json()["payload"] == ECHOED
            _each_worker_answers(url, workers)
            run.send_signal(signal.SIGINT)
            output, _ = run.communicate(timeout=60)
        finally:
            _stop(run)
    assert run.returncode == 0, output
    assert "Traceback" not in output
