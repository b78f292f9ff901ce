"""The Object System over WebSocket: real ``websockets`` clients against gateways under uvicorn.

Two gateways (the real app of ``gateway.app``) link to the broker's object server, so WebSocket
clients of either, TCP clients of the broker's server and native bus services form one network.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from bus.asyncio.client import Client
from bus.asyncio.service import Request, Service
from bus.errors import ConfigError
from bus.objects.bridge import Bridge
from bus.objects.codec import BusinessObject, decode_object, encode_object
from bus.objects.router import Router
from bus.objects.tcp import ObjectServer
from gateway.app import create_app
from gateway.process.cli import make_server, uvicorn_config
from gateway.process.http_protocol import HeaderDeadlineProtocol
from gateway.process.settings import ApiKey
from gateway.websocket.ws import DEFAULT_MAX_QUEUE, ObjectsEndpoint, _WebSocketPeer, create_route
from gateway.websocket.ws_frames import FrameWritingProtocol
from tests.bus.objclient import LOCAL, ObjClient
from tests.conftest import MakeClient
from tests.gateway.conftest import base_settings, close_writer, free_port, raw_socket

pytestmark = pytest.mark.loops  # the gateway runs on uvloop: each test on both loops

WAIT = 5.0


class WsClient:
    """An Object System client over a real WebSocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.routing_id = ""

    @classmethod
    async def open(cls, url: str, **subscribe: Any) -> WsClient:
        client = cls(await connect(url))
        if subscribe.pop("subscribe", True):
            await client.send({"event": "routing/subscribe", "id": "s", **subscribe})
            reply = await client.expect("routing/subscribe/reply")
            client.routing_id = reply.metadata["routing-id"]
        return client

    async def send(self, metadata: dict[str, Any], payload: bytes = b"") -> None:
        if payload:
            await self.ws.send(encode_object(BusinessObject(metadata, payload)))
        else:
            await self.ws.send(orjson.dumps(metadata).decode())

    async def recv(self) -> BusinessObject:
        message = await asyncio.wait_for(self.ws.recv(), WAIT)
        if isinstance(message, str):
            assert "\x00" not in message
            return BusinessObject(orjson.loads(message))
        obj = decode_object(message)
        assert obj.payload, "an object without payload must come as text"
        return obj

    async def expect(self, event: str, **fields: Any) -> BusinessObject:
        wanted = {k.replace("_", "-"): v for k, v in fields.items()}
        while True:
            obj = await self.recv()
            if obj.event == event and all(obj.metadata.get(k) == v for k, v in wanted.items()):
                return obj

    async def close(self) -> None:
        await self.ws.close()


@dataclass
class Net:
    objects: ObjectServer
    gateways: list[str]  # ws:// URLs


