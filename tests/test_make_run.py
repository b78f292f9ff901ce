"""``make run`` (the Makefile's ``run`` target, README's first command) on ports of our choosing.

Issue 30 item 13: ``make run`` could not move its ports (``busgate run`` on 8080, 4000, 7890 and
4001 only), so it failed where any of them was taken. Its addresses are Makefile variables, as
``busgate run``'s flags: here every port is a free one, and each is served.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.gateway.conftest import free_port

ROOT = Path(__file__).parents[1]
DEADLINE = (
    90.0  # make's stamp check, the broker, the demo service and the gateway on 2 loaded cores
)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.slow
def test_make_run_serves_on_the_ports_it_is_given(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("PORT", "BUS_PORT", "OBJECTS_PORT", "MOP_PORT")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k not in ports}
    command = ["make", "--no-print-directory", "-C", str(ROOT), "run"]
    command += [f"{name}={port}" for name, port in ports.items()]
    command.append(f"RUN_FLAGS=--journal {tmp_path / 'journal'}")  # not the user's
    log = (tmp_path / "run.log").open("w+")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not _ready(ports["PORT"]):
            assert process.poll() is None, f"make run exited {process.returncode}"
            assert time.monotonic() < deadline, "the gateway never answered on PORT"
            time.sleep(0.2)
        for name in ("BUS_PORT", "OBJECTS_PORT", "MOP_PORT"):
            assert _answers(ports[name]), f"nothing listens on {name}={ports[name]}"
        body = b'{"CMD":"echo","x":1}'
        url = f"http://127.0.0.1:{ports['PORT']}/v1/request/demo"
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=15) as reply:
            assert reply.status == 200
    finally:
        os.killpg(process.pid, signal.SIGINT)  # make and busgate run, as Ctrl-C would
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.seek(0)
        output = log.read()
        log.close()
    assert "Traceback" not in output, output
