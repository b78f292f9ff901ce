"""Requests per second and latency through the gateway, next to a bare Starlette endpoint.

What runs (all on loopback, each in its own process, in the same run):

- the broker and the demo service (``busgate broker --open``, ``busgate demo``);
- the gateway (``busgate gateway --log-level warning``): ``POST /v1/request/demo`` with
  ``{"CMD": "echo", "x": 1}`` goes HTTP -> RQS (ENC=JSON) -> demo -> ACK -> HTTP;
- the reference: a bare Starlette app answering the same body with a JSON echo, under the same
  uvicorn settings (:func:`gateway.cli.uvicorn_config`). It is the ceiling: HTTP parsing and
  JSON without the bus.

Each row pair also says how much CPU each process spent per request (user + system, from
psutil), which shows where the time of a request through the bus goes. A last line isolates
the gateway's own layer (routing, checks, JSON mapping, metrics, response): the app called
in process with its bus answer replaced by a prepared ACK, next to the bare app called the
same way.

The load generator is a bounded asyncio one: ``concurrency`` keep-alive HTTP/1.1 connections,
each sending its next request when the previous answer is read, for ``seconds`` after a short
warm-up. Everything shares the machine's cores, so the figures are for comparison, not capacity.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = ["main"]

BODY = b'{"CMD":"echo","x":1}'
SECONDS = 4.0
WARMUP = 0.5
CONCURRENCY = (1, 16)
LAYER_REQUESTS = 5000
BUSGATE = str(Path(sys.executable).with_name("busgate"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Result:
    """One measured run."""

    name: str
    concurrency: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status


async def _worker(port: int, path: str, stop_at: float, warm_until: float, out: list[float]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    errors = 0
    try:
        while (now := time.perf_counter()) < stop_at:
            writer.write(request)
            status = await _read_response(reader)
            took = time.perf_counter() - now
            if status != 200:
                errors += 1
            elif now >= warm_until:
                out.append(took)
    finally:
        writer.close()
    return errors


async def _load(name: str, port: int, path: str, concurrency: int) -> Result:
    latencies: list[float] = []
    start = time.perf_counter()
    warm_until = start + WARMUP
    stop_at = warm_until + SECONDS
    workers = [_worker(port, path, stop_at, warm_until, latencies) for _ in range(concurrency)]
    errors = sum(await asyncio.wait_for(asyncio.gather(*workers), SECONDS + 30))
    if errors:
        raise RuntimeError(f"{name}: {errors} answers were not 200")
    latencies.sort()
    return Result(
        name,
        concurrency,
        len(latencies),
        SECONDS,
        latencies[len(latencies) // 2] * 1000,
        latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    )


def _wait_http(port: int, path: str, timeout: float = 20.0) -> None:
    import httpx  # noqa: PLC0415  (only the benchmark needs it at import)

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing ready on port {port}{path}")
        time.sleep(0.1)


def _wait_echo(port: int, timeout: float = 20.0) -> None:
    import httpx  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = httpx.post(f"http://127.0.0.1:{port}/v1/request/demo", content=BODY)
        if response.status_code == 200:
            return
        time.sleep(0.2)
    raise RuntimeError("the demo service does not answer through the gateway")


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in reversed(processes):
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def serve_bare(port: int) -> None:
    """Run the reference app (a bare Starlette JSON echo) under the gateway's uvicorn settings."""
    import uvicorn  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import JSONResponse  # noqa: PLC0415

    from gateway.cli import uvicorn_config  # noqa: PLC0415
    from gateway.settings import GatewaySettings  # noqa: PLC0415

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = _bare_app()
    app.add_route("/healthz", health)
    settings = GatewaySettings(port=port, web_dir="")
    uvicorn.Server(uvicorn_config(app, settings, "warning")).run()


def _bare_app() -> Any:
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import JSONResponse  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    async def echo(request: Request) -> JSONResponse:
        payload = await request.json()
        payload.pop("CMD", None)
        return JSONResponse({"header": {"TYP": "ACK"}, "payload": payload})

    return Starlette(routes=[Route("/echo", echo, methods=["POST"])])


def _layer_app() -> Any:
    """The gateway app whose bus answers at once with a prepared ACK (no bus, no sockets)."""
    from bus.enums import Encoding  # noqa: PLC0415
    from bus.message import Message  # noqa: PLC0415
    from gateway.app import create_app  # noqa: PLC0415
    from gateway.settings import GatewaySettings  # noqa: PLC0415

    request = Message.request("demo", "echo", {"x": 1}, reply_to="_INBOX.b", enc=Encoding.JSON)
    ack = request.ack({"x": 1})

    async def answer(group: str, payload: Any, timeout: float) -> Message:
        return ack

    app = create_app(GatewaySettings(web_dir=""))
    app.state.gateway.bridge.request = answer
    return app