async def _serve(
    app: Starlette, ws: Any = "auto"
) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    """``app`` under uvicorn; ``ws`` ``"lean"``: the gateway's HTTP protocol, which answers
    ``/ws`` itself (gateway/websocket/lean.py)."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        http=HeaderDeadlineProtocol if ws == "lean" else "auto",
        ws=FrameWritingProtocol if ws == "lean" else ws,
        ws_per_message_deflate=ws == "auto",  # the gateway's frames need it off (its default)
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(15):
        while not server.started:
            await asyncio.sleep(0.01)
    return server, task, port


@pytest.fixture(params=["lean", "asgi"])
async def net(
    make_client: MakeClient,
    bus_url: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Net]:
    """The broker's bridged object server and two gateways linked to it, under uvicorn: as the
    gateway runs (/ws without the ASGI stack, gateway/websocket/lean.py) or under uvicorn's
    WebSocket protocol with permessage-deflate (every object sent through ASGI). The gateway's
    frame-writing protocol (its fallback: ws_lean off, a JWKS refresher) keeps the slow-client
    tests below and tests/gateway/websocket/test_ws_frames.py; each of these ran on it too
    before /ws went lean."""
    ws = "lean" if request.param == "lean" else "auto"
    objects = ObjectServer(Router("broker-os"), server_peers=LOCAL)  # the gateways link in
    await objects.start(port=0)
    bridge = Bridge(objects, await make_client(name="bob"))
    await bridge.start()
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", f"127.0.0.1:{objects.port}")
    servers = [await _serve(create_app(base_settings(bus_url=bus_url)), ws) for _ in range(2)]
    yield Net(objects, [f"ws://127.0.0.1:{port}/ws" for _, _, port in servers])
    for server, task, _ in servers:
        server.should_exit = True
        await asyncio.wait_for(task, 20)
    await bridge.stop()
    await objects.stop()


async def test_text_and_binary_objects_between_websocket_clients(net: Net) -> None:
    a = await WsClient.open(net.gateways[0], receive_mode="no_echo")
    b = await WsClient.open(net.gateways[0], types=["image/*"])
    await a.send({"type": "image/png"}, b"\x89PNG\x00\x01")
    while True:
        got = await b.recv()
        if got.event is None:
            break
    assert got.type == "image/png" and got.payload == b"\x89PNG\x00\x01"
    assert got.route[0] == a.routing_id
    await b.send({"event": "hi", "to": a.routing_id})
    assert (await a.expect("hi")).route[0] == b.routing_id
    await a.close()
    await b.close()


async def test_every_frame_length_and_a_burst_arrive_whole_and_in_order(net: Net) -> None:
    # Frames of 7-, 16- and 64-bit lengths (RFC 6455 5.2), then a burst that queues up and
    # leaves in few writes: all whole, in order, text and binary as sent.
    a = await WsClient.open(net.gateways[0], receive_mode="no_echo")
    b = await WsClient.open(net.gateways[0], receive_mode="no_echo")
    sizes = [1, 60, 100, 130, 1000, 65_000, 65_600, 200_000]
    for n, size in enumerate(sizes):
        await a.send({"type": "application/x-blob", "n": n}, bytes([n + 1]) * size)
    for n in range(500):
        await a.send({"event": "tick", "n": n})
    for n, size in enumerate(sizes):
        got = await b.recv()
        assert (got.metadata["n"], got.payload) == (n, bytes([n + 1]) * size)
    ticks = [(await b.recv()).metadata for _ in range(500)]
    assert [(t["event"], t["n"]) for t in ticks] == [("tick", n) for n in range(500)]
    await a.close()
    await b.close()


async def test_objects_and_disconnects_cross_gateways_and_tcp(net: Net) -> None:
    tcp = await ObjClient.open(net.objects.port, receive_mode="no_echo")
    far = await WsClient.open(net.gateways[1], receive_mode="no_echo")
    near = await WsClient.open(net.gateways[0], receive_mode="no_echo")
    rid = near.routing_id
    await far.expect("routing/subscribe/notify", routing_id=rid)
    await near.send({"event": "hello"})
    assert (await far.expect("hello")).route[0] == rid
    assert (await tcp.expect("hello")).route[0] == rid
    await tcp.send({"event": "to-far", "to": far.routing_id})
    await far.expect("to-far")
    await near.close()
    await far.expect("routing/disconnect", routing_id=rid)
    await tcp.expect("routing/disconnect", routing_id=rid)
    await far.close()
    await tcp.close()


async def test_websocket_client_calls_a_python_service(net: Net, make_client: MakeClient) -> None:
    svc = Service(await make_client(name="carol"), "greeter", heartbeat_interval=0.5)

    @svc.command("greet")
    async def greet(req: Request) -> dict[str, Any]:
        return {"text": f"hei {req['who']}"}

    await svc.start()
    client = await WsClient.open(net.gateways[1])
    for attempt in range(100):
        await client.send({"event": "services/discovery", "id": f"d{attempt}"})
        reply = await client.expect("services/discovery/reply", in_reply_to=f"d{attempt}")
        if any(s["name"] == "greeter" for s in reply.metadata["services"]):
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("greeter never showed in discovery")
    await client.send(
        {"event": "services/request", "id": "g", "name": "greeter", "request": "greet",
         "type": "application/json"},
        b'{"who":"maailma"}',
    )  # fmt: skip
    reply = await client.expect("services/reply", in_reply_to="g")
    assert orjson.loads(reply.payload) == {"text": "hei maailma"}
    await client.close()
    await svc.stop()


async def test_native_events_reach_websocket_subscribers(net: Net, client: Client) -> None:
    ws = await WsClient.open(net.gateways[0], types=["bus/sensor.*"])
    await client.publish("sensor.temp", {"c": 21})
    while True:
        obj = await ws.recv()
        if obj.event is None:
            break
    assert obj.type == "bus/sensor.temp" and orjson.loads(obj.payload) == {"c": 21}
    await ws.close()


@pytest.mark.parametrize(
    ("message", "code", "close_code"),
    [
        ("not json", "malformed", 1008),
        ('{"size":3}', "malformed", 1008),
        (b'{"type":"a/b","size":4}\x00abc', "malformed", 1008),
        ('{"pad":"' + "x" * 9000 + '"}', "limit", 1009),
        (b'{"type":"a/b","size":99999999}\x00abc', "limit", 1009),  # refused from `size`
    ],
)
async def test_bad_messages_get_an_error_then_a_close(
    net: Net, message: str | bytes, code: str, close_code: int
) -> None:
    bystander = await WsClient.open(net.gateways[0])
    bad = await WsClient.open(net.gateways[0])
    await bad.ws.send(message)
    error = await bad.expect("error")
    assert error.metadata["code"] == code
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(bad.ws.recv(), WAIT)
    assert bad.ws.close_code == close_code
    await bystander.expect("routing/disconnect", routing_id=bad.routing_id)
    await bystander.send({"event": "ping", "id": "p"})
    await bystander.expect("pong", in_reply_to="p")
    await bystander.close()


async def test_endpoint_in_a_minimal_app_without_a_link() -> None:
    app = Starlette(routes=[create_route(link_to="")])
    server, task, port = await _serve(app)
    try:
        a = await WsClient.open(f"ws://127.0.0.1:{port}/ws", receive_mode="events_only")
        b = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        await b.send({"type": "text/plain"}, b"content is not for a")
        await b.send({"event": "only-this"})
        first = await a.recv()
        while (first.event or "").startswith("routing/"):
            first = await a.recv()
        assert first.event == "only-this"
        for client in (a, b):
            await client.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


async def test_websocket_is_admitted_by_the_gateway_authentication(bus_url: str) -> None:
    settings = base_settings(bus_url=bus_url, api_keys=(ApiKey("ws", "ws-secret-key"),))
    server, task, port = await _serve(create_app(settings))
    url = f"ws://127.0.0.1:{port}/ws"
    try:
        with pytest.raises(InvalidStatus) as info:
            await connect(url)
        assert info.value.response.status_code == 403
        client = await WsClient.open(f"{url}?key=ws-secret-key")
        await client.send({"event": "ping", "id": "p"})
        await client.expect("pong", in_reply_to="p")
        await client.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def test_a_killed_websocket_client_is_announced(net: Net) -> None:
    watcher = await WsClient.open(net.gateways[1])
    doomed = await WsClient.open(net.gateways[0])
    rid = doomed.routing_id
    await watcher.expect("routing/subscribe/notify", routing_id=rid)
    doomed.ws.transport.abort()  # no close frame: as a crashed browser or a cut network
    await watcher.expect("routing/disconnect", routing_id=rid)
    await watcher.close()


@pytest.fixture
async def lone_gateway() -> AsyncIterator[str]:
    """A minimal app with only ``/ws`` (no link), under uvicorn; yields the ws:// URL."""
    server, task, port = await _serve(Starlette(routes=[create_route(link_to="")]))
    yield f"ws://127.0.0.1:{port}/ws"
    server.should_exit = True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(task, 20)


