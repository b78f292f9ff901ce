"""``/ws`` without the ASGI stack (gateway/websocket/lean.py): the gateway as it runs (its
uvicorn settings and HTTP protocol), real sockets, on both loops."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import struct
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.app import create_app
from gateway.process.http_protocol import HeaderDeadlineProtocol
from gateway.process.server import uvicorn_config
from gateway.process.settings import ApiKey, GatewaySettings
from gateway.websocket.lean import LeanWebSocket
from tests.bus.pki import Pki
from tests.gateway.conftest import base_settings, free_port, raw_socket
from tests.gateway.websocket.test_ws import WsClient
from tests.gateway.websocket.test_ws_reader import frame

pytestmark = pytest.mark.loops  # the gateway runs on uvloop: each test on both loops

WAIT = 5.0
KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


@contextlib.asynccontextmanager
async def gateway(settings: GatewaySettings, **config: Any) -> AsyncIterator[Any]:
    """The gateway app under its own uvicorn settings (``config`` changes them), no link."""
    settings = replace(settings, host="127.0.0.1", port=free_port())
    settings = replace(settings, web_dir="", objects_links=())
    server_config = uvicorn_config(create_app(settings), settings, "warning")
    for name, value in config.items():
        setattr(server_config, name, value)
    server = uvicorn.Server(server_config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        yield server
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


@pytest.fixture(autouse=True)
def _no_link(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")


@pytest.fixture
def settings(bus_url: str) -> GatewaySettings:
    return base_settings(bus_url=bus_url)


def _url(server: Any, query: str = "") -> str:
    return f"ws://127.0.0.1:{server.config.port}/ws{query}"


async def _handshake(writer: Writer, reader: Reader, *headers: bytes) -> bytes:
    lines = headers or (b"Sec-WebSocket-Key: " + KEY, b"Sec-WebSocket-Version: 13")
    writer.write(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + b"".join(line + b"\r\n" for line in lines)
        + b"\r\n"
    )
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)


@contextlib.asynccontextmanager
async def _subscribed(server: Any, routing_id: str) -> AsyncIterator[tuple[Reader, Writer]]:
    """A raw-socket client through the lean handshake that has sent ``routing/subscribe``."""
    async with raw_socket(server.config.port) as (reader, writer):
        await _handshake(writer, reader)
        subscribe = {"event": "routing/subscribe", "routing-id": routing_id}
        writer.write(frame(0x1, json.dumps(subscribe).encode()))
        yield reader, writer


async def _read_frame(reader: Reader) -> tuple[int, bytes]:
    """The opcode and payload of one server frame (unmasked, RFC 6455 5.1)."""
    head = await asyncio.wait_for(reader.readexactly(2), WAIT)
    assert not head[1] & 0x80, "a server frame must not be masked"
    size = head[1] & 0x7F
    if size >= 126:
        size = int.from_bytes(await reader.readexactly(2 if size == 126 else 8), "big")
    return head[0], await reader.readexactly(size)


async def _closed_with(reader: Reader) -> int:
    """Read frames until the close frame: its code; then the connection ends."""
    while True:
        opcode, payload = await _read_frame(reader)
        if opcode == 0x88:
            code = struct.unpack("!H", payload[:2])[0] if payload else 1005
            assert await asyncio.wait_for(reader.read(), WAIT) == b""  # the TCP close
            return int(code)


async def test_ws_is_served_by_the_lean_protocol_and_counted(settings: GatewaySettings) -> None:
    async with gateway(settings) as server:
        before = set(server.server_state.connections)
        client = await WsClient.open(_url(server))
        [protocol] = set(server.server_state.connections) - before
        assert isinstance(protocol, LeanWebSocket)
        metrics = server.config.app.state.gateway.metrics
        assert metrics.open_sockets == 1
        await client.send({"event": "ping", "id": "p"})
        await client.expect("pong", in_reply_to="p")
        assert client.ws.response.headers.get("Sec-WebSocket-Extensions") is None  # declined
        await client.close()
        async with asyncio.timeout(WAIT):
            while protocol in server.server_state.connections or metrics.open_sockets:
                await asyncio.sleep(0.01)


async def test_the_setting_turns_it_off(settings: GatewaySettings) -> None:
    async with gateway(replace(settings, ws_lean=False)) as server:
        before = set(server.server_state.connections)
        client = await WsClient.open(_url(server))
        [protocol] = set(server.server_state.connections) - before
        assert not isinstance(protocol, LeanWebSocket)
        await client.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ((b"Sec-WebSocket-Key: " + KEY, b"Sec-WebSocket-Version: 8"), b"426"),
        ((b"Sec-WebSocket-Key: c2hvcnQ=", b"Sec-WebSocket-Version: 13"), b"400"),
        ((b"Sec-WebSocket-Version: 13",), b"400"),
    ],
)
async def test_a_bad_handshake_gets_its_status(
    headers: tuple[bytes, ...], status: bytes, settings: GatewaySettings
) -> None:
    async with gateway(settings) as server, raw_socket(server.config.port) as (reader, writer):
        head = await _handshake(writer, reader, *headers)
        assert head.split(b" ")[1] == status
        if status == b"426":
            assert b"sec-websocket-version: 13\r\n" in head.lower()
        assert await asyncio.wait_for(reader.read(), WAIT)  # the body, then the close


async def test_the_handshake_answer_of_the_rfc(settings: GatewaySettings) -> None:
    async with gateway(settings) as server, raw_socket(server.config.port) as (reader, writer):
        head = await _handshake(writer, reader)
        assert head.startswith(b"HTTP/1.1 101 ")
        assert b"\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in head


async def test_fragments_pings_and_the_clients_close(settings: GatewaySettings) -> None:
    async with gateway(settings) as server:
        watcher = await WsClient.open(_url(server))
        async with raw_socket(server.config.port) as (reader, writer):
            await _handshake(writer, reader)
            text = b'{"event":"routing/subscribe","id":"s","routing-id":"frag"}'
            writer.write(
                frame(0x1, text[:10], fin=False) + frame(0x9, b"are you there")
                + frame(0x0, text[10:30], fin=False) + frame(0x0, text[30:])
            )  # fmt: skip
            assert await _read_frame(reader) == (0x8A, b"are you there")  # the pong, first
            opcode, reply = await _read_frame(reader)
            assert opcode == 0x81 and b"routing/subscribe/reply" in reply
            await watcher.expect("routing/subscribe/notify", routing_id="frag")
            writer.write(frame(0x8, struct.pack("!H", 1000) + b"bye"))
            assert await _closed_with(reader) == 1000  # echoed, then the TCP close
            await watcher.expect("routing/disconnect", routing_id="frag")
        await watcher.close()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (frame(0x1, b'{"event":"ping"}', masked=False), 1002),
        (frame(0x1, b"\xff"), 1007),
        (frame(0x2, b"x" * 5000), 1009),  # over ws_max_size, below the object limits
        (frame(0x1, b"not json"), 1008),  # an error object, then the close
    ],
    ids=["unmasked", "not-utf8", "too-large", "not-an-object"],
)
async def test_a_bad_frame_closes_with_its_code_and_is_announced(
    data: bytes, code: int, settings: GatewaySettings
) -> None:
    async with gateway(settings, ws_max_size=4096) as server:
        watcher = await WsClient.open(_url(server))
        async with _subscribed(server, "bad") as (reader, writer):
            await watcher.expect("routing/subscribe/notify", routing_id="bad")
            writer.write(data)
            if code == 1008:  # the client answers the close: the TCP close follows it
                closing = asyncio.create_task(_closed_with(reader))
                await asyncio.sleep(0)
                writer.write(frame(0x8, struct.pack("!H", 1008)))
                assert await closing == code
            else:
                assert await _closed_with(reader) == code
            await watcher.expect("routing/disconnect", routing_id="bad")
        await watcher.send({"event": "ping", "id": "p"})  # the gateway serves on
        await watcher.expect("pong", in_reply_to="p")
        await watcher.close()


async def test_admission_by_key_in_the_query_or_a_header(settings: GatewaySettings) -> None:
    settings = replace(settings, api_keys=(ApiKey("ws", "ws-secret-key"),))
    async with gateway(settings) as server:
        with pytest.raises(InvalidStatus) as info:
            await connect(_url(server))
        assert info.value.response.status_code == 403
        for client in (
            await WsClient.open(_url(server, "?key=ws-secret-key")),
            WsClient(
                await connect(_url(server), additional_headers={"X-API-Key": "ws-secret-key"})
            ),
        ):
            await client.send({"event": "ping", "id": "p"})
            await client.expect("pong", in_reply_to="p")
            await client.close()


async def test_pings_from_the_wheel_keep_an_answering_client(settings: GatewaySettings) -> None:
    # the gateway's settings set the interval (25 s by default: no ping would come in time)
    settings = replace(settings, ws_ping_interval=0.2, ws_ping_timeout=0.5)
    async with gateway(settings) as server:
        watcher = await WsClient.open(_url(server))
        async with _subscribed(server, "alive") as (reader, writer):
            pings = []
            while len(pings) < 4:  # over twice the pong timeout, each ping answered
                opcode, payload = await _read_frame(reader)
                if opcode == 0x89:
                    pings.append(payload)
                    writer.write(frame(0xA, payload))
            assert len(set(pings)) == 4
            await watcher.send({"event": "ping", "id": "p"})
            await watcher.expect("pong", in_reply_to="p")
            assert not any(
                obj.event == "routing/disconnect" for obj in await _drain(watcher)
            )  # it is still there
        await watcher.expect("routing/disconnect", routing_id="alive")
        await watcher.close()


async def test_a_client_that_stops_answering_pings_is_dropped_at_the_set_timeout(
    settings: GatewaySettings,
) -> None:
    settings = replace(settings, ws_ping_interval=0.2, ws_ping_timeout=0.3)
    async with gateway(settings) as server:
        watcher = await WsClient.open(_url(server))
        async with _subscribed(server, "hung") as (reader, writer):
            await watcher.expect("routing/subscribe/notify", routing_id="hung")
            # pinged (within 5 s: the default 25 s would not be), it never answers: 1011
            while (await _read_frame(reader))[0] != 0x89:
                pass  # its subscribe reply
            assert await _closed_with(reader) == 1011
            await watcher.expect("routing/disconnect", routing_id="hung")
        await watcher.close()


async def _drain(client: WsClient) -> list[Any]:
    await client.send({"event": "ping", "id": "drain"})
    seen = []
    while (obj := await client.recv()).event != "pong":
        seen.append(obj)
    return seen


async def test_a_server_shutdown_says_1012(settings: GatewaySettings) -> None:
    async with gateway(settings) as server:
        client = await WsClient.open(_url(server))
        server.should_exit = True
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(WAIT):
                while True:
                    await client.ws.recv()
        assert client.ws.close_code == 1012


async def test_last_values_are_asked_for_through_the_lean_peer(settings: GatewaySettings) -> None:
    # gateway/websocket/ws_last.py sends through the client's peer: here the LeanWebSocket
    async with gateway(settings) as server:
        client = await WsClient.open(_url(server), receive="all", types=["bus/boiler.*"], last=True)
        error = await client.expect("routing/last/error")
        assert "journal" in error.metadata["message"]
        await client.send({"event": "ping", "id": "p"})  # and it goes on as usual
        await client.expect("pong", in_reply_to="p")
        await client.close()


async def test_wss_goes_the_lean_way_too(settings: GatewaySettings, tmp_path: Path) -> None:
    # a gateway with tls_cert serves wss://: the TLS transport is handed over the same way
    pki = Pki(tmp_path)
    settings = replace(settings, tls_cert=str(pki.cert), tls_key=str(pki.key))
    async with gateway(settings) as server:
        before = set(server.server_state.connections)
        url = f"wss://127.0.0.1:{server.config.port}/ws"
        client = WsClient(await connect(url, ssl=pki.client()))
        [protocol] = set(server.server_state.connections) - before
        assert isinstance(protocol, LeanWebSocket)
        await client.send({"event": "routing/subscribe", "id": "s"})
        await client.expect("routing/subscribe/reply")
        await client.send({"event": "ping", "id": "p"}, b"x" * 100_000)  # many TLS records
        await client.expect("pong", in_reply_to="p")
        await client.close()


async def test_a_join_leaves_no_http_protocol_to_the_garbage_collector(
    settings: GatewaySettings,
) -> None:
    # the HTTP protocol and httptools' parser held each other: every join left a cycle of two
    # dozen objects that only a collection freed
    async with gateway(settings) as server:
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            clients = [await WsClient.open(_url(server)) for _ in range(5)]
            gc.collect()
            left = [o for o in gc.garbage if isinstance(o, HeaderDeadlineProtocol)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert left == []
        for client in clients:
            await client.close()