async def _asgi_cpu_us(app: Any, path: str, count: int) -> float:
    """CPU microseconds per request of ``app`` called directly (best of 3 rounds)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(BODY)).encode())],
    }  # fmt: skip
    request = {"type": "http.request", "body": BODY, "more_body": False}

    async def receive() -> dict[str, Any]:
        return request

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise RuntimeError(f"{path}: status {message['status']}")

    best = float("inf")
    for round_ in range(4):  # the first round warms up
        started = time.process_time()
        for _ in range(count):
            await app(dict(scope), receive, send)
        if round_:
            best = min(best, (time.process_time() - started) / count * 1e6)
    return best


def layer() -> tuple[float, float]:
    """CPU per request of the gateway's own layer and of the bare app, in process."""

    async def run() -> tuple[float, float]:
        return (
            await _asgi_cpu_us(_layer_app(), "/v1/request/demo", LAYER_REQUESTS),
            await _asgi_cpu_us(_bare_app(), "/echo", LAYER_REQUESTS),
        )

    return asyncio.run(run())


def _cpu(process: subprocess.Popen[bytes]) -> float:
    times = psutil.Process(process.pid).cpu_times()
    return float(times.user + times.system)


def _measure(
    name: str, port: int, path: str, concurrency: int, roles: dict[str, subprocess.Popen[bytes]]
) -> tuple[Result, dict[str, float]]:
    """Run the load and return it with each process's CPU microseconds per request."""
    before = {role: _cpu(process) for role, process in roles.items()}
    result = asyncio.run(_load(name, port, path, concurrency))
    total = result.requests * (SECONDS + WARMUP) / SECONDS  # warm-up requests cost CPU too
    cpu = {role: (_cpu(p) - before[role]) / total * 1e6 for role, p in roles.items()}
    return result, cpu


def main() -> None:
    """Start the processes, measure both targets at each concurrency, print the table."""
    bus_port, gateway_port, bare_port = _free_port(), _free_port(), _free_port()
    bus = f"bus://127.0.0.1:{bus_port}"
    gateway_args = ["--bus", bus, "--port", str(gateway_port), "--web-dir", ""]
    roles = {"broker": _spawn(BUSGATE, "broker", "--open", "--port", str(bus_port))}
    try:
        time.sleep(0.5)
        roles["demo"] = _spawn(BUSGATE, "demo", "--bus", bus)
        roles["gateway"] = _spawn(BUSGATE, "gateway", *gateway_args, "--log-level", "warning")
        roles["bare"] = _spawn(
            sys.executable, "-m", "bench.bench_gateway", "--bare", str(bare_port)
        )
        _wait_http(bare_port, "/healthz")
        _wait_http(gateway_port, "/readyz")
        _wait_echo(gateway_port)
        results = []
        through_roles = {role: roles[role] for role in ("gateway", "broker", "demo")}
        for concurrency in CONCURRENCY:
            bare, bare_cpu = _measure(
                "bare starlette JSON", bare_port, "/echo", concurrency, {"bare": roles["bare"]}
            )
            through, cpu = _measure(
                "gateway -> demo echo", gateway_port, "/v1/request/demo", concurrency, through_roles
            )
            results.append((bare, through, {**bare_cpu, **cpu}))
    finally:
        _stop(list(roles.values()))
    _print(results)
    own, bare_us = layer()
    print(
        f"In process, no sockets, the bus answer prepared ({LAYER_REQUESTS} requests, best of 3):"
        f"\n  CPU us per request      gateway layer {own:.1f}, bare starlette {bare_us:.1f},"
        f" ratio {own / bare_us:.2f}"
    )


def _print(results: list[tuple[Result, Result, dict[str, float]]]) -> None:
    cores = os.cpu_count() or 1
    print(f"HTTP POST echo on loopback, {SECONDS:g} s per row, {cores} cores shared by all")
    print(f"{'target':<24}{'conc':>5}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for bare, through, cpu in results:
        for result in (bare, through):
            print(
                f"{result.name:<24}{result.concurrency:>5}{result.rps:>10.0f}"
                f"{result.p50_ms:>9.2f}{result.p99_ms:>9.2f}"
            )
        print(
            f"{'  gateway / bare':<24}{'':>5}{through.rps / bare.rps:>10.2f}"
            f"{through.p50_ms / bare.p50_ms:>9.2f}{through.p99_ms / bare.p99_ms:>9.2f}"
        )
        shares = ", ".join(f"{role} {us:.0f}" for role, us in cpu.items())
        print(f"{'  CPU us per request':<24}{'':>5}  {shares}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bare":
        serve_bare(int(sys.argv[2]))
    else:
        main()