async def _seen_until_pong(client: WsClient) -> list[Any]:
    """Ping; the events and content types that arrived before the pong (notices left out)."""
    await client.send({"event": "ping", "id": "end"})
    seen = []
    while (obj := await client.recv()).event != "pong":
        if not (obj.event or "").startswith("routing/"):
            seen.append(obj.event or obj.type)
    return seen


@pytest.mark.parametrize(
    ("subscription", "expected"),
    [
        ({"receive_mode": "all"}, ["mine", "theirs", "text/plain", "image/png"]),
        ({"receive-mode": "no_echo"}, ["theirs", "text/plain", "image/png"]),
        ({"receive_mode": "events_only"}, ["theirs"]),
        ({"receive_mode": "none"}, []),
        ({"types": ["image/*"]}, ["mine", "theirs", "image/png"]),  # events pass types
        ({"types": "none"}, ["mine", "theirs"]),
        ({"subscriptions": ["*", "!image/*", "!@mine"]}, ["theirs", "text/plain"]),
        ({"subscriptions": ["#urgent", "@the*"]}, ["theirs", "image/png"]),
    ],
)
async def test_every_receive_mode_type_filter_and_rule_list_over_websocket(
    lone_gateway: str, subscription: dict[str, Any], expected: list[str]
) -> None:
    me = await WsClient.open(lone_gateway, **subscription)
    other = await WsClient.open(lone_gateway, receive_mode="all")
    await me.send({"event": "mine"})
    await other.send({"event": "theirs"})
    await other.send({"type": "text/plain"}, b"x")
    await other.send({"type": "image/png", "natures": ["urgent"]}, b"\x89PNG")
    await other.send({"event": "done"})
    await other.expect("done")  # its echo: everything of `other` has been routed
    seen = [item for item in await _seen_until_pong(me) if item != "done"]
    assert seen == expected
    await me.close()
    await other.close()


