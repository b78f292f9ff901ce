"""The receiving side of the fan-out benchmark: N clients in one process, counting.

``python -m bench.fanout KIND URL --clients 100 --count 2000``; KIND is ``ws`` (busgate's /ws
Object System, subscribed to ``bus/bench.tick``), ``sse`` (``GET /v1/subscribe?types=bench.*``)
or ``websockets`` (the reference server in ``bench/alt/broadcast.py``, which this process
triggers itself). Prints ``{"ready": true}`` once every client is subscribed, then one JSON
line: deliveries per second from the first delivery to the last, and how many arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from bus.asyncio.loop import run


class Counter:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.done = asyncio.Event()

    def hit(self) -> None:
        self.count += 1
        now = time.perf_counter()
        if self.count == 1:
            self.first = now
        self.last = now
        if self.count == self.expected:
            self.done.set()


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


_TICKS_TEXT = ('"bus/bench.tick"', '"bench.tick"')
_TICKS_BYTES = (b'"bus/bench.tick"', b'"bench.tick"')


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


async def main(kind: str, url: str, clients: int, count: int) -> dict[str, Any]:
    counter = Counter(clients * count)
    readies = [asyncio.Event() for _ in range(clients)]
    tasks: list[asyncio.Task[None]] = []
    trigger: ClientConnection | None = None
    if kind == "sse":
        tasks = [asyncio.create_task(_sse_client(url, counter, count, r)) for r in readies]
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
    if trigger is not None:
        await trigger.send(f"go {count}")
    try:
        await asyncio.wait_for(counter.done.wait(), 120)
    except TimeoutError:
        pass
    for task in tasks:
        task.cancel()
    elapsed = max(counter.last - counter.first, 1e-9)
    return {"deliveries": counter.count, "expected": clients * count,
            "rate": (counter.count - 1) / elapsed}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.fanout")
    parser.add_argument("kind", choices=("ws", "sse", "websockets"))
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    result = run(main(args.kind, args.url, args.clients, args.count))
    print(json.dumps(result), flush=True)
    sys.exit(0)
