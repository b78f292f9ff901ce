"""Requests answered from the gateway's HTTP protocol's callbacks (routes/request_direct.py).

A gateway with API keys, under its own protocol as ``busgate gateway`` runs it, against the
real broker and demo service. A plain request is answered from the protocol's callbacks; the
same request with a query string goes the ASGI way: both must give the same answer, status,
headers (in order) and body, ids aside. And a connection still does what HTTP/1.1 says:
pipelining, keep-alive, ``Connection: close``, a body after its head, a client that leaves.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway.process import http_protocol
from gateway.process.http_protocol import HEADER_TIMEOUT_S, KEEP_ALIVE_S, protocol_class
from gateway.process.settings import ApiKey
from gateway.routes.request_direct import DirectRequests, _Exchange
from tests.gateway.conftest import Stack, base_settings, eventually, raw_socket, running_stack

pytestmark = [pytest.mark.stack_loops]  # asyncio and uvloop (busgate gateway's)

OPS = {"X-API-Key": "k-ops"}


@pytest.fixture(scope="module")
def stack(stack_loop: str) -> Iterator[Stack]:
    settings = base_settings(
        api_keys=(
            ApiKey("ops", "k-ops"),
            ApiKey("ci", "k-ci", groups=("other",), types=()),
            ApiKey("slow", "k-slow", rate=0.001),
        ),
        rate_burst=2,
        max_body=1000,
    )
    http = protocol_class(HEADER_TIMEOUT_S)
    with running_stack(settings, loop=stack_loop, http=http) as running:
        yield running


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


class Decisions(list[bool]):
    """What DirectRequests decided, and how many requests were read in one piece."""

    whole = 0


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Decisions:
    """What DirectRequests decided for each request, in order: its head read by uvicorn's
    parser (``take``), or the whole request read in one piece (``take_whole``; refused, its
    bytes go to uvicorn's parser and ``take`` decides)."""
    decided = Decisions()
    take, take_whole = DirectRequests.take, DirectRequests.take_whole

    def recording(self: DirectRequests, protocol: Any) -> bool:
        result = take(self, protocol)
        decided.append(result)
        return result

    def recording_whole(self: DirectRequests, protocol: Any, *whole: Any) -> bool:
        result = take_whole(self, protocol, *whole)
        if result:
            decided.append(result)
            decided.whole += 1
        return result

    monkeypatch.setattr(DirectRequests, "take", recording)
    monkeypatch.setattr(DirectRequests, "take_whole", recording_whole)
    return decided


_IDS = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]"
    r"|\d{4}-\d\d-\d\dT[0-9:.+]+|\"epoch_ms\":\d+|\"slept\":[\d.]+"
)
_MASKED = (b"date", b"x-busgate-mid", b"traceparent")


def _seen(response: httpx.Response) -> tuple[int, list[tuple[str, str]], str]:
    """What a caller sees, ids, traces, times and the date masked."""
    headers = [
        (name.decode(), "*" if name in _MASKED else value.decode())
        for name, value in response.headers.raw
    ]
    return response.status_code, headers, _IDS.sub("*", response.text)


CASES: list[tuple[str, dict[str, str], bytes]] = [
    ("/v1/request/demo", OPS, b'{"CMD":"echo","x":1,"s":"h\\u00e9"}'),
    ("/v1/request/demo", {**OPS, "Accept": "application/json"}, b'{"CMD":"time"}'),
    ("/v1/demo/echo", OPS, b'{"y":[1,2]}'),  # the typed route
    ("/v1/request/demo", OPS, b'{"CMD":"echo","x":1'),  # not JSON: 400
    ("/v1/request/demo", OPS, b'{"x":1}'),  # no CMD: 400
    ("/v1/request/-bad", OPS, b'{"CMD":"echo"}'),  # a bad group name: 400
    ("/v1/request/demo", OPS, b'{"CMD":"echo","pad":"' + b"x" * 1000 + b'"}'),  # 413
    ("/v1/request/demo", {}, b'{"CMD":"echo"}'),  # no key: 401
    ("/v1/request/demo", {"X-API-Key": "wrong"}, b'{"CMD":"echo"}'),  # 401
    ("/v1/request/demo", {"X-API-Key": "k-ci"}, b'{"CMD":"echo"}'),  # not its group: 403
    ("/v1/request/nobody", OPS, b'{"CMD":"echo"}'),  # no responders: 503
    ("/v1/request/demo", OPS, b'{"CMD":"fail","rcd":409,"msg":"taken"}'),  # a NAK: 409
    ("/v1/request/demo", {**OPS, "X-Busgate-Timeout": "0.3"}, b'{"CMD":"sleep","seconds":3}'),
    ("/v1/request/demo", {**OPS, "X-Busgate-Timeout": "-1"}, b'{"CMD":"echo"}'),  # 400
    ("/v1/request/demo", OPS, b'{"CMD":"count","n":3}'),  # a stream: NDJSON
    ("/v1/request/demo", {**OPS, "Accept": "application/json"}, b'{"CMD":"count","n":2}'),
]


