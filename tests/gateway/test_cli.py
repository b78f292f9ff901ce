"""``busgate gateway`` as users run it: the installed command, a real process, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.gateway.conftest import free_port

BUSGATE = str(Path(sys.executable).with_name("busgate"))


def wait_for(url: str, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=2.0)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_gateway_command_serves_and_stops_on_sigterm() -> None:
    port = free_port()
    bus_port = free_port()  # nothing listens there: the gateway runs, not ready
    process = subprocess.Popen(
        [BUSGATE, "gateway", "--bus", f"bus://127.0.0.1:{bus_port}", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert wait_for(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz")
        assert ready.status_code == 503
        assert f"127.0.0.1:{bus_port}" in ready.json()["error"]["message"]
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0
    assert "AUTHENTICATION IS OFF" in output


def test_public_host_without_keys_is_refused_with_exit_2() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGATE_")}
    result = subprocess.run(
        [BUSGATE, "gateway", "--host", "0.0.0.0", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert result.returncode == 2
    assert "without authentication" in result.stderr
