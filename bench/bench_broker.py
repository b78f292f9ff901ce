"""Broker throughput: request/reply round trips and publish->subscribe, next to a bare echo.

Through the broker: the broker runs as its own process (``busgate broker``); a requester and a
responder (both :mod:`bus.client`, one asyncio loop in this process) exchange a small request
and its ACK, sequentially and with 64 in flight; a publisher streams events to a subscriber.

Reference, same run: a bare asyncio echo server in its own process, driven by the same client
pattern (encode the message, frame it, write, decode the frames that come back, resolve a future
by MID). A round trip through the broker is two hops plus a responder, so the ratio
(broker / echo) says what routing, authentication-free forwarding and the responder cost over
the loopback and codec work that any design would pay.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Final

from bus import wire
from bus.client import Client, connect
from bus.message import Message, decode_message, encode_message

__all__ = ["main"]

SECONDS: Final = 2.0  # per measurement
IN_FLIGHT: Final = 64
PUBLISHED: Final = 20_000
_SECRET: Final = "bench-secret"

_ECHO_SERVER = """
import asyncio, sys
class Echo(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(data)
async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print("listening on 127.0.0.1:%d" % server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def _spawn(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return process, int(line.rsplit(":", 1)[1])


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()


def _request() -> Message:
    return Message.request("bench", "echo", {"n": 1, "text": "hello"}, reply_to="_INBOX.bench")


# --- the reference: a bare echo over the same client pattern -------------------------------------


class _EchoClient(asyncio.Protocol):
    """Writes framed messages; every message that comes back resolves the future of its MID."""

    def __init__(self) -> None:
        self.decoder = wire.WireDecoder()
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[str, asyncio.Future[Message]] = {}
        self.received = 0
        self.done = asyncio.Event()
        self.expect = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.decoder.receive_data(data)
        for event in self.decoder.events():
            if isinstance(event, wire.MessageReceived):
                message = decode_message(event.data)
                self.received += 1
                future = self.waiting.pop(message.mid or "", None)
                if future is not None:
                    future.set_result(message)
                if self.received >= self.expect > 0:
                    self.done.set()

    def send(self, message: Message) -> None:
        assert self.transport is not None
        self.transport.write(wire.encode_message(encode_message(message)))

    async def request(self, message: Message) -> Message:
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self.waiting[message.mid or ""] = future
        self.send(message)
        return await future


async def _rate(step: Callable[[], Awaitable[None]], count: int) -> float:
    """Operations per second: ``step`` does ``count`` operations; run it for ~SECONDS."""
    await step()  # warm up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < SECONDS:
        await step()
        done += count
    return done / (time.perf_counter() - started)


async def _echo_figures(port: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    _, echo = await loop.create_connection(_EchoClient, "127.0.0.1", port)

    async def sequential() -> None:
        for _ in range(100):
            await echo.request(_request())

    async def parallel() -> None:
        await asyncio.gather(*(echo.request(_request()) for _ in range(IN_FLIGHT)))

    async def stream() -> None:
        echo.received, echo.expect = 0, PUBLISHED
        echo.done.clear()
        for n in range(PUBLISHED):
            echo.send(Message.event("bench.tick", {"n": n}))
            if n % 1000 == 999:
                await asyncio.sleep(0)
        await echo.done.wait()
        echo.expect = 0

    figures = {
        "sequential": await _rate(sequential, 100),
        "parallel": await _rate(parallel, IN_FLIGHT),
        "pubsub": await _rate(stream, PUBLISHED),
    }
    assert echo.transport is not None
    echo.transport.close()
    return figures


# --- through the broker ---------------------------------------------------------------------------


async def _serve(client: Client) -> None:
    consumer = await client.consume("bench")
    async for request in consumer:
        await client.send(request.ack({"n": request.payload.get("n")}))


async def _broker_figures(port: int) -> dict[str, float]:
    url = f"bus://127.0.0.1:{port}"
    responder = await connect(url, "svc", _SECRET, queue_size=100_000)
    requester = await connect(url, "req", _SECRET, queue_size=100_000)
    serving = asyncio.create_task(_serve(responder))
    await asyncio.sleep(0.05)
    subscription = await requester.subscribe("bench.*")

    async def sequential() -> None:
        for _ in range(100):
            await requester.request("bench", "echo", {"n": 1, "text": "hello"})

    async def parallel() -> None:
        await asyncio.gather(
            *(
                requester.request("bench", "echo", {"n": 1, "text": "hello"})
                for _ in range(IN_FLIGHT)
            )
        )

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


async def _measure() -> tuple[dict[str, float], dict[str, float]]:
    echo_process, echo_port = _spawn(["-c", _ECHO_SERVER])
    broker_process, broker_port = _spawn(
        [
            "-c",
            "import sys; from bus.cli import main; sys.exit(main())",
            "broker",
            "--port",
            "0",
            "--log-level",
            "WARNING",
            "--office",
            f"svc:{_SECRET}",
            "--office",
            f"req:{_SECRET}",
            "--max-queue-bytes",
            str(64 * 1024 * 1024),
        ]
    )
    try:
        echo = await _echo_figures(echo_port)
        broker = await _broker_figures(broker_port)
    finally:
        _stop(echo_process)
        _stop(broker_process)
    return broker, echo


def main() -> None:
    """Measure and print the table."""
    broker, echo = asyncio.run(_measure())
    rows = [
        ("request/reply, sequential (round trips/s)", "sequential"),
        (f"request/reply, {IN_FLIGHT} in flight (round trips/s)", "parallel"),
        ("publish -> subscribe (messages/s)", "pubsub"),
    ]
    print(f"{'pattern':46} {'broker':>10} {'bare echo':>10} {'ratio':>7}")
    for label, key in rows:
        ratio = broker[key] / echo[key]
        print(f"{label:46} {broker[key]:10,.0f} {echo[key]:10,.0f} {ratio:7.2f}")
    print("(broker: 2 hops + a responder, both clients in this process; echo: 1 hop, reference)")


if __name__ == "__main__":
    main()