@pytest.mark.parametrize(("path", "headers", "body"), CASES)
async def test_the_same_answer_as_the_asgi_way(
    http: httpx.AsyncClient, taken: Decisions, path: str, headers: dict[str, str], body: bytes
) -> None:
    direct = await http.post(path, content=body, headers=headers)
    asgi = await http.post(path, params={"via": "asgi"}, content=body, headers=headers)
    assert taken == [True, False]  # the query string sends the second the ASGI way
    assert _seen(direct) == _seen(asgi)
    assert direct.status_code != 500


async def test_the_rate_limit_is_kept(http: httpx.AsyncClient, taken: Decisions) -> None:
    key = {"X-API-Key": "k-slow"}
    answers = [await http.post("/v1/request/demo", json={"CMD": "echo"}, headers=key)]
    answers.append(await http.post("/v1/request/demo", json={"CMD": "echo"}, headers=key))
    refused = await http.post("/v1/request/demo", json={"CMD": "echo"}, headers=key)
    asgi = await http.post("/v1/request/demo?via=asgi", json={"CMD": "echo"}, headers=key)
    assert [a.status_code for a in answers] == [200, 200]
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert _seen(refused) == _seen(asgi)
    assert taken == [True, True, True, False]


def _answers(data: bytes) -> tuple[list[tuple[bytes, dict[bytes, bytes], bytes]], bytes]:
    """The whole HTTP responses at the start of ``data`` (content-length bodies), and the rest."""
    found = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines)
        size = int(headers[b"content-length"])
        if len(rest) < size:
            break
        found.append((status, headers, rest[:size]))
        data = rest[size:]
    return found, data


async def _read_answers(reader: asyncio.StreamReader, count: int) -> list[Any]:
    data = b""
    async with asyncio.timeout(15):
        while len(found := _answers(data)[0]) < count:
            chunk = await reader.read(65536)
            assert chunk, f"closed after {len(found)} answers: {data!r}"
            data += chunk
    return found


def _request(x: int, *extra: bytes, body: bytes | None = None) -> bytes:
    body = b'{"CMD":"echo","x":%d}' % x if body is None else body
    lines = [b"POST /v1/request/demo HTTP/1.1", b"Host: gw", b"X-API-Key: k-ops", *extra]
    return b"\r\n".join([*lines, b"Content-Length: %d" % len(body), b"", body])


async def test_pipelined_requests_are_answered_in_order_and_the_connection_kept(
    stack: Stack, taken: Decisions
) -> None:
    async with raw_socket(stack.settings.port) as (reader, writer):
        writer.write(b"".join(_request(x) for x in (1, 2, 3)))  # one write: pipelined
        answers = await _read_answers(reader, 3)
        assert [json.loads(body)["payload"]["x"] for _, _, body in answers] == [1, 2, 3]
        assert all(status == b"HTTP/1.1 200 OK" for status, _, _ in answers)
        writer.write(_request(4))  # kept alive: the next request on the same connection
        (status, _, body), = await _read_answers(reader, 1)  # fmt: skip
        assert status == b"HTTP/1.1 200 OK" and json.loads(body)["payload"] == {"x": 4}
    assert taken[0] is True and taken[-1] is True  # (pipelined ones may queue the ASGI way)


async def test_connection_close_is_answered_then_closed(stack: Stack, taken: Decisions) -> None:
    async with raw_socket(stack.settings.port) as (reader, writer):
        writer.write(_request(5, b"Connection: close"))
        (status, headers, body), = await _read_answers(reader, 1)  # fmt: skip
        answered = time.monotonic()
        async with asyncio.timeout(15):
            rest = await reader.read(-1)  # to the end: the server closes it
        closed_after = time.monotonic() - answered
    assert status == b"HTTP/1.1 200 OK" and headers[b"connection"] == b"close"
    assert json.loads(body)["payload"] == {"x": 5}
    assert rest == b""
    # closed with its answer, not by the keep-alive timer, KEEP_ALIVE_S after it
    assert closed_after < KEEP_ALIVE_S / 2
    assert taken == [True]


