"""The gateway's whole answers written on uvicorn's cycle (gateway/process/cycle.py
``write_whole``).

An answer to ``POST /v1/request/{group}`` is written in one call instead of two ASGI sends. A
user must not be able to tell: the same bytes leave as uvicorn's ``send`` writes (its date and
server headers, ``connection: close`` when the connection is not kept alive), keep-alive,
pipelining and HTTP/1.0 behave the same, and the access log says the same. The reference is
the same request answered by ``send`` (``write_whole`` declining), on the same server.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

import gateway.routes.request_answers
import gateway.state
from gateway.process.cli import uvicorn_config
from gateway.process.http_protocol import CorkedTransport
from tests.gateway.conftest import Stack, base_settings, free_port, raw_socket, running_stack

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BODY = b'{"CMD":"echo","x":1}'


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack(base_settings()) as stack:
        yield stack


@pytest.fixture
def port(stack: Stack) -> int:
    assert stack.server is not None
    return stack.server.config.port


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call of uvicorn's ``send`` (httptools), counted."""
    calls: list[int] = []
    original = RequestResponseCycle.send

    async def counted(self: RequestResponseCycle, message: Any) -> None:
        calls.append(1)
        await original(self, message)

    monkeypatch.setattr(RequestResponseCycle, "send", counted)
    return calls


def request(version: str = "1.1", extra: str = "") -> bytes:
    return (
        f"POST /v1/request/demo HTTP/{version}\r\nHost: x\r\ntraceparent: {TRACE}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n{extra}\r\n"
    ).encode() + BODY


async def exchange(port: int, data: bytes, answers: int = 1) -> tuple[list[bytes], bool]:
    """Send ``data``, read ``answers`` whole responses; also whether the server then closed."""
    async with raw_socket(port) as (reader, writer):
        writer.write(data)
        got = []
        async with asyncio.timeout(10):
            for _ in range(answers):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
                got.append(head + await reader.readexactly(length))
            try:
                closed = await asyncio.wait_for(reader.read(1), 0.5) == b""
            except TimeoutError:
                closed = False
    return got, closed


def normal(answer: bytes) -> bytes:
    """An answer with what differs between two requests (date, ids, the child trace) masked."""
    answer = re.sub(rb"date: [^\r]*", b"date: -", answer)
    answer = re.sub(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", b"ID", answer)
    return re.sub(rb'"TRC":"[^"]*"', b'"TRC":"-"', answer)


def the_asgi_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.routes.request_answers, "write_whole", lambda *args: False)


@pytest.mark.parametrize(
    ("data", "answers", "closes"),
    [
        pytest.param(request(), 1, False, id="keep-alive"),
        pytest.param(request() * 3, 3, False, id="pipelined"),
        pytest.param(request("1.0"), 1, True, id="http-1.0"),
        pytest.param(request(extra="Connection: close\r\n"), 1, True, id="connection-close"),
    ],
)
async def test_the_answer_is_the_bytes_uvicorn_would_send(
    port: int,
    sends: list[int],
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
    answers: int,
    closes: bool,
) -> None:
    direct, direct_closed = await exchange(port, data, answers)
    assert sends == [], "the answers went through uvicorn's send"
    the_asgi_way(monkeypatch)
    reference, reference_closed = await exchange(port, data, answers)
    assert len(sends) == 2 * answers  # the reference did take the ASGI way
    assert [normal(a) for a in direct] == [normal(a) for a in reference]
    assert direct_closed is reference_closed is closes
    first = direct[0]
    assert first.startswith(b"HTTP/1.1 200 OK\r\ndate: ")
    assert (b"connection: close\r\n" in first) is closes
    assert f"traceparent: {TRACE}\r\n".encode() in first
    assert first.endswith(b',"payload":{"x":1}}')


