"""A client that half-closes its TCP connection (netcat at the end of its input) still gets the
answers to what it asked (docs/PROTOCOL.md 6.5), as the README's ``nc`` line needs."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.demo import create_demo_service
from bus.objects.bridge import Bridge
from bus.objects.codec import BusinessObject, NeedData, ObjectDecoder, encode_object
from bus.objects.router import Router
from bus.objects.tcp import ObjectServer
from tests.bus.objclient import ObjClient
from tests.conftest import MakeClient

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

README = Path(__file__).resolve().parents[2] / "README.md"
WAIT = 10.0


def readme_nc_input() -> bytes:
    """The bytes the README's ``printf ... | nc`` line sends, taken from the README itself."""
    text = README.read_text()
    found = re.search(r"printf '([^']*)' *\\?\n? *\| *nc -q 2 127\.0\.0\.1 7890", text)
    assert found, "the README's nc line changed"
    return found.group(1).encode().replace(b"\\0", b"\0")


async def half_closed_exchange(port: int, data: bytes) -> list[BusinessObject]:
    """Send ``data``, shut down the sending side (as nc does at EOF), read until closed."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, data)
    sock.shutdown(socket.SHUT_WR)
    decoder = ObjectDecoder()
    objects: list[BusinessObject] = []
    try:
        async with asyncio.timeout(WAIT):
            while chunk := await loop.sock_recv(sock, 65536):
                decoder.receive_data(chunk)
                while not isinstance(obj := decoder.next_event(), NeedData):
                    objects.append(obj)
    finally:
        sock.close()
    return objects


@pytest.fixture
async def bridged(make_client: MakeClient) -> AsyncIterator[ObjectServer]:
    """An object server bridged to the ``broker`` fixture, with the demo service on the bus."""
    server = ObjectServer(Router("broker-os"))
    await server.start(port=0)
    bridge = Bridge(server, await make_client(name="bob"))
    demo = create_demo_service(await make_client(name="carol"), heartbeat_interval=0.5)
    await demo.start()
    await bridge.start()
    yield server
    await bridge.stop()
    await demo.stop()
    await server.stop()


async def test_the_readme_nc_line_gets_its_reply(bridged: ObjectServer) -> None:
    data = readme_nc_input()
    assert re.search(rb'"event":"services/request".*"name":"demo"', data)
    objects = await half_closed_exchange(bridged.port, data)
    replies = [obj for obj in objects if obj.event == "services/reply"]
    assert len(replies) == 1, [obj.metadata for obj in objects]
    assert replies[0].metadata["in-reply-to"] == "1"
    assert orjson.loads(replies[0].payload) == {"x": 1}


async def test_a_slow_answer_still_reaches_a_half_closed_client(bridged: ObjectServer) -> None:
    request: dict[str, Any] = {
        "event": "services/request", "id": "slow", "name": "demo", "request": "sleep",
        "args": {"seconds": 0.5},
    }  # fmt: skip
    data = encode_object(BusinessObject({"event": "routing/subscribe"})) + encode_object(
        BusinessObject(request)
    )
    objects = await half_closed_exchange(bridged.port, data)
    replies = [obj for obj in objects if obj.event == "services/reply"]
    assert [obj.metadata.get("in-reply-to") for obj in replies] == ["slow"]


async def test_every_response_of_a_stream_arrives_before_the_close(bridged: ObjectServer) -> None:
    request = {"event": "services/request", "id": "c", "name": "demo", "request": "count"}
    data = b"".join(
        encode_object(BusinessObject(meta))
        for meta in ({"event": "routing/subscribe"}, {**request, "args": {"n": 3}})
    )
    objects = await half_closed_exchange(bridged.port, data)
    replies = [obj for obj in objects if obj.event == "services/reply"]
    payloads = [orjson.loads(obj.payload) for obj in replies if obj.payload]
    assert [p["i"] for p in payloads] == [1, 2, 3]


async def test_a_half_closed_client_that_asked_nothing_is_closed_at_once() -> None:
    server = ObjectServer(Router("os"))
    await server.start(port=0)
    try:
        watcher = await ObjClient.open(server.port)
        subscribe = encode_object(BusinessObject({"event": "routing/subscribe"}))
        objects = await half_closed_exchange(server.port, subscribe)
        assert [obj.event for obj in objects] == ["routing/subscribe/reply"]
        await watcher.expect("routing/disconnect")
        await watcher.close()
    finally:
        await server.stop()


async def test_an_unanswered_request_is_given_up_after_the_half_close_timeout() -> None:
    server = ObjectServer(Router("os"), half_close_timeout=0.3)
    await server.start(port=0)
    try:
        service = await ObjClient.open(server.port)  # sees the request, never answers
        request = {"event": "services/request", "id": "q", "name": "nobody"}
        data = encode_object(BusinessObject({"event": "routing/subscribe"})) + encode_object(
            BusinessObject(request)
        )
        objects = await half_closed_exchange(server.port, data)
        assert [obj.event for obj in objects] == ["routing/subscribe/reply", "services/request"]
        await service.expect("services/request")
        await service.expect("routing/disconnect")
        await service.close()
    finally:
        await server.stop()