async def test_a_body_after_its_head_is_waited_for(stack: Stack, taken: Decisions) -> None:
    async with raw_socket(stack.settings.port) as (reader, writer):
        head, _, body = _request(6).partition(b"\r\n\r\n")
        writer.write(head + b"\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)  # the head is read alone (no answer can come before the body)
        writer.write(body[:5])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(body[5:])
        (status, _, answer), = await _read_answers(reader, 1)  # fmt: skip
    assert status == b"HTTP/1.1 200 OK" and json.loads(answer)["payload"] == {"x": 6}
    assert taken == [True]


def _masked(answer: tuple[bytes, dict[bytes, bytes], bytes]) -> Any:
    status, headers, body = answer
    shown = {name: b"*" if name in _MASKED else value for name, value in headers.items()}
    return status, list(shown.items()), _IDS.sub("*", body.decode())


@pytest.mark.parametrize(
    "extra",
    [
        (),
        (b"Accept: application/json", b"Content-Type: application/json"),
        (
            b"X-Busgate-Timeout: 2",
            b"TraceParent: 00-0af7651916cd76836b0b0a2b5a7a6d2e-b7ad6b7169203331-01",
        ),
    ],
)
async def test_a_request_read_in_one_piece_is_answered_as_uvicorns_parser_has_it_answered(
    stack: Stack, taken: Decisions, monkeypatch: pytest.MonkeyPatch, extra: tuple[bytes, ...]
) -> None:
    async with raw_socket(stack.settings.port) as (reader, writer):
        writer.write(_request(9, *extra))  # one write: read in one piece, if accelerated
        (whole,) = await _read_answers(reader, 1)
    assert taken.whole == (1 if http_protocol._WHOLE_REQUEST is not None else 0)
    monkeypatch.setattr(http_protocol, "_WHOLE_REQUEST", None)  # every read to uvicorn's parser
    async with raw_socket(stack.settings.port) as (reader, writer):
        writer.write(_request(9, *extra))
        (parsed,) = await _read_answers(reader, 1)
    assert taken == [True, True] and taken.whole <= 1
    assert whole[0] == b"HTTP/1.1 200 OK" and json.loads(whole[2])["payload"] == {"x": 9}
    assert _masked(whole) == _masked(parsed)


async def test_a_client_that_leaves_mid_request_costs_nothing(
    stack: Stack, http: httpx.AsyncClient, taken: Decisions, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    gateway = stack.gateway
    assert gateway is not None

    async def in_flight() -> bool:
        return gateway.bridge.in_flight > 0

    async def nothing_in_flight() -> bool:
        return gateway.bridge.in_flight == 0

    async with raw_socket(stack.settings.port) as (_, writer):
        writer.write(_request(0, body=b'{"CMD":"sleep","seconds":1}'))
        await writer.drain()
        await stack.run(eventually(in_flight))  # on its way to the service, then it leaves
    await stack.run(eventually(nothing_in_flight))  # the answer came to nobody: forgotten
    response = await http.post("/v1/request/demo", json={"CMD": "echo", "x": 7}, headers=OPS)
    assert response.status_code == 200 and response.json()["payload"] == {"x": 7}
    assert taken == [True, True]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_answered_request_leaves_no_garbage_for_the_cyclic_collector(
    stack: Stack, taken: Decisions
) -> None:
    """Each request's exchange is freed when answered (a reference cycle would leave each one
    to the cyclic collector, whose full passes stop the gateway; DESIGN.md)."""

    def exchanges_alive() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is _Exchange)

    gc.collect()
    gc.disable()
    try:
        before = exchanges_alive()
        async with raw_socket(stack.settings.port) as (reader, writer):
            for x in range(20):  # one after the other on one connection
                writer.write(_request(x))
                (status, _, _), = await _read_answers(reader, 1)  # fmt: skip
                assert status == b"HTTP/1.1 200 OK"
            assert exchanges_alive() - before <= 1  # the connection holds its last one
    finally:
        gc.enable()
    assert taken == [True] * 20