async def test_the_access_log_says_the_same(
    stack: Stack, port: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert stack.server is not None and stack.server.config.access_log
    caplog.set_level(logging.INFO, "uvicorn.access")
    await exchange(port, request())
    the_asgi_way(monkeypatch)
    await exchange(port, request())
    lines = [re.sub(r":\d+ ", ":PORT ", r.getMessage()) for r in caplog.records]
    assert len(lines) == 2 and lines[0] == lines[1], lines
    assert lines[0] == '127.0.0.1:PORT - "POST /v1/request/demo HTTP/1.1" 200'


async def test_an_answer_names_the_request_mid(port: int) -> None:
    (answer,), _ = await exchange(port, request())
    mid = re.search(rb"x-busgate-mid: ([^\r]*)", answer).group(1)  # type: ignore[union-attr]
    assert b'"RID":"' + mid + b'"' in answer  # the ACK answers the request the header names


async def test_errors_still_go_the_asgi_way(port: int, sends: list[int]) -> None:
    """A NAK is answered by the app's error handlers (status and JSON body as before)."""
    body = b'{"CMD":"fail","x":1}'
    data = (
        request()
        .replace(BODY, body)
        .replace(f"Content-Length: {len(BODY)}".encode(), f"Content-Length: {len(body)}".encode())
    )
    (answer,), _ = await exchange(port, data)
    assert answer.startswith(b"HTTP/1.1 4") or answer.startswith(b"HTTP/1.1 5")
    assert b'"error"' in answer
    assert len(sends) == 2


@pytest.fixture(scope="module")
def corked_port(stack: Stack) -> Iterator[int]:
    """The stack's app under the gateway's own uvicorn settings (its CorkedTransport)."""
    assert stack.server is not None
    settings = replace(stack.settings, port=free_port())
    config = uvicorn_config(stack.server.config.app, settings, "warning")
    config.lifespan = "off"  # the stack's server runs the app's lifespan
    server = uvicorn.Server(config)

    async def start() -> asyncio.Task[None]:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        return task

    task = stack.call(start())
    yield settings.port
    server.should_exit = True
    stack.call(asyncio.wait_for(task, 15))


@pytest.mark.parametrize(
    ("extra", "interim"),
    [
        pytest.param("", b"", id="plain"),
        # receive() writes the interim answer, before the answer (the body is already here)
        pytest.param("Expect: 100-continue\r\n", b"HTTP/1.1 100 Continue\r\n\r\n", id="100"),
    ],
)
async def test_under_the_gateways_protocol_an_answer_is_one_socket_write(
    corked_port: int, monkeypatch: pytest.MonkeyPatch, extra: str, interim: bytes
) -> None:
    writes: list[bytes] = []
    original = CorkedTransport.write_whole

    def recorded(self: CorkedTransport, data: bytes) -> None:
        writes.append(data)
        original(self, data)

    monkeypatch.setattr(CorkedTransport, "write_whole", recorded)
    async with raw_socket(corked_port) as (reader, writer):
        writer.write(request(extra=extra) * 2)
        said = b""
        async with asyncio.timeout(10):
            while said.count(b',"payload":{"x":1}}') < 2:
                said += await reader.read(65536)
    assert len(writes) == 2  # one socket write per answer
    assert said.replace(interim, b"") == b"".join(writes)
    assert said.startswith(interim + b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("path", ["/v1/request/demo", "/v1/request/demo/"])  # fast, Starlette
async def test_an_answered_request_leaves_no_garbage_for_the_cyclic_collector(
    port: int, path: str
) -> None:
    """The app kept uvicorn's cycle in the scope that cycle holds: every request was a
    reference cycle, and the full collections it forced stopped the gateway for tens of ms."""

    def cycles_alive() -> int:
        return sum(
            1 for o in gc.get_objects() if type(o) is RequestResponseCycle and o.response_complete
        )

    with warnings.catch_warnings():
        # What earlier tests of this process left unclosed may be collected here: its
        # ResourceWarnings are theirs, not this test's (which counts request cycles).
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    gc.disable()
    try:
        before = cycles_alive()
        data = request().replace(b"/v1/request/demo", path.encode())
        answers, _ = await exchange(port, data * 20, answers=20)  # one connection
        assert all(answer.startswith(b"HTTP/1.1 200 ") for answer in answers)
        await asyncio.sleep(0.2)  # the connection's end reaches the server
        assert cycles_alive() - before <= 1  # the connection may still hold its last one
    finally:
        gc.enable()


# -- the body taken whole (gateway/process/cycle.py whole_body) ------------------------------------


async def test_a_body_sent_after_its_head_is_received_and_answered(port: int) -> None:
    # The head alone first: the body is still to come, so it is received the ASGI way.
    async with raw_socket(port) as (reader, writer):
        head, body = request().split(b"\r\n\r\n", 1)
        writer.write(head + b"\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(body)
        async with asyncio.timeout(10):
            answer = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", answer).group(1))  # type: ignore[union-attr]
            answer += await reader.readexactly(length)
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"x":1' in answer


@pytest.mark.parametrize("pieces", [1, 2], ids=["whole", "head-then-body"])
async def test_a_body_over_the_limit_is_413_however_it_arrives(
    port: int, monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    monkeypatch.setattr(gateway.state.Gateway, "max_body", lambda self, principal: len(BODY) - 1)
    async with raw_socket(port) as (reader, writer):
        head, body = request().split(b"\r\n\r\n", 1)
        if pieces == 1:
            writer.write(request())
        else:
            writer.write(head + b"\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.write(body)
        async with asyncio.timeout(10):
            answer = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", answer).group(1))  # type: ignore[union-attr]
            answer += await reader.readexactly(length)
    assert answer.startswith(b"HTTP/1.1 413 ") and b'"too_large"' in answer
    assert f"{len(BODY)}".encode() in answer  # the body's size, named in the error
