"""The processes of ``bench_realtime``: each role runs in a process of its own and prints one
JSON line with its figures.

- ``publish URL --count N --types a,b``: publishes N events over the bus (types in turn), flushes;
- ``history GATEWAY PATTERN``: pages through ``GET /v1/history/PATTERN?since=...&limit=1000``
  with one kept-alive connection until the end, counting events;
- ``receiver PORT --expect N``: an HTTP endpoint (asyncio + h11) answering every POST 204; prints
  when it has taken N: the first and last arrival times;
- ``poster URL --count N``: the plain loop a user would write instead of a push subscription:
  one kept-alive ``http.client`` connection, the same event bodies POSTed one after another.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import resource
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import h11

__all__ = ["main"]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def event_body(i: int, type_: str) -> bytes:
    """A pushed event's body, as the gateway posts one (the plain loop sends the same)."""
    return json.dumps({"seq": i + 1, "type": type_, "header": {"TYP": "EVT", "GRP": type_},
                       "payload": {"i": i, "c": 18.5}}).encode()  # fmt: skip


async def _publish(url: str, count: int, types: list[str]) -> dict[str, Any]:
    from bus.asyncio.client import connect  # noqa: PLC0415

    client = await connect(url)
    started = time.time()
    for i in range(count):
        await client.publish(types[i % len(types)], {"i": i, "c": 18.5})
    await client.flush()
    await client.close()
    return {"started_at": started, "finished_at": time.time()}


def _history(base: str, pattern: str) -> dict[str, Any]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)
    since, events, pages = 0, 0, 0
    started, cpu = time.perf_counter(), _cpu()
    while True:
        conn.request("GET", f"/v1/history/{pattern}?since={since}&limit=1000")
        page = json.loads(conn.getresponse().read())
        pages += 1
        events += len(page["events"])
        if not page["more"]:
            break
        since = page["next"]["since"]
    elapsed = time.perf_counter() - started
    return {"events": events, "pages": pages, "seconds": elapsed, "cpu": _cpu() - cpu}


async def _receiver(port: int, expect: int) -> None:
    arrivals: list[float] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data:
                    break
                continue
            if isinstance(event, h11.EndOfMessage):
                arrivals.append(time.time())
                reply = conn.send(h11.Response(status_code=204, headers=[]))
                writer.write((reply or b"") + (conn.send(h11.EndOfMessage()) or b""))
                if len(arrivals) == expect:
                    print(json.dumps({"first_at": arrivals[0], "last_at": arrivals[-1]}),
                          flush=True)  # fmt: skip
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                break
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    print(json.dumps({"ready": True}), flush=True)
    async with server:
        await server.serve_forever()


def _poster(url: str, count: int, type_: str) -> dict[str, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)
    started, cpu = time.time(), _cpu()
    for i in range(count):
        body = event_body(i, type_)
        conn.request("POST", parts.path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        if not 200 <= response.status < 300:
            raise RuntimeError(f"HTTP {response.status}")
    return {"started_at": started, "finished_at": time.time(), "cpu": _cpu() - cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.realtime")
    parser.add_argument("role", choices=("publish", "history", "receiver", "poster"))
    parser.add_argument("target")
    parser.add_argument("pattern", nargs="?", default="")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--expect", type=int, default=1000)
    parser.add_argument("--types", default="bench.a")
    args = parser.parse_args(argv)
    if args.role == "publish":
        out = asyncio.run(_publish(args.target, args.count, args.types.split(",")))
    elif args.role == "history":
        out = _history(args.target, args.pattern)
    elif args.role == "receiver":
        asyncio.run(_receiver(int(args.target), args.expect))
        return 0
    else:
        out = _poster(args.target, args.count, args.types.split(",")[0])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
