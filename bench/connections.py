"""The subscribers of the connection benchmark: many raw sockets in one process.

``python -m bench.connections KIND HOST PORT --count N --source 127.0.0.X``; KIND is ``ws``
(busgate's ``/ws``: the upgrade, then ``routing/subscribe`` to ``bus/bench.*`` and its reply),
``sse`` (``GET /v1/subscribe?types=bench.*``: the response head) or ``nats`` (nats-server's
WebSocket listener: the upgrade, its ``INFO``, then ``CONNECT``, ``SUB bench.tick`` and ``PING``,
joined at the ``PONG``, which says the subscription is in place). Each socket is bound to the
source address before it connects (``IP_BIND_ADDRESS_NO_PORT``: the port is chosen with the whole
address pair in mind), so processes on distinct 127.0.0.x addresses go past the ephemeral-port
limit of one address.

No library: a minimal RFC 6455 reader (a server's frames are unmasked; pings are answered with
pongs, as browsers do) and a byte search for the event's token, so this process spends a few
microseconds per delivery and the servers set the pace. It runs on uvloop.

It prints JSON lines: ``{"joined": n, "errors": e, "retried": r, "times": [...]}`` once every
socket joined or failed (the wall-clock time of each join; a join refused with 503 is tried
again within its 60 s, counted in ``retried``; any other refusal is an error), then answers
the commands read on stdin: ``expect TOKEN SECONDS`` (``{"armed": n}`` as soon as every socket
looks for TOKEN, so the event is published only then; then ``{"arrivals": [...]}``: when each
socket first saw TOKEN, within SECONDS), ``status`` (``{"open": n}``: sockets still open) and
``close``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import sys
import time
from typing import Final, cast

from bus.asyncio.loop import run

_IP_BIND_ADDRESS_NO_PORT: Final = 24  # linux/in.h: the port is picked at connect()
_JOIN_TIMEOUT: Final = 60.0
_RETRY_S: Final = 0.25  # between two tries of a join refused with 503
_HEAD: Final = 0
_SUBSCRIBING: Final = 1
_OPEN: Final = 2


class Refused(ConnectionError):
    """The server answered the join with an HTTP status (503: not ready: the join is tried
    again, as a browser's ``EventSource`` or a WebSocket client's reconnection would)."""

    def __init__(self, status: bytes, head: bytes) -> None:
        super().__init__(f"HTTP {head[:80]!r}")
        self.status = status


def _mask(payload: bytes, opcode: int) -> bytes:
    """One masked client frame (RFC 6455 5.3) of at most 125 bytes."""
    assert len(payload) < 126
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, 0x80 | len(payload))) + key + masked


class Subscriber(asyncio.Protocol):
    """One subscriber socket: joins, answers keepalives, notes when a token arrives."""

    __slots__ = ("kind", "path", "transport", "buffer", "state", "joined", "token", "arrived",
                 "open")  # fmt: skip

    def __init__(self, kind: str, path: str, joined: asyncio.Future[None]) -> None:
        self.kind = kind
        self.path = path
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.state = _HEAD
        self.joined = joined
        self.token = b""
        self.arrived = 0.0
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.open = True
        if self.kind == "sse":
            head = f"GET {self.path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
        else:
            key = base64.b64encode(os.urandom(16)).decode()
            head = (
                f"GET {self.path} HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            )
        self.transport.write(head.encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if not self.joined.done():
            self.joined.set_exception(ConnectionError(f"closed while joining: {exc}"))

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        if self.state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(buf[9:12])
            wanted = b"200" if self.kind == "sse" else b"101"
            if status != wanted:
                self._fail(Refused(status, bytes(buf[:end])))
                return
            del buf[: end + 4]
            if self.kind == "sse":
                self._join()
            else:
                self.state = _SUBSCRIBING
                if self.kind == "ws":
                    text = b'{"event":"routing/subscribe","subscriptions":["bus/bench.*"]}'
                    assert self.transport is not None
                    self.transport.write(_mask(text, 1))
        if self.kind == "sse":
            self._look(bytes(buf))
            del buf[: max(0, len(buf) - 64)]  # keep a tail: a token may straddle two reads
            return
        self._frames()

    def _frames(self) -> None:
        buf, pos, end = self.buffer, 0, len(self.buffer)
        while end - pos >= 2:
            length, start = buf[pos + 1] & 0x7F, pos + 2
            if length == 126:
                if end - pos < 4:
                    break
                length, start = (buf[pos + 2] << 8) | buf[pos + 3], pos + 4
            elif length == 127:
                if end - pos < 10:
                    break
                length, start = int.from_bytes(buf[pos + 2 : pos + 10], "big"), pos + 10
            stop = start + length
            if stop > end:
                break
            self._frame(buf[pos] & 0x0F, bytes(buf[start:stop]))
            pos = stop
        del buf[:pos]

    def _frame(self, opcode: int, payload: bytes) -> None:
        transport = self.transport
        assert transport is not None
        if opcode == 9:  # ping: a pong with the same payload
            transport.write(_mask(payload, 10))
            return
        if opcode == 8:
            transport.close()
            return
        if self.state == _SUBSCRIBING:
            if self.kind == "ws" and b"routing/subscribe/reply" in payload:
                self._join()
            elif self.kind == "nats" and payload.startswith(b"INFO"):
                command = (
                    b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB bench.tick 1\r\nPING\r\n'
                )
                transport.write(_mask(command, 2))
            elif self.kind == "nats" and b"PONG" in payload:
                self._join()
            return
        if self.kind == "nats" and payload.startswith(b"PING"):
            transport.write(_mask(b"PONG\r\n", 2))
        self._look(payload)

    def _look(self, data: bytes) -> None:
        if self.token and not self.arrived and self.token in data:
            self.arrived = time.time()

    def _join(self) -> None:
        self.state = _OPEN
        if not self.joined.done():
            self.joined.set_result(None)

    def _fail(self, error: ConnectionError) -> None:
        if not self.joined.done():
            self.joined.set_exception(error)
        if self.transport is not None:
            self.transport.abort()


async def _join(
    kind: str, address: tuple[str, int], path: str, source: str, subscribers: list[Subscriber]
) -> float:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.setblocking(False)
        # bounded too: a server at its descriptor cap leaves SYNs in a full backlog, and the
        # kernel's retries would hold this join (and its slot of the 64) for about two minutes
        await asyncio.wait_for(loop.sock_connect(sock, address), _JOIN_TIMEOUT)
        joined: asyncio.Future[None] = loop.create_future()
        _, subscriber = await loop.create_connection(
            lambda: Subscriber(kind, path, joined), sock=sock
        )
    except BaseException:
        sock.close()
        raise
    try:
        await asyncio.wait_for(joined, _JOIN_TIMEOUT)
    except BaseException:
        if subscriber.transport is not None:  # refused or too slow: not one of ours
            subscriber.transport.abort()
        raise
    subscribers.append(subscriber)
    return time.time()


async def _join_all(args: argparse.Namespace, subscribers: list[Subscriber]) -> dict[str, object]:
    path = {"ws": "/ws", "sse": "/v1/subscribe?types=bench.*", "nats": "/"}[args.kind]
    gate = asyncio.Semaphore(args.concurrency)
    start = time.time()
    times: list[float] = []
    errors: list[str] = []
    retried = 0

    async def one() -> None:
        nonlocal retried
        deadline = time.monotonic() + _JOIN_TIMEOUT
        async with gate:
            while True:
                try:
                    joined = await _join(
                        args.kind, (args.host, args.port), path, args.source, subscribers
                    )
                except Refused as exc:
                    if exc.status != b"503" or time.monotonic() > deadline:
                        errors.append(f"{exc} (after {retried} retries)")
                        return
                    retried += 1  # not ready (yet): again, as a real client would
                    await asyncio.sleep(_RETRY_S)
                    continue
                except (OSError, TimeoutError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                times.append(joined)
                return

    await asyncio.gather(*(one() for _ in range(args.count)))
    return {"joined": len(times), "errors": len(errors), "error": errors[:3], "start": start,
            "times": times, "retried": retried}  # fmt: skip


def _arm(token: bytes, subscribers: list[Subscriber]) -> None:
    """Every subscriber looks for ``token`` from now on (before the event is published)."""
    for subscriber in subscribers:
        subscriber.token, subscriber.arrived = token, 0.0


async def _expect(subscribers: list[Subscriber], timeout: float) -> list[float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s.arrived or not s.open for s in subscribers):
            break
        await asyncio.sleep(0.02)
    return [s.arrived for s in subscribers if s.arrived]


async def main(args: argparse.Namespace) -> None:
    subscribers: list[Subscriber] = []
    print(json.dumps(await _join_all(args, subscribers)), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().split():
        if line[0] == "expect":
            # said once the token is looked for: the event may only be published after it
            _arm(line[1].encode(), subscribers)
            print(json.dumps({"armed": len(subscribers)}), flush=True)
            arrivals = await _expect(subscribers, float(line[2]))
            print(json.dumps({"arrivals": arrivals}), flush=True)
        elif line[0] == "status":
            print(json.dumps({"open": sum(s.open for s in subscribers)}), flush=True)
        elif line[0] == "close":
            break
    for subscriber in subscribers:
        if subscriber.transport is not None:
            subscriber.transport.abort()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.connections")
    parser.add_argument("kind", choices=("ws", "sse", "nats"))
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--source", default="127.0.0.1")
    parser.add_argument("--concurrency", type=int, default=64)
    run(main(parser.parse_args()))
