"""The Object System benchmark's clients: ``python -m bench.objects ROLE HOST PORT --count N``.

``receive``: subscribes to everything, prints ``{"ready": true}``, counts objects of type
``bench/tick`` and prints their rate (first to last). ``send``: subscribes to nothing it will
receive (``types: none``) and sends N objects (a small JSON payload each) as fast as its socket
takes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from bus.asyncio.loop import run

PAYLOAD = b'{"n":1,"text":"hello"}'
OBJECT = json.dumps({"type": "bench/tick", "size": len(PAYLOAD)}).encode() + b"\0" + PAYLOAD


async def receive(host: str, port: int, count: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b'{"event":"routing/subscribe","receive_mode":"no_echo"}\0')
    await writer.drain()
    print(json.dumps({"ready": True}), flush=True)
    seen = 0
    first = last = 0.0
    buffer = b""
    marker = b'"bench/tick"'
    while seen < count:
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        buffer += chunk
        found = buffer.count(marker)
        if found:
            if not seen:
                first = time.perf_counter()
            seen += found
            last = time.perf_counter()
            buffer = buffer[buffer.rfind(marker) + len(marker) :]
    writer.close()
    return {"received": seen, "rate": (seen - 1) / max(last - first, 1e-9)}


async def send(host: str, port: int, count: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b'{"event":"routing/subscribe","receive_mode":"none"}\0')
    started = time.perf_counter()
    batch = OBJECT * 100
    for _ in range(count // 100):
        writer.write(batch)
        await writer.drain()
    await asyncio.sleep(1.0)
    writer.close()
    return {"rate": count / (time.perf_counter() - started)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.objects")
    parser.add_argument("role", choices=("receive", "send"))
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=200_000)
    args = parser.parse_args()
    work = receive if args.role == "receive" else send
    print(json.dumps(run(work(args.host, args.port, args.count))), flush=True)
    sys.exit(0)