async def test_to_routing_ids_and_nothing_before_subscribe_over_websocket(
    lone_gateway: str,
) -> None:
    desk = await WsClient.open(lone_gateway, **{"routing-ids": ["desk-7"]})
    other = await WsClient.open(lone_gateway)
    late = await WsClient.open(lone_gateway, subscribe=False)
    await late.send({"event": "early", "id": "e"})
    refused = await late.expect("error")
    assert refused.metadata["code"] == "refused" and refused.metadata["in-reply-to"] == "e"
    await other.send({"event": "for-desk", "to": "desk-7"})
    await other.send({"event": "for-other", "to": other.routing_id})
    assert await _seen_until_pong(desk) == ["for-desk"]
    await late.send({"event": "routing/subscribe", "id": "s"})
    first = await late.recv()
    assert first.event == "routing/subscribe/reply" and first.metadata["in-reply-to"] == "s"
    for client in (desk, other, late):
        await client.close()


@pytest.mark.parametrize(
    "ws", ["lean", FrameWritingProtocol, "auto"], ids=["lean", "frames", "asgi"]
)
async def test_a_silent_websocket_client_is_found_by_ping_and_announced(ws: Any) -> None:
    """A client whose TCP stays up but that answers nothing (a hung tab): the WebSocket ping
    (the gateway's, from its timer wheel; or uvicorn's own) goes unanswered, the connection is
    closed and the others hear routing/disconnect."""
    app = Starlette(routes=[create_route(link_to="")])
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws_ping_interval=0.2,
        ws_ping_timeout=0.2, ws=FrameWritingProtocol if ws == "lean" else ws,
        http=HeaderDeadlineProtocol if ws == "lean" else "auto", ws_per_message_deflate=False,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        url = f"ws://127.0.0.1:{port}/ws"
        watcher = await WsClient.open(url)
        # the `websockets` client answers pings by itself: a raw socket speaking the handshake
        # and one frame, then reading nothing more, is a client that has gone silent
        async with raw_socket(port) as (reader, writer):
            writer.write(
                b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            assert b" 101 " in await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
            text = b'{"event":"routing/subscribe","routing-id":"hung-tab"}'
            mask = b"\x01\x02\x03\x04"
            masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(text))
            writer.write(bytes([0x81, 0x80 | len(text)]) + mask + masked)
            await watcher.expect("routing/subscribe/notify", routing_id="hung-tab")
            notice = await watcher.expect("routing/disconnect", routing_id="hung-tab")
            assert notice.metadata["routing-id"] == "hung-tab"
        await watcher.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


async def test_pings_come_from_the_wheel_and_a_client_that_answers_them_stays() -> None:
    # Issue 35: uvicorn armed two timers per connection per ping and built each ping through
    # the websockets library (most of the gateway's idle CPU at 20,000 clients); the
    # gateway's protocol pings from the loop's one wheel. A client that answers stays.
    app = Starlette(routes=[create_route(link_to="")])
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws_ping_interval=0.2,
        ws_ping_timeout=0.5, ws=FrameWritingProtocol, ws_per_message_deflate=False,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        watcher = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        before = set(server.server_state.connections)
        async with _raw_websocket(port, "answers") as (reader, writer):
            await _read_frame(reader)  # its subscribe reply
            pings = []
            while len(pings) < 5:  # five pings, each answered: over twice the pong timeout
                head = await asyncio.wait_for(reader.readexactly(2), WAIT)
                payload = await reader.readexactly(head[1] & 0x7F)
                if head[0] == 0x89:
                    pings.append(payload)
                    mask = b"\x05\x06\x07\x08"
                    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
                    writer.write(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
            assert len(set(pings)) == 5 and all(len(p) == 4 for p in pings)  # each its own
            [protocol] = set(server.server_state.connections) - before
            assert isinstance(protocol, FrameWritingProtocol)
            assert protocol.ping_timer is None and protocol.pong_timer is None  # no timers
            await watcher.send({"event": "ping", "id": "p"})
            await watcher.expect("pong", in_reply_to="p")
            assert protocol in server.server_state.connections  # still there
        notice = await watcher.expect("routing/disconnect", routing_id="answers")
        assert notice.metadata["routing-id"] == "answers"  # it left when it closed, not before
        await watcher.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


async def test_a_gateway_server_leaves_with_its_last_client_and_returns_with_the_next(
    net: Net,
) -> None:
    """PROTOCOL.md 6.8: the network sees the client go, then the gateway's server, then a new
    server (a new id) when the next client comes."""
    tcp = await ObjClient.open(net.objects.port)
    first = await WsClient.open(net.gateways[0])
    # the gateway's server linked before `first` subscribed: ask the broker's server for it
    await tcp.send({"event": "routing/neighbors", "id": "n1"})
    neighbors = (await tcp.expect("routing/neighbors/reply")).metadata["neighbors"]
    [gateway_id] = [n["routing-id"] for n in neighbors if n["role"] == "server"]
    await first.close()
    client_gone = await tcp.expect("routing/disconnect")
    assert client_gone.metadata["routing-id"] == first.routing_id
    server_gone = await tcp.expect("routing/disconnect")
    assert server_gone.metadata["routing-id"] == gateway_id
    second = await WsClient.open(net.gateways[0])
    back = await tcp.expect("routing/subscribe/notify", role="server")
    assert back.metadata["routing-id"] != gateway_id
    await second.send({"event": "hello-again"})
    assert (await tcp.expect("hello-again")).route[0] == second.routing_id
    await second.close()
    await tcp.close()


async def test_a_bad_link_address_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="host:port"):
        create_route(link_to="localhost:no-port")
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "localhost:99999")
    server, task, port = await _serve(Starlette(routes=[create_route()]))
    try:
        ws = await connect(f"ws://127.0.0.1:{port}/ws")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT)
        assert ws.close_code == 1011
        monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")  # fixed: the endpoint works again
        client = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        await client.send({"event": "ping", "id": "p"})
        await client.expect("pong", in_reply_to="p")
        await client.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


