"""SSE streams answered in the gateway's HTTP protocol (gateway/events/sse_lean.py), on both loops.

A user must not be able to tell them from the route's ASGI stream: the same head and body for
the same events, the same refusals (checked once: one rate token, one refused credential), the
same access log line (without the credential), the same end for a client that reads nothing.
What they must notice is what a stream costs: no task and no ASGI cycle while it streams. The
reference is the same request answered the ASGI way (``app.lean_sse`` off) on the same server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway.events.sse_lean import SseStream
from gateway.process.settings import ApiKey
from gateway.routes.routes_events import OVERFLOW
from tests.gateway.conftest import GATEWAY_HTTP, Stack, base_settings, eventually, running_stack

pytestmark = [pytest.mark.stack_loops]  # the broker, on the standard loop and on uvloop

QUEUE = 20
KEYS = (
    ApiKey("all", "k-all", presence=True),
    ApiKey("slow", "k-slow", rate=0.001),  # two requests (the burst), then 429 for a long time
    ApiKey("narrow", "k-narrow", types=("ok.*",)),
)


@pytest.fixture(scope="module")
def stack(stack_loop: str) -> Iterator[Stack]:
    settings = base_settings(api_keys=KEYS, sse_queue=QUEUE, rate_burst=2)
    with running_stack(settings, demo=False, loop=stack_loop, http=GATEWAY_HTTP) as running:
        yield running


@contextlib.contextmanager
def the_asgi_way(stack: Stack) -> Iterator[None]:
    """The route's own stream, as before the lean path (the reference)."""
    assert stack.server is not None
    app: Any = stack.server.config.app
    lean, app.lean_sse = app.lean_sse, None
    try:
        yield
    finally:
        app.lean_sse = lean


