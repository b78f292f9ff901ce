"""``busgate gateway`` as users run it: the installed command, a real process, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
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
    with subprocess.Popen(  # its pipe closed on the way out, even when an assertion fails
        [BUSGATE, "gateway", "--bus", f"bus://127.0.0.1:{bus_port}", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
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


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while wait_for(f"http://127.0.0.1:{port}/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the gateway never became ready"
        time.sleep(0.2)


def _open_stream(port: int) -> socket.socket:
    """An NDJSON answer that would run a minute: 600 responses, one every 0.1 s."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = b'{"CMD":"count","n":600,"interval":0.1}'
    sock.sendall(
        b"POST /v1/request/demo?timeout=60 HTTP/1.1\r\nHost: x\r\n"
        b"Accept: application/x-ndjson\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _last_json_line(data: bytes) -> dict[str, object]:
    lines = [line for line in data.split(b"\r\n") if line.startswith(b"{")]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def test_sigterm_ends_open_streams_with_a_final_line_within_the_grace() -> None:
    # Issue 12: the gateway kept its grace but then cut NDJSON streams with no final line and
    # logged an ERROR traceback. Now a stream still open near the grace's end gets a final error
    # line, a plain request waiting on the bus a 503, and the log stays clean.
    port, bus_port = free_port(), free_port()
    env = {**os.environ, "BUSGATE_GATEWAY_SHUTDOWN_GRACE": "3"}
    run = subprocess.Popen(
        [BUSGATE, "run", "--no-gateway", "--bus-port", str(bus_port), "--objects-port", "0",
         "--mop-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    gateway = subprocess.Popen(
        [BUSGATE, "gateway", "--bus", f"bus://127.0.0.1:{bus_port}", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        _wait_ready(port)
        with (  # closed on the way out, even when an assertion fails
            _open_stream(port) as stream,
            socket.create_connection(("127.0.0.1", port), timeout=30) as waiting,
        ):
            assert stream.recv(65536).startswith(b"HTTP/1.1 200")
            body = b'{"CMD":"sleep","seconds":30}'
            waiting.sendall(
                b"POST /v1/request/demo?timeout=60 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            time.sleep(0.5)
            started = time.monotonic()
            gateway.send_signal(signal.SIGTERM)
            final = _last_json_line(_read_to_end(stream))
            answer = _read_to_end(waiting)
        output, _ = gateway.communicate(timeout=20)
        took = time.monotonic() - started
    finally:
        for process in (gateway, run):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate(timeout=10)
    assert gateway.returncode == 0 and took < 3 + 3, (took, output)
    assert final["final"] is True and final["event"] == "error", final
    assert "shutting down" in json.dumps(final)
    assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
    assert b"shutting down" in answer
    assert "Traceback" not in output and "ERROR" not in output, output


def test_busgate_run_stops_within_its_grace_and_at_once_on_a_second_ctrl_c() -> None:
    # Issue 12: Ctrl-C of busgate run waited for open streams without bound (a minute with
    # ?timeout=60) and a second Ctrl-C did nothing.
    for second_ctrl_c in (False, True):
        port = free_port()
        env = {**os.environ, "BUSGATE_GATEWAY_SHUTDOWN_GRACE": "4"}
        with subprocess.Popen(  # its pipe closed on the way out, even when an assertion fails
            [BUSGATE, "run", "--port", str(port), "--bus-port", "0", "--objects-port", "0",
             "--mop-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        ) as process:  # fmt: skip
            try:
                _wait_ready(port)
                with _open_stream(port) as stream:
                    assert stream.recv(65536).startswith(b"HTTP/1.1 200")
                    started = time.monotonic()
                    process.send_signal(signal.SIGINT)
                    if second_ctrl_c:
                        time.sleep(0.3)
                        process.send_signal(signal.SIGINT)
                    final = _last_json_line(_read_to_end(stream))
                output, _ = process.communicate(timeout=30)
                took = time.monotonic() - started
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
        assert process.returncode == 0, output
        assert final["final"] is True and final["event"] == "error", final
        assert "Traceback" not in output, output
        if second_ctrl_c:
            assert "stopping now" in output and took < 3, (took, output)
        else:
            assert took < 4 + 4, (took, output)