async def test_a_websocket_client_cannot_claim_the_server_role(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 19: on /ws the server role needs the gateway's explicit permission."""
    a = await WsClient.open(net.gateways[0])
    b = await WsClient.open(net.gateways[1])
    spy = await WsClient.open(net.gateways[0], subscribe=False)
    await spy.send({"event": "routing/subscribe", "id": "s", "role": "server", "routing-id": "x"})
    refused = await spy.expect("error", in_reply_to="s")
    assert refused.metadata["code"] == "forbidden"
    assert any("refused role: server" in r.getMessage() for r in caplog.records)
    await a.send({"event": "for-b", "to": b.routing_id})
    await b.expect("for-b")
    await spy.send({"event": "ping", "id": "after"})  # answered after anything routed to it
    seen = []
    while (obj := await spy.recv()).metadata.get("in-reply-to") != "after":
        seen.append(obj.event)
    assert "for-b" not in seen and not any(e and e.startswith("routing/") for e in seen)
    for client in (a, b, spy):
        await client.close()


async def test_the_gateway_may_allow_the_server_role_on_ws(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")  # no link: this gateway's server alone
    settings = base_settings(bus_url=bus_url, ws_allow_server_role=True)
    server, task, port = await _serve(create_app(settings))
    try:
        url = f"ws://127.0.0.1:{port}/ws"
        linked = await WsClient.open(url, role="server", **{"routing-id": "trusted"})
        plain = await WsClient.open(url)
        await plain.send({"event": "private", "to": "nobody-else"})
        assert (await linked.expect("private")).route[0] == plain.routing_id
        for client in (linked, plain):
            await client.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def test_the_gateway_links_to_every_configured_object_server(
    bus_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``--objects-link`` (repeatable); a link that is down is a WARNING, the others work."""
    servers = [ObjectServer(Router(name), server_peers=LOCAL) for name in ("one", "two")]
    for objects in servers:
        await objects.start(port=0)
    down = free_port()
    links = (*(f"127.0.0.1:{s.port}" for s in servers), f"127.0.0.1:{down}")
    settings = base_settings(bus_url=bus_url, objects_links=links)
    server, task, port = await _serve(create_app(settings))
    watchers = [await ObjClient.open(s.port) for s in servers]
    try:
        client = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        await client.send({"event": "everywhere"})
        for watcher in watchers:
            assert (await watcher.expect("everywhere")).route[0] == client.routing_id
        assert any(
            r.levelname == "WARNING" and f":{down} is down" in r.getMessage()
            for r in caplog.records
        )
        await client.close()
    finally:
        for watcher in watchers:
            await watcher.close()
        server.should_exit = True
        await asyncio.wait_for(task, 20)
        for objects in servers:
            await objects.stop()


async def _warned(caplog: pytest.LogCaptureFixture, text: str) -> None:
    async with asyncio.timeout(WAIT):
        while not any(text in r.getMessage() and r.levelname == "WARNING" for r in caplog.records):
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("link", ["dead", ""])
async def test_an_unlinked_gateway_answers_service_requests_with_503(
    link: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    target = f"127.0.0.1:{free_port()}" if link == "dead" else ""  # nobody listens there
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", target)
    caplog.set_level("WARNING", logger="busgate.gateway.ws")
    app = create_app(base_settings(bus_url=f"bus://127.0.0.1:{free_port()}"))
    server, task, port = await _serve(app)
    try:
        await _warned(caplog, "cannot be reached" if target else "no Object System link")
        client = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        provider = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        await client.send({"event": "services/request", "id": "q1", "name": "demo"})
        reply = await client.expect("services/reply", in_reply_to="q1")
        assert reply.metadata["rcd"] == 503
        assert (target or "no hub") in reply.metadata["error"]
        # A service that a client of this gateway registered is still reached without a link.
        await provider.send({"event": "services/register", "name": "local", "id": "r"})
        await provider.expect("services/register/reply")
        await client.send({"event": "services/request", "id": "q2", "name": "local"})
        asked = await provider.expect("services/request", id="q2")
        await provider.send({"event": "services/reply", "in-reply-to": "q2", "to": asked.route[0]})
        assert "rcd" not in (await client.expect("services/reply", in_reply_to="q2")).metadata
        for ws in (client, provider):
            await ws.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


async def test_a_gateway_whose_link_the_hub_refuses_logs_it_and_names_the_setting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 item 9: a hub that refuses the gateway's server role (neither its address nor
    its link secret allowed) was logged at the hub only, and the gateway's clients were told
    to set BUSGATE_OBJECTS_LINK, which was right already. The gateway logs the refusal and
    the 503 names what the hub needs."""
    monkeypatch.delenv("BUSGATE_OBJECTS_LINK_SECRET", raising=False)
    hub = ObjectServer(Router("hub"))  # allows no server peer: the gateway's link is refused
    await hub.start(port=0)
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", f"127.0.0.1:{hub.port}")
    caplog.set_level("WARNING")
    app = create_app(base_settings(bus_url=f"bus://127.0.0.1:{free_port()}"))
    server, task, port = await _serve(app)
    try:
        client = await WsClient.open(f"ws://127.0.0.1:{port}/ws")
        await client.send({"event": "services/request", "id": "q1", "name": "demo"})
        reply = await client.expect("services/reply", in_reply_to="q1")
        assert reply.metadata["rcd"] == 503
        error = reply.metadata["error"]
        assert f"127.0.0.1:{hub.port} refused its link" in error, error
        assert "--objects-server-peer" in error and "BUSGATE_OBJECTS_LINK_SECRET" in error
        assert "BUSGATE_OBJECTS_LINK sets it" not in error
        refusals = [
            r.getMessage()
            for r in caplog.records
            if r.name == "bus.objects.tcp" and "refused" in r.getMessage()
        ]
        assert refusals and "--objects-server-peer" in refusals[0], caplog.text
        await client.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)
        await hub.stop()


@contextlib.asynccontextmanager
async def _raw_websocket(
    port: int, routing_id: str
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A subscribed WebSocket client that then reads nothing (a small receive buffer); its
    socket closed on the way out, whatever happened."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    try:
        writer.write(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert b" 101 " in await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
        text = b'{"event":"routing/subscribe","routing-id":"' + routing_id.encode() + b'"}'
        mask = b"\x01\x02\x03\x04"
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(text))
        writer.write(bytes([0x81, 0x80 | len(text)]) + mask + masked)
        yield reader, writer
    finally:
        await close_writer(writer)


@pytest.mark.slow
@pytest.mark.parametrize(
    "ws", ["lean", FrameWritingProtocol, "auto"], ids=["lean", "frames", "asgi"]
)
async def test_a_websocket_client_that_reads_nothing_is_cut_within_the_bound(ws: Any) -> None:
    # Issue 12: it was logged "too slow" and then stayed open for minutes, its sender blocked
    # on a socket nobody read, and got 1011 only if it ever read again. Now the others hear
    # routing/disconnect at once and the socket is gone within the close handshake's bound.
    app = Starlette(routes=[WebSocketRoute("/ws", ObjectsEndpoint("", max_queue=1000))])
    server, task, port = await _serve(app, ws)
    try:
        url = f"ws://127.0.0.1:{port}/ws"
        watcher = await WsClient.open(url, receive_mode="events_only")
        async with _raw_websocket(port, "never-reads") as (reader, _):
            await watcher.expect("routing/subscribe/notify", routing_id="never-reads")
            publisher = await WsClient.open(url, receive_mode="none")
            started = time.monotonic()
            blob = b"x" * 8192
            for n in range(3000):  # 24 MB: far more than a queue of 1000 and the socket buffers
                await publisher.send({"type": "blob/data", "n": n}, blob)
            await watcher.expect("routing/disconnect", routing_id="never-reads")
            assert time.monotonic() - started < 15
            # the TCP connection itself is gone too (reset or closed), without our reading first
            async with asyncio.timeout(30):
                while True:
                    try:
                        if not await reader.read(1 << 20):
                            break
                    except ConnectionError:
                        break
            # the gateway serves on: the publisher still reaches the network
            await publisher.send({"event": "ping", "id": "p"})
            await publisher.expect("pong", in_reply_to="p")
        await publisher.close()
        await watcher.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


@pytest.mark.slow
async def test_a_websocket_client_that_never_reads_loses_its_connection_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 30 item 6: on the gateway as it runs (its own uvicorn settings, the frame-writing
    protocol), a client that stops reading was logged "too slow: closing" and its socket was
    still open minutes later: the close waited for a client that takes nothing, and a closing
    transport keeps the socket while it holds unsent bytes. The client never reads here, not
    even to see the close: the gateway must drop the connection itself."""
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")
    port = free_port()
    settings = replace(base_settings(), host="127.0.0.1", port=port, web_dir="")
    server = make_server(settings, "warning")
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        url = f"ws://127.0.0.1:{port}/ws"
        watcher = await WsClient.open(url, receive_mode="events_only")
        publisher = await WsClient.open(url, receive_mode="none")
        before = set(server.server_state.connections)
        async with _raw_websocket(port, "never-reads"):
            await watcher.expect("routing/subscribe/notify", routing_id="never-reads")
            [lazy] = set(server.server_state.connections) - before
            blob = b"x" * 200
            for n in range(3 * DEFAULT_MAX_QUEUE):  # more than its queue and the socket buffers
                await publisher.send({"type": "blob/data", "n": n}, blob)
            await watcher.expect("routing/disconnect", routing_id="never-reads")
            cut = time.monotonic()
            async with asyncio.timeout(30):  # PROTOCOL 6.8: within the close timeout (10 s)
                while lazy in server.server_state.connections:
                    await asyncio.sleep(0.1)
            assert time.monotonic() - cut < 15
            await publisher.send({"event": "ping", "id": "p"})  # the gateway serves on
            await publisher.expect("pong", in_reply_to="p")
        await publisher.close()
        await watcher.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


@pytest.mark.slow
async def test_a_client_that_leaves_a_ping_unanswered_loses_its_connection_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 30 item 6, the quiet way: a client that stops reading gets too little to overflow
    its queue, but no longer answers the WebSocket ping either. uvicorn then closes the
    transport, which keeps the socket while it holds unsent bytes: the gateway's protocol
    drops it within the close timeout."""
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")
    port = free_port()
    settings = replace(base_settings(), host="127.0.0.1", port=port, web_dir="")
    config = uvicorn_config(create_app(settings), settings, "warning")
    config.ws_ping_interval = config.ws_ping_timeout = 0.5
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        url = f"ws://127.0.0.1:{port}/ws"
        publisher = await WsClient.open(url, receive_mode="none")
        before = set(server.server_state.connections)
        async with _raw_websocket(port, "stops-reading"):
            async with asyncio.timeout(WAIT):
                while not set(server.server_state.connections) - before:
                    await asyncio.sleep(0.01)
            [quiet] = set(server.server_state.connections) - before
            blob = b"x" * 4096
            for n in range(2000):  # 8 MB: more than the socket buffers, less than its queue
                await publisher.send({"type": "blob/data", "n": n}, blob)
            async with asyncio.timeout(30):  # ping 0.5 s, pong due 0.5 s later, then 10 s
                while quiet in server.server_state.connections:
                    await asyncio.sleep(0.1)
        await publisher.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    """The payload of one unmasked server frame (RFC 6455 5.2)."""
    head = await asyncio.wait_for(reader.readexactly(2), WAIT)
    size = head[1] & 0x7F
    if size >= 126:
        size = int.from_bytes(await reader.readexactly(2 if size == 126 else 8), "big")
    return await reader.readexactly(size)


@pytest.mark.slow
@pytest.mark.parametrize(
    "ws", ["lean", FrameWritingProtocol, "auto"], ids=["lean", "frames", "asgi"]
)
async def test_a_websocket_client_behind_by_a_burst_is_not_cut(ws: Any) -> None:
    # A burst of 5000 objects to a client that reads none of them yet (far more than its
    # socket buffers and a queue of 1000 hold): it stays, and then gets every one, in order.
    assert DEFAULT_MAX_QUEUE > 5000
    app = Starlette(routes=[create_route(link_to="")])
    server, task, port = await _serve(app, ws)
    try:
        url = f"ws://127.0.0.1:{port}/ws"
        async with _raw_websocket(port, "behind") as (reader, _):
            await _read_frame(reader)  # its subscribe reply
            publisher = await WsClient.open(url, receive_mode="none")
            blob = b"x" * 200
            for n in range(5000):
                await publisher.send({"type": "blob/data", "n": n}, blob)
            await publisher.send({"event": "ping", "id": "p"})
            await publisher.expect("pong", in_reply_to="p")  # every blob was routed before it
            numbers: list[int] = []
            while len(numbers) < 5000:  # the notices of the publisher's arrival, then the blobs
                payload = await _read_frame(reader)
                if b"blob/data" in payload:
                    numbers.append(decode_object(payload).metadata["n"])
        assert numbers == list(range(5000))
        await publisher.close()
    finally:
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)


@pytest.mark.parametrize("compression", [False, True])
async def test_permessage_deflate_is_accepted_only_when_the_gateway_turns_it_on(
    bus_url: str, compression: bool
) -> None:
    # Browsers and websockets clients offer permessage-deflate; compressing every small object
    # for every subscriber cost the gateway a third of its CPU in a fan-out, so it is off
    # unless asked for (ws_compression, as Centrifugo's and NATS' websocket_compression).
    objects = ObjectServer(Router("broker-os"), server_peers=LOCAL)
    await objects.start(port=0)
    settings = base_settings(
        bus_url=bus_url, objects_links=(f"127.0.0.1:{objects.port}",), ws_compression=compression
    )
    server = make_server(replace(settings, port=free_port()), "warning")
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        url = f"ws://127.0.0.1:{server.config.port}/ws"
        async with connect(url) as ws:  # offers permessage-deflate, as browsers do
            negotiated = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
            client = WsClient(ws)
            await client.send({"event": "routing/subscribe", "id": "s"})
            await client.expect("routing/subscribe/reply")  # the link works either way
        assert ("permessage-deflate" in negotiated) is compression
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)
        await objects.stop()


class _GoneWebSocket:
    """A WebSocket whose client has gone: every send raises, as Starlette's does then."""

    scope: dict[str, Any] = {}

    async def send_bytes(self, data: bytes) -> None:
        raise WebSocketDisconnect(1006)

    async def send_text(self, data: str) -> None:
        raise WebSocketDisconnect(1006)


@pytest.mark.parametrize("payload", [b"", b"x"], ids=["text", "binary"])
async def test_a_sender_whose_client_has_gone_ends_without_an_error(payload: bytes) -> None:
    # Under uvicorn's WebSocket protocol (objects sent through ASGI), a client gone while it
    # was sent to ended the sender task with WebSocketDisconnect, which nobody retrieved:
    # asyncio logged "Task exception was never retrieved" whenever the garbage collector took
    # the task (seen after test_a_websocket_client_cannot_claim_the_server_role[asgi]).
    peer = _WebSocketPeer(cast(WebSocket, _GoneWebSocket()), max_queue=10)
    obj = BusinessObject({"event": "ping", "id": "p"}, payload)
    peer.send(encode_object(obj), obj)
    await asyncio.wait_for(peer.run_sender(), WAIT)  # it returns: no error left to retrieve


async def test_a_first_client_cancelled_while_the_link_settles_leaves_no_link_behind() -> None:
    # The first client's _acquire opens the gateway's object server and its links, then waits
    # (link_wait) for them to settle. Cancelled then (uvicorn cancels what outlives its
    # shutdown grace), it left that server unstored and never stopped: its link stayed
    # connected to the hub, a StreamWriter nobody would close, until the loop was gone.
    hub_side: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def silent_hub(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hub_side.append((reader, writer))  # answers nothing: the link never settles

    hub = await asyncio.start_server(silent_hub, "127.0.0.1", 0)
    try:
        endpoint = ObjectsEndpoint(f"127.0.0.1:{hub.sockets[0].getsockname()[1]}", link_wait=30)
        first = asyncio.create_task(endpoint._acquire({"type": "websocket"}))
        async with asyncio.timeout(WAIT):
            while not hub_side:
                await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        reader, _ = hub_side[0]
        async with asyncio.timeout(WAIT):  # the link is closed: the hub reads its end
            while await reader.read(65536):
                pass
        assert endpoint.server is None and not endpoint.links
    finally:
        for _, writer in hub_side:
            writer.close()
        hub.close()
        await hub.wait_closed()
