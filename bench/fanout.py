"""The receiving side of the fan-out benchmark: N clients in one process, counting.

``python -m bench.fanout KIND URL --clients 100 --count 2000 [--reader frames|library]``; KIND
is ``ws`` (busgate's /ws Object System, subscribed to ``bus/bench.tick``), ``sse``
(``GET /v1/subscribe?types=bench.*``) or ``websockets`` (the reference server in
``bench/alt/broadcast.py``, which this process triggers itself). Prints ``{"ready": true}`` once
every client is subscribed, then one JSON line: deliveries per second from the first delivery to
the last, how many arrived, and how busy this process was meanwhile (its CPU time over that
time: near 1.0, it set the rate).

Two readers for WebSocket clients, the same for every server:

- ``frames`` (default): a minimal RFC 6455 reader (``FrameCounter``) that finds each data frame
  in what the socket gave and tests its payload for the event's type in place, without a copy or
  a decode. About 1 us per delivery, so the servers, not this process, set the rate.
- ``library``: the websockets library's client, ``async for message in connection``, what a
  Python subscriber runs. It spends some 9 us per delivery, more than either server, so with it
  this one process sets the rate for both.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
from typing import Any, cast
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from bus.asyncio.loop import run

_TICKS_TEXT = ('"bus/bench.tick"', '"bench.tick"')
_TICKS_BYTES = (b'"bus/bench.tick"', b'"bench.tick"')


class Counter:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.cpu_first = 0.0  # this process's CPU time at the first and the last delivery
        self.cpu_last = 0.0  # (a system call: read twice, not per delivery)
        self.done = asyncio.Event()

    def hit(self, n: int = 1) -> None:
        self.count += n
        now = time.perf_counter()
        if self.count == n:
            self.first = now
            self.cpu_first = time.process_time()
        self.last = now
        if self.count == self.expected:
            self.cpu_last = time.process_time()
            self.done.set()


class FrameCounter(asyncio.Protocol):
    """One client: the opening handshake, then counts the data frames that carry a tick.

    A server's frames are unmasked (RFC 6455 5.1); control frames and anything else are passed
    over. Each chunk's ticks are counted at once (one clock reading per chunk).
    """

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.replied: asyncio.Future[None] | None = None  # set while awaiting a subscribe reply

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.opened, self.replied):
            if future is not None and not future.done():
                future.set_exception(ConnectionError("the server closed the connection"))

    def send_text(self, text: str) -> None:
        """One masked text frame (a client must mask, RFC 6455 5.3)."""
        assert self.transport is not None
        payload = text.encode()
        assert len(payload) < 126
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.transport.write(bytes((0x81, 0x80 | len(payload))) + mask + masked)

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        if not self.opened.done():
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            if not buf.startswith(b"HTTP/1.1 101"):
                self.opened.set_exception(ConnectionError(bytes(buf[:head_end]).decode()))
                return
            del buf[: head_end + 4]
            self.opened.set_result(None)
        pos, end, seen, find = 0, len(buf), 0, buf.find
        while end - pos >= 2:
            length = buf[pos + 1] & 0x7F
            start = pos + 2
            if length == 126:
                if end - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                start = pos + 4
            elif length == 127:
                if end - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                start = pos + 10
            stop = start + length
            if stop > end:
                break
            if buf[pos] & 0x0F in (1, 2):  # a text or binary frame
                if (
                    find(_TICKS_BYTES[0], start, stop) >= 0
                    or find(_TICKS_BYTES[1], start, stop) >= 0
                ):
                    seen += 1
                elif (
                    self.replied is not None and find(b"routing/subscribe/reply", start, stop) >= 0
                ):
                    self.replied.set_result(None)
                    self.replied = None
            pos = stop
        del buf[:pos]
        if seen:
            self.counter.hit(seen)


async def _frames_client(kind: str, url: str, counter: Counter) -> FrameCounter:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(
        lambda: FrameCounter(counter), parts.hostname, parts.port
    )
    assert client.transport is not None
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    client.transport.write(head.encode())
    await client.opened
    if kind == "ws":
        client.replied = loop.create_future()
        replied = client.replied
        client.send_text(
            json.dumps({"event": "routing/subscribe", "subscriptions": ["bus/bench.*"]})
        )
        await replied
    return client


async def _ws_client(url: str, counter: Counter, ready: asyncio.Event) -> ClientConnection:
    conn = await ws_connect(url, max_queue=None)
    subscribe = {"event": "routing/subscribe", "subscriptions": ["bus/bench.*"]}
    await conn.send(json.dumps(subscribe))
    while True:  # until the subscribe reply
        reply = json.loads(await conn.recv())
        if reply.get("event") == "routing/subscribe/reply":
            break
    ready.set()
    return conn


async def _read_ws(conn: ClientConnection, counter: Counter, count: int) -> None:
    seen = 0
    async for message in conn:
        # One substring test on what the library gives, text (websockets' broadcast) or bytes
        # (an Object System object): the same work for every server, nothing decoded.
        ticks = _TICKS_BYTES if isinstance(message, bytes) else _TICKS_TEXT
        if ticks[0] in message or ticks[1] in message:
            seen += 1
            counter.hit()
            if seen == count:
                return


async def _sse_client(url: str, counter: Counter, count: int, ready: asyncio.Event) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(
        f"GET /v1/subscribe?types=bench.* HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    ready.set()
    seen = 0
    buffer = b""
    while seen < count:
        chunk = await reader.read(65536)
        if not chunk:
            return
        buffer += chunk
        events = buffer.split(b"\n\n")
        buffer = events.pop()
        for event in events:
            if b"bench.tick" in event:
                seen += 1
                counter.hit()
    writer.close()


async def main(kind: str, url: str, clients: int, count: int, reader: str) -> dict[str, Any]:
    counter = Counter(clients * count)
    readies = [asyncio.Event() for _ in range(clients)]
    tasks: list[asyncio.Task[None]] = []
    trigger: ClientConnection | FrameCounter | None = None
    if kind == "sse":
        tasks = [asyncio.create_task(_sse_client(url, counter, count, r)) for r in readies]
    elif reader == "frames":
        for ready in readies:
            await _frames_client(kind, url, counter)
            ready.set()
        if kind == "websockets":
            trigger = await _frames_client(kind, url, counter)
    else:
        conns = []
        for ready in readies:
            if kind == "ws":
                conns.append(await _ws_client(url, counter, ready))
            else:
                conns.append(await ws_connect(url, max_queue=None))
                ready.set()
        tasks = [asyncio.create_task(_read_ws(c, counter, count)) for c in conns]
        if kind == "websockets":
            trigger = await ws_connect(url)
    for ready in readies:
        await ready.wait()
    await asyncio.sleep(0.5)  # the last subscription reaches the bus
    print(json.dumps({"ready": True}), flush=True)
    if isinstance(trigger, FrameCounter):
        trigger.send_text(f"go {count}")
    elif trigger is not None:
        await trigger.send(f"go {count}")
    try:
        await asyncio.wait_for(counter.done.wait(), 120)
    except TimeoutError:
        pass
    for task in tasks:
        task.cancel()
    if not counter.done.is_set():
        counter.cpu_last = time.process_time()
    elapsed = max(counter.last - counter.first, 1e-9)
    return {"deliveries": counter.count, "expected": clients * count,
            "rate": (counter.count - 1) / elapsed,
            "busy": (counter.cpu_last - counter.cpu_first) / elapsed}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.fanout")
    parser.add_argument("kind", choices=("ws", "sse", "websockets"))
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--reader", choices=("frames", "library"), default="frames")
    args = parser.parse_args()
    result = run(main(args.kind, args.url, args.clients, args.count, args.reader))
    print(json.dumps(result), flush=True)
    sys.exit(0)