@contextlib.asynccontextmanager
async def opened(
    stack: Stack, target: str, headers: str = "", rcvbuf: int = 0, tail: bytes = b""
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", stack.settings.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode() + tail)
    try:
        yield reader, writer
    finally:
        writer.transport.abort()


async def _head(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
    data = await reader.readexactly(size + 2)
    assert data.endswith(b"\r\n"), data
    return data[:-2]


async def _body(reader: asyncio.StreamReader, events: int) -> bytes:
    """The de-chunked body up to its ``events``-th event (keepalives left out)."""
    body = b""
    async with asyncio.timeout(10):
        while body.count(b"event: ") < events:
            chunk = await _chunk(reader)
            if chunk != b": keepalive\n\n":
                body += chunk
    return body


async def _publish(stack: Stack, type_: str, *payloads: dict[str, Any]) -> None:
    client = await stack.bus_client()
    try:
        for payload in payloads:
            await client.publish(type_, payload)
        await client.flush()
    finally:
        await client.close()


async def _streams(stack: Stack) -> list[SseStream]:
    assert stack.server is not None
    connections: set[object] = set(stack.server.server_state.connections)
    return [c for c in connections if isinstance(c, SseStream)]


async def _tasks(stack: Stack) -> int:
    assert stack.server is not None
    return len(stack.server.server_state.tasks)


def _date_masked(head: bytes) -> bytes:
    return re.sub(rb"date: [^\r]*", b"date: -", head)


async def test_a_stream_sends_the_head_and_events_the_route_sends(stack: Stack) -> None:
    hub = stack.gateway.bridge.hub if stack.gateway else None
    assert hub is not None
    target = "/v1/subscribe?types=same.*,other.x&key=k-all"
    async with opened(stack, target) as (first, _):  # the hub logs same.* from now on
        await _head(first)
        await _publish(stack, "same.x", {"n": 0})
        await _body(first, 1)
        since = f"Last-Event-ID: {hub.epoch}-{hub.log.last_seq - 1}\r\n"  # replays it
        async with opened(stack, target, since) as (lean_reader, _):
            lean_head = await _head(lean_reader)
            with the_asgi_way(stack):
                async with opened(stack, target, since) as (asgi_reader, _):
                    asgi_head = await _head(asgi_reader)
                    first_ = [await _body(r, 1) for r in (lean_reader, asgi_reader)]
                    await _publish(stack, "same.x", {"n": 1}, {"n": 2, "text": "é\n"})
                    rest = [await _body(r, 2) for r in (lean_reader, asgi_reader)]
    assert _date_masked(lean_head) == _date_masked(asgi_head)
    assert lean_head.startswith(b"HTTP/1.1 200 OK\r\ndate: ")
    assert b"content-type: text/event-stream; charset=utf-8\r\n" in lean_head
    assert first_[0] == first_[1] and first_[0].startswith(b"retry: 2000\n: subscribed\n\nid: ")
    assert rest[0] == rest[1] and rest[0].count(b"event: message\n") == 2


async def test_streams_hold_no_task_and_no_asgi_cycle(stack: Stack) -> None:
    async with contextlib.AsyncExitStack() as streams:
        readers = [
            (
                await streams.enter_async_context(
                    opened(stack, "/v1/subscribe?types=many.*&key=k-all")
                )
            )[0]
            for _ in range(10)
        ]
        for reader in readers:
            await _head(reader)
        lean = await stack.run(_streams(stack))
        assert len(lean) == 10 and all(s.opened for s in lean)
        assert await stack.run(_tasks(stack)) == 0  # the ASGI way: a task per stream
        await _publish(stack, "many.x", {"n": 1})
        for reader in readers:
            assert b'"payload":{"n":1}' in await _body(reader, 1)

    async def all_gone() -> bool:
        return await stack.run(_streams(stack)) == [] and stack.gateway.metrics.open_streams == 0  # type: ignore[union-attr]

    await eventually(all_gone)


async def _refusals(stack: Stack, targets: list[str]) -> list[tuple[bytes, bytes]]:
    answers = []
    for target in targets:
        async with opened(stack, target) as (reader, _):
            head = await _head(reader)
            length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
            answers.append((_date_masked(head), await reader.readexactly(length)))
    return answers


async def test_refusals_are_the_routes_and_counted_once(stack: Stack) -> None:
    gateway = stack.gateway
    assert gateway is not None and gateway.authenticator is not None
    targets = [
        "/v1/subscribe?types=a.b&key=wrong",  # 401
        "/v1/subscribe?types=no.x&key=k-narrow",  # 403
        "/v1/subscribe?types=a.b&presence=1&key=k-narrow",  # 403: presence
        "/v1/subscribe?types=a..b&key=k-all",  # 400
        "/v1/subscribe?types=a.b&presence=maybe&key=k-all",  # 400
    ]
    invalid = gateway.authenticator.refused["invalid"]
    lean = await _refusals(stack, targets)
    assert gateway.authenticator.refused["invalid"] == invalid + 1  # not twice
    with the_asgi_way(stack):
        reference = await _refusals(stack, targets)
    assert lean == reference
    assert [head.split(b"\r\n")[0] for head, _ in lean] == [
        b"HTTP/1.1 401 Unauthorized",
        b"HTTP/1.1 403 Forbidden",
        b"HTTP/1.1 403 Forbidden",
        b"HTTP/1.1 400 Bad Request",
        b"HTTP/1.1 400 Bad Request",
    ]


async def test_a_request_the_route_answers_takes_one_rate_token(stack: Stack) -> None:
    # since=0 resumes from the journal (the route's way; this broker keeps none: 409): the
    # checks made in the protocol are not made again, so the rate bucket of 2 has one left
    async with opened(stack, "/v1/subscribe?types=r.x&since=0&key=k-slow") as (reader, _):
        assert (await _head(reader)).startswith(b"HTTP/1.1 409 ")
    async with opened(stack, "/v1/subscribe?types=r.x&key=k-slow") as (reader, _):
        assert (await _head(reader)).startswith(b"HTTP/1.1 200 ")
    async with opened(stack, "/v1/subscribe?types=r.x&key=k-slow") as (reader, _):
        assert (await _head(reader)).startswith(b"HTTP/1.1 429 ")


async def test_the_access_log_line_is_the_routes_without_the_key(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    assert stack.server is not None and stack.server.config.access_log
    caplog.set_level(logging.INFO, "uvicorn.access")
    target = "/v1/subscribe?types=log.x&key=k-all&last=0"
    async with opened(stack, target) as (reader, _):
        await _head(reader)
    with the_asgi_way(stack):
        async with opened(stack, target) as (reader, _):
            await _head(reader)
    lines = [re.sub(r":\d+ ", ":PORT ", r.getMessage()) for r in caplog.records]
    assert lines == ['127.0.0.1:PORT - "GET /v1/subscribe?types=log.x&last=0 HTTP/1.1" 200'] * 2


async def test_a_client_that_reads_nothing_gets_the_overflow_end_when_it_reads_again(
    stack: Stack,
) -> None:
    target = "/v1/subscribe?types=flood.x&key=k-all"
    async with opened(stack, target, rcvbuf=4096) as (reader, _):
        await _head(reader)
        client = await stack.bus_client()
        try:  # past the socket buffers and QUEUE events more, the stream is over

            async def ended() -> bool:
                streams = await stack.run(_streams(stack))
                return bool(streams) and all(s.ended for s in streams)

            for n in range(2000):
                await client.publish("flood.x", {"n": n, "pad": "x" * 4000})
                if n % 50 == 49 and await ended():
                    break
            await eventually(ended)
        finally:
            await client.close()
        body = b""
        async with asyncio.timeout(20):
            while chunk := await _chunk(reader):
                body += chunk
            assert await reader.read() == b""  # then the connection closes
    assert body.endswith(OVERFLOW.encode())
    events = body.count(b"event: message\n")
    assert 0 < events < 2000

    async def closed() -> bool:
        return stack.gateway.metrics.open_streams == 0  # type: ignore[union-attr]

    await eventually(closed)


@pytest.mark.parametrize(
    "after",
    [
        b"GET /v1/subscribe?types=after.x HTTP/1.1\r\nHost: x\r\n\r\n",  # pipelined: never answered
        b"POST /v1/request/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
        b"",
    ],
    ids=["another-stream", "a-request", "nothing"],
)
async def test_what_a_client_sends_after_its_stream_request_is_left_unread(
    stack: Stack, after: bytes
) -> None:
    target = "/v1/subscribe?types=after.x&key=k-all"
    async with opened(stack, target, "Content-Length: 3\r\n", tail=b"abc" + after) as (reader, _):
        assert (await _head(reader)).startswith(b"HTTP/1.1 200 ")
        await _publish(stack, "after.x", {"n": 1})
        body = await _body(reader, 1)
    assert body.count(b"event: message\n") == 1 and b'"payload":{"n":1}' in body


async def test_bytes_after_the_head_that_are_no_http_get_400_and_no_traceback(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    target = "/v1/subscribe?types=bad.x&key=k-all"
    async with opened(stack, target, tail=b"\x00garbage\r\n\r\n") as (reader, _):
        async with asyncio.timeout(10):
            answer = await reader.read()  # to its end: the connection is closed
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    await stack.run(asyncio.sleep(0))  # after the server's connection_lost
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert await stack.run(_streams(stack)) == []


@pytest.fixture(scope="module")
def cors_stack(stack_loop: str) -> Iterator[Stack]:
    settings = base_settings(cors_origins=("https://app.example",))
    with running_stack(settings, demo=False, loop=stack_loop, http=GATEWAY_HTTP) as running:
        yield running


@pytest.mark.parametrize(
    "origin",
    ["Origin: https://app.example\r\n", "Origin: https://elsewhere.example\r\n", ""],
    ids=["allowed", "not-allowed", "none"],
)
async def test_with_cors_a_stream_is_lean_and_its_head_has_the_middlewares_headers(
    cors_stack: Stack, origin: str
) -> None:
    target = "/v1/subscribe?types=cors.x"
    async with opened(cors_stack, target, origin) as (reader, _):
        lean_head = await _head(reader)
        assert len(await cors_stack.run(_streams(cors_stack))) == 1  # answered in the protocol
        await _publish(cors_stack, "cors.x", {"n": 1})
        assert b'"payload":{"n":1}' in await _body(reader, 1)
    with the_asgi_way(cors_stack):
        async with opened(cors_stack, target, origin) as (reader, _):
            asgi_head = await _head(reader)
    assert _date_masked(lean_head) == _date_masked(asgi_head)
    allowed = b"access-control-allow-origin: https://app.example\r\n" in lean_head
    assert allowed == ("app.example" in origin)
    assert b"vary: Origin\r\n" in lean_head


async def test_with_cors_a_refusal_found_later_has_the_cors_headers(cors_stack: Stack) -> None:
    # since=0 on a broker without a journal: the stream's own bus subscription is refused
    # (409), after the request left the route: the answer is written in the protocol
    origin = "Origin: https://app.example\r\n"
    async with opened(cors_stack, "/v1/subscribe?types=r.x&since=0", origin) as (reader, _):
        head = await _head(reader)
    assert head.startswith(b"HTTP/1.1 409 ")
    assert b"access-control-allow-origin: https://app.example\r\n" in head
