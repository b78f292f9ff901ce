"""The bus over NATS next to the embedded broker: request/reply and publish->subscribe.

Same run, same code on both sides: a responder and a requester (:mod:`bus.client`, one asyncio
loop in this process) exchange a small request and its ACK, sequentially and with 64 in flight,
and a publisher streams events to a subscriber; once through a ``nats-server`` process
(``nats://``, ``bus/transport_nats.py``) and once through a ``busgate broker`` process
(``bus://``). The ratio is NATS / broker.

Reference for the NATS column: the same exchanges with bare ``nats-py`` (its own
request/reply, raw bytes, no data frames), which says what our client layer costs on NATS.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Final

import nats
from nats.aio.msg import Msg

from bus.client import Client, connect

__all__ = ["main"]

SECONDS: Final = 2.0  # per measurement
IN_FLIGHT: Final = 64
PUBLISHED: Final = 20_000
NATS_SERVER: Final = shutil.which("nats-server") or "/usr/sbin/nats-server"
_PAYLOAD: Final = {"n": 1, "text": "hello"}

Figures = dict[str, float]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_nats() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"nats://127.0.0.1:{port}"
        time.sleep(0.02)
    process.kill()
    raise RuntimeError("nats-server did not start")


def _start_broker() -> tuple[subprocess.Popen[bytes], str]:
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["broker", "--port", "0", "--open", "--log-level", "WARNING"]
    command += ["--max-queue-bytes", str(64 * 1024 * 1024)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    process.stdout.close()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"the broker did not start: {line!r}")
    return process, f"bus://127.0.0.1:{line.rsplit(':', 1)[1].strip()}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=10)


async def _rate(step: Callable[[], Awaitable[None]], count: int) -> float:
    """Operations per second: ``step`` does ``count`` operations; run it for ~SECONDS."""
    await step()  # warm up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < SECONDS:
        await step()
        done += count
    return done / (time.perf_counter() - started)


# --- the bus client, on either transport ----------------------------------------------------------


async def _serve(client: Client) -> None:
    async for request in await client.consume("bench"):
        await client.send(request.ack({"n": request.payload.get("n")}))


async def _bus_figures(url: str) -> Figures:
    responder = await connect(url, queue_size=100_000)
    requester = await connect(url, queue_size=100_000)
    serving = asyncio.create_task(_serve(responder))
    await asyncio.sleep(0.05)
    subscription = await requester.subscribe("bench.*")

    async def sequential() -> None:
        for _ in range(100):
            await requester.request("bench", "echo", _PAYLOAD)

    async def parallel() -> None:
        calls = (requester.request("bench", "echo", _PAYLOAD) for _ in range(IN_FLIGHT))
        await asyncio.gather(*calls)

    async def stream() -> None:
        for n in range(PUBLISHED):
            await responder.publish("bench.tick", {"n": n})
            if n % 1000 == 999:
                await asyncio.sleep(0)
        for _ in range(PUBLISHED):
            await subscription.get(30.0)

    figures = {
        "sequential": await _rate(sequential, 100),
        "parallel": await _rate(parallel, IN_FLIGHT),
        "pubsub": await _rate(stream, PUBLISHED),
    }
    if subscription.dropped:
        raise RuntimeError(f"the subscriber dropped {subscription.dropped} events")
    serving.cancel()
    await requester.close()
    await responder.close()
    return figures


# --- the reference: bare nats-py ------------------------------------------------------------------


async def _bare_figures(url: str) -> Figures:
    responder = await nats.connect(url, pending_size=64 * 1024 * 1024)
    requester = await nats.connect(url, pending_size=64 * 1024 * 1024)
    body = b"\x03n\x05\x01" + b"hello" * 4  # a small payload of about our request's size

    async def answer(msg: Msg) -> None:
        await responder.publish(msg.reply, msg.data)

    await responder.subscribe("bare.bench", "bench", cb=answer)
    received = 0
    done = asyncio.Event()

    async def tick(_: Msg) -> None:
        nonlocal received
        received += 1
        if received == PUBLISHED:
            done.set()

    await requester.subscribe("bare.tick.*", cb=tick)
    await requester.flush()
    await responder.flush()

    async def sequential() -> None:
        for _ in range(100):
            await requester.request("bare.bench", body, timeout=5)

    async def parallel() -> None:
        calls = (requester.request("bare.bench", body, timeout=5) for _ in range(IN_FLIGHT))
        await asyncio.gather(*calls)

    async def stream() -> None:
        nonlocal received
        received = 0
        done.clear()
        for n in range(PUBLISHED):
            await responder.publish("bare.tick.x", body)
            if n % 1000 == 999:
                await asyncio.sleep(0)
        await asyncio.wait_for(done.wait(), 30)

    figures = {
        "sequential": await _rate(sequential, 100),
        "parallel": await _rate(parallel, IN_FLIGHT),
        "pubsub": await _rate(stream, PUBLISHED),
    }
    await requester.close()
    await responder.close()
    return figures


async def _measure() -> tuple[Figures, Figures, Figures]:
    nats_process, nats_url = _start_nats()
    broker_process, broker_url = _start_broker()
    try:
        on_nats = await _bus_figures(nats_url)
        on_broker = await _bus_figures(broker_url)
        bare = await _bare_figures(nats_url)
    finally:
        _stop(nats_process)
        _stop(broker_process)
    return on_nats, on_broker, bare


def main() -> None:
    """Measure and print the table."""
    on_nats, on_broker, bare = asyncio.run(_measure())
    rows = [
        ("request/reply, sequential (round trips/s)", "sequential"),
        (f"request/reply, {IN_FLIGHT} in flight (round trips/s)", "parallel"),
        ("publish -> subscribe (messages/s)", "pubsub"),
    ]
    header = f"{'pattern':46} {'NATS':>9} {'broker':>9} {'ratio':>6} {'nats-py':>9}"
    print(header)
    for label, key in rows:
        ratio = on_nats[key] / on_broker[key]
        print(
            f"{label:46} {on_nats[key]:9,.0f} {on_broker[key]:9,.0f} {ratio:6.2f} {bare[key]:9,.0f}"
        )
    print("(NATS and broker: bus.client over nats-server / busgate broker, ratio NATS/broker;")
    print(" nats-py: bare nats-py over the same nats-server, reference for the NATS column)")


if __name__ == "__main__":
    main()
