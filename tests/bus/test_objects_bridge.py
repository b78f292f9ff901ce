"""One bus, not two: Object System clients and native bus clients see each other.

Real broker, real services and clients, the object server on a loopback port, and a Node.js
client speaking the Object System wire with its built-in ``net`` module.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.service import Request, Service, ServiceError
from bus.broker import Broker
from bus.errors import ConfigError
from bus.frame.enums import Encoding
from bus.message.message import Message
from bus.objects.bridge import (
    BRIDGE_ID,
    Bridge,
    bus_type_of,
    event_to_object,
    object_to_event,
)
from bus.objects.bridging import open_bridge, start_bridge
from bus.objects.codec import BusinessObject
from bus.objects.router import Router
from bus.objects.tcp import ObjectServer
from tests.bus.objclient import ObjClient
from tests.bus.objectoplex_library import sent_by_library
from tests.conftest import OFFICES, BrokerProcess, MakeBroker, MakeClient
from tests.docexamples import examples

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

NODE_CLIENT = Path(__file__).with_name("node_os_client.js")


def _calc_service(client: Client, seen: list[Message]) -> Service:
    svc = Service(client, "calc", heartbeat_interval=0.5)

    @svc.command("add")
    async def add(req: Request) -> dict[str, Any]:
        seen.append(req.message)
        return {"sum": req["a"] + req["b"]}

    @svc.command("fail")
    async def fail(req: Request) -> dict[str, Any]:
        raise ServiceError("no such luck", 418)

    @svc.command("count")
    async def count(req: Request) -> AsyncIterator[dict[str, Any]]:
        for i in range(int(req["n"])):
            yield {"i": i}

    return svc


@pytest.fixture
async def objects(make_client: MakeClient) -> AsyncIterator[ObjectServer]:
    """An object server bridged to the ``broker`` fixture."""
    server = ObjectServer(Router("broker-os"))
    await server.start(port=0)
    bridge = Bridge(server, await make_client(name="bob"))
    await bridge.start()
    yield server
    await bridge.stop()
    await server.stop()


@pytest.fixture
async def calc(make_client: MakeClient) -> AsyncIterator[list[Message]]:
    """The ``calc`` service running on the bus; yields the requests it saw."""
    seen: list[Message] = []
    svc = _calc_service(await make_client(name="carol"), seen)
    await svc.start()
    yield seen
    await svc.stop()


async def _discover(client: ObjClient, name: str, present: bool = True) -> list[dict[str, Any]]:
    """Ask for discovery until ``name`` is (or is no longer) listed."""
    for attempt in range(100):
        await client.send({"event": "services/discovery", "id": f"d{attempt}"})
        reply = await client.expect("services/discovery/reply", in_reply_to=f"d{attempt}")
        services: list[dict[str, Any]] = reply.metadata["services"]
        if any(s["name"] == name for s in services) is present:
            return services
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never {'appeared' if present else 'left'}")


async def _call(client: ObjClient, ident: str, **fields: Any) -> list[BusinessObject]:
    """Send a services/request and collect every services/reply to it (until one without more)."""
    payload = fields.pop("payload", None)
    metadata = {"event": "services/request", "id": ident, **fields}
    if payload is not None:
        await client.send({**metadata, "type": "application/json"}, orjson.dumps(payload))
    else:
        await client.send(metadata)
    replies = []
    while True:
        reply = await client.expect("services/reply", in_reply_to=ident)
        replies.append(reply)
        if not reply.metadata.get("more"):
            return replies


def test_doc_example_of_event_mapping() -> None:
    [example] = [e for e in examples("bridge") if e.id == "event"]
    message = Message.event(example.body["event"], orjson.loads(example.body["pld"]))
    obj = event_to_object(message)
    assert {k: v for k, v in obj.metadata.items() if k != "id"} == orjson.loads(
        example.body["object"]
    )
    assert orjson.loads(obj.payload) == orjson.loads(example.body["payload"])
    back = object_to_event(BusinessObject(obj.metadata, obj.payload))
    assert back is not None and back.grp == example.body["event"]


async def test_doc_example_of_request_mapping(objects: ObjectServer, calc: list[Message]) -> None:
    [example] = [e for e in examples("bridge") if e.id == "request"]
    client = await ObjClient.open(objects.port, receive_mode="no_echo")
    await _discover(client, "calc")
    await client.send(orjson.loads(example.body["request"]), example.body["payload"].encode())
    reply = await client.expect("services/reply")
    wanted = orjson.loads(example.body["reply"])
    assert {k: reply.metadata[k] for k in wanted} == wanted
    assert orjson.loads(reply.payload) == orjson.loads(example.body["answer"])
    await client.close()


async def test_doc_example_of_a_stream(objects: ObjectServer, calc: list[Message]) -> None:
    [example] = [e for e in examples("bridge") if e.id == "stream"]
    client = await ObjClient.open(objects.port, receive_mode="no_echo")
    await _discover(client, "calc")
    request = orjson.loads(example.body["request"])
    replies = await _call(
        client, request.pop("id"), payload=orjson.loads(example.body["payload"]), **request
    )
    decoder = json.JSONDecoder()
    for line, reply in zip(example.body["replies"].splitlines(), replies, strict=True):
        wanted, end = decoder.raw_decode(line)
        assert {k: reply.metadata.get(k) for k in wanted} == wanted
        payload = line[end:].strip()
        assert (orjson.loads(reply.payload) if reply.payload else None) == (
            orjson.loads(payload) if payload else None
        )
    await client.close()


async def test_doc_example_of_heartbeats_in_discovery(
    objects: ObjectServer, calc: list[Message]
) -> None:
    [example] = [e for e in examples("bridge") if e.id == "heartbeat"]
    client = await ObjClient.open(objects.port, receive_mode="no_echo")
    await _discover(client, example.body["heartbeat"])
    await client.send(orjson.loads(example.body["request"]))
    reply = await client.expect("services/discovery/reply", in_reply_to="d1")
    wanted = orjson.loads(example.body["reply"])
    assert {k: reply.metadata.get(k) for k in wanted} == wanted
    await client.close()


def test_event_mapping_both_ways() -> None:
    obj = event_to_object(Message.event("sensor.temp", {"c": 18}))
    assert obj.type == "bus/sensor.temp" and orjson.loads(obj.payload) == {"c": 18}
    back = object_to_event(BusinessObject({"type": "bus/sensor.temp"}, b'{"c":18}'))
    assert back is not None and back.grp == "sensor.temp" and back.payload.to_dict() == {"c": 18}
    assert object_to_event(BusinessObject({"type": "bus/x.y"}, b"[1]")) is None
    assert object_to_event(BusinessObject({"type": "text/plain"}, b"{}")) is None
    assert object_to_event(BusinessObject({"event": "e", "type": "bus/x.y"}, b"{}")) is None


async def test_object_request_reaches_native_service_as_json_rqs(
    objects: ObjectServer, calc: list[Message]
) -> None:
    client = await ObjClient.open(objects.port, receive_mode="no_echo")
    await _discover(client, "calc")
    [reply] = await _call(client, "r1", name="calc", request="add", payload={"a": 2, "b": 3})
    assert reply.metadata["to"] == client.routing_id
    assert reply.metadata["name"] == "calc" and reply.type == "application/json"
    assert orjson.loads(reply.payload) == {"sum": 5}
    assert reply.route[0] == BRIDGE_ID
    assert calc[-1].enc is Encoding.JSON  # the service saw an RQS that travelled as JSON
    # arguments may also come in the metadata
    [reply] = await _call(client, "r2", name="calc", request="add", args={"a": 1, "b": 1})
    assert orjson.loads(reply.payload) == {"sum": 2}
    await client.close()


async def test_nak_stream_and_unknown_names(objects: ObjectServer, calc: list[Message]) -> None:
    client = await ObjClient.open(objects.port)
    await _discover(client, "calc")
    [nak] = await _call(client, "f", name="calc", request="fail")
    assert nak.metadata["error"] == "no such luck" and nak.metadata["rcd"] == 418
    replies = await _call(client, "c", name="calc", request="count", payload={"n": 3})
    data = [r for r in replies if r.payload]
    assert [orjson.loads(r.payload) for r in data] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [r.metadata.get("more", False) for r in data[:2]] == [True, True]
    assert not replies[-1].metadata.get("more")  # the stream is over
    for marker in replies[3:]:  # a service that closes its stream with Flag.END
        assert marker.metadata["end"] is True and "type" not in marker.metadata
    [none] = await _call(client, "u", name="nobody-here", request="x")
    assert none.metadata["rcd"] == 503
    [bad] = await _call(client, "b", name="calc")  # no command
    assert bad.metadata["rcd"] == 400
    await client.close()


async def test_heartbeats_show_in_discovery_and_leave_with_the_service(
    objects: ObjectServer, make_client: MakeClient
) -> None:
    client = await ObjClient.open(objects.port)
    svc = _calc_service(await make_client(name="carol"), [])
    await svc.start()
    services = await _discover(client, "calc")
    assert {"name": "calc", "routing-id": BRIDGE_ID} in services
    await svc.stop()
    await _discover(client, "calc", present=False)
    await client.close()


async def test_native_events_reach_matching_content_types(
    objects: ObjectServer, client: Client
) -> None:
    sensors = await ObjClient.open(objects.port, types=["bus/sensor.*"])
    texts = await ObjClient.open(objects.port, types=["text/*"])
    await client.publish("sensor.temp", {"c": 18.5})
    await client.publish("other.thing", {"x": 1})
    got = await sensors.recv()
    while got is not None and got.event is not None:
        got = await sensors.recv()
    assert got is not None and got.type == "bus/sensor.temp"
    assert orjson.loads(got.payload) == {"c": 18.5}
    await sensors.send({"event": "end"})
    for receiver in (texts, sensors):
        seen = []
        while (obj := await receiver.recv()) is not None and obj.event != "end":
            seen.append(obj.type)
        assert "bus/other.thing" not in seen
    await sensors.close()
    await texts.close()


async def test_object_publications_reach_native_subscribers_once(
    objects: ObjectServer, client: Client
) -> None:
    sub = await client.subscribe("chat.*")
    watcher = await ObjClient.open(objects.port, types=["bus/*"])
    sender = await ObjClient.open(objects.port, receive_mode="no_echo")
    await sender.send({"type": "bus/chat.line"}, b'{"text":"hei"}')
    message = await sub.get(timeout=5)
    assert message.grp == "chat.line" and message.payload.to_dict() == {"text": "hei"}
    await sender.send({"event": "end"})
    seen = []
    while (obj := await watcher.recv()) is not None and obj.event != "end":
        if obj.event is None:
            seen.append(obj.type)
    assert seen == ["bus/chat.line"]  # not a second copy through the bus
    await watcher.close()
    await sender.close()


async def _content(receiver: ObjClient, until: str = "end") -> list[BusinessObject]:
    """Content objects received before the event ``until``."""
    seen = []
    while (obj := await receiver.recv()) is not None and obj.event != until:
        if obj.event is None:
            seen.append(obj)
    return seen


async def test_objectoplexs_own_library_publishes_a_bus_type_whole_with_bus_type(
    objects: ObjectServer, client: Client
) -> None:
    """Issue 32 item 2: the library cuts ``bus/alarm.oplex`` to ``bus/alarm``; with ``bus-type``
    the event still reaches the bus as ``alarm.oplex`` (PROTOCOL.md 7.2)."""
    sub = await client.subscribe("alarm")
    watcher = await ObjClient.open(objects.port, types=["bus/alarm.*"])  # by content type
    library = await ObjClient.open(objects.port, subscriptions=["bus/*"], echo=True)
    payload = b'{"room":"kitchen"}'
    sent = sent_by_library({"type": "bus/alarm.oplex", "bus-type": "alarm.oplex"}, payload)
    assert sent["type"] == "bus/alarm"  # the cut, as the library makes it
    await library.send(sent, payload)
    message = await sub.get(timeout=5)
    assert message.grp == "alarm.oplex" and message.payload.to_dict() == {"room": "kitchen"}
    # Without bus-type all the bus can know is the cut type (what issue 32 found).
    await library.send(sent_by_library({"type": "bus/alarm.oplex"}, b'{"n":2}'), b'{"n":2}')
    assert (await sub.get(timeout=5)).grp == "alarm"
    # Clients that choose bus types by content type get it as bus/alarm.oplex, once.
    await library.send({"event": "end"})
    got = await _content(watcher)
    assert [(o.type, o.metadata["bus-type"]) for o in got] == [("bus/alarm.oplex", "alarm.oplex")]
    assert orjson.loads(got[0].payload) == {"room": "kitchen"}
    await watcher.close()
    await library.close()


async def test_objectoplexs_own_library_reads_a_bus_events_type_whole(
    objects: ObjectServer, client: Client
) -> None:
    library = await ObjClient.open(objects.port, subscriptions=["bus/*"], echo=True)
    await client.publish("sensor.temp", {"c": 18.5})
    obj = await _first_content(library)
    kept = sent_by_library(obj.metadata, obj.payload)  # read, then passed on by the library
    assert kept["type"] == "bus/sensor" and kept["bus-type"] == "sensor.temp"
    assert bus_type_of(BusinessObject(kept, obj.payload)) == "sensor.temp"
    await library.close()


async def _first_content(receiver: ObjClient) -> BusinessObject:
    while (obj := await receiver.recv()) is not None:
        if obj.event is None:
            return obj
    raise AssertionError("closed before a content object came")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def broker_with_objects() -> Iterator[Callable[[], BrokerProcess]]:
    """Start ``busgate broker --open --objects-port N`` child processes."""
    started: list[BrokerProcess] = []

    def start() -> BrokerProcess:
        process = BrokerProcess("--open", "--objects-port", str(_free_port()))
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
async def test_node_client_calls_a_python_service_through_the_broker(
    broker_with_objects: Callable[[], BrokerProcess], make_client: MakeClient
) -> None:
    process = broker_with_objects()
    objects_port = int(process.extra[-1])
    svc = _calc_service(await make_client(process.url, name=None), [])
    await svc.start()
    try:
        result = await asyncio.to_thread(
            subprocess.run,
            ["node", str(NODE_CLIENT), "127.0.0.1", str(objects_port), "calc", "add"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        await svc.stop()
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    subscribed, discovered, reply = lines
    assert subscribed["event"] == "routing/subscribe/reply"
    assert "calc" in [s["name"] for s in discovered["services"]]
    assert reply["event"] == "services/reply" and reply["payload"] == {"sum": 42}


async def test_broker_cli_runs_the_bridged_listener(
    broker_with_objects: Callable[[], BrokerProcess], make_client: MakeClient
) -> None:
    process = broker_with_objects()
    objects_port = int(process.extra[-1])
    client = await ObjClient.open(objects_port)
    bus_client = await make_client(process.url, name=None)
    await bus_client.publish("sensor.cli", {"ok": True})
    obj = await client.recv()
    while obj is not None and obj.event is not None:
        obj = await client.recv()
    assert obj is not None and obj.type == "bus/sensor.cli"
    await client.close()


async def test_start_bridge_takes_its_keepalive_policy_from_the_environment(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUSGATE_OBJECTS_CLIENT_KEEPALIVE", "require")
    monkeypatch.setenv("BUSGATE_OBJECTS_KEEPALIVE_INTERVAL", "0.2")
    port = _free_port()
    stop = await start_bridge(bus_url, "127.0.0.1", port)
    try:
        silent = await ObjClient.open(port)  # answers no ping, sends nothing more
        seen = []
        while (obj := await silent.recv()) is not None:
            seen.append(obj.event)
        assert "ping" in seen  # asked, then closed by the server
        await silent.close()
    finally:
        await stop()
    for name, value in (("CLIENT_KEEPALIVE", "sometimes"), ("KEEPALIVE_INTERVAL", "-1")):
        monkeypatch.setenv(f"BUSGATE_OBJECTS_{name}", value)
        with pytest.raises(ConfigError, match=f"BUSGATE_OBJECTS_{name}"):
            await start_bridge(bus_url, "127.0.0.1", _free_port())
        monkeypatch.delenv(f"BUSGATE_OBJECTS_{name}")


async def test_start_bridge_reads_the_objectoplex_ping_switch(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUSGATE_OBJECTS_PING_BEFORE_SUBSCRIBE", "ignore")
    running = await open_bridge(bus_url, "127.0.0.1", 0)
    client = await ObjClient.open(running.server.port, subscribe=False)
    try:
        await client.send({"event": "ping", "id": "early"})
        await client.send({"event": "routing/subscribe", "id": "s"})
        first = await client.expect_any(lambda o: o.metadata.get("in-reply-to") in ("early", "s"))
        assert first.event == "routing/subscribe/reply"  # the early ping got nothing
    finally:
        await client.close()
        await running.stop()
    monkeypatch.setenv("BUSGATE_OBJECTS_PING_BEFORE_SUBSCRIBE", "never")
    with pytest.raises(ConfigError, match="BUSGATE_OBJECTS_PING_BEFORE_SUBSCRIBE"):
        await open_bridge(bus_url, "127.0.0.1", 0)


async def test_the_bridge_logs_the_bus_it_joins_without_the_password(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 item 8: ``BUSGATE_OBJECTS_BUS_URL`` holds a secret (for brokers without open
    mode); the log names that URL, masked, and not the one it was overridden with."""
    caplog.set_level(logging.INFO, logger="bus.objects.bridge")
    url = f"bus://bob:{OFFICES['bob']}@127.0.0.1:{broker.port}"
    monkeypatch.setenv("BUSGATE_OBJECTS_BUS_URL", url)
    running = await open_bridge("bus://127.0.0.1:1", "127.0.0.1", None)
    await running.stop()
    assert f"bridged to bus://bob:***@127.0.0.1:{broker.port}" in caplog.text
    assert OFFICES["bob"] not in caplog.text


async def test_a_bridge_whose_bus_is_away_answers_503_and_bridges_once_it_comes(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 item 9: a bridge that could not reach its bus at start gave up for good, and
    Object System clients got silence on services/request. It answers rcd 503 saying why,
    says so in the log, and keeps trying until the bus is there."""
    caplog.set_level(logging.INFO, logger="bus.objects.bridge")
    port = _free_port()
    monkeypatch.setenv("BUSGATE_OBJECTS_BUS_URL", f"bus://127.0.0.1:{port}")
    running = await open_bridge("bus://127.0.0.1:1", "127.0.0.1", 0)
    try:
        assert running.bridge is None
        client = await ObjClient.open(running.server.port, receive_mode="no_echo")
        [refused] = await _call(client, "r1", name="calc", request="add", payload={"a": 1, "b": 2})
        assert refused.metadata["rcd"] == 503
        assert "not bridged to the bus" in refused.metadata["error"]
        assert "is not bridged to the bus at" in caplog.text
        broker = await make_broker(port=port, open=True)  # the bus comes
        service_client = await connect(f"bus://127.0.0.1:{broker.port}")
        seen: list[Message] = []
        svc = _calc_service(service_client, seen)
        await svc.start()
        async with asyncio.timeout(20):  # retried within 5 s of each failure
            while running.bridge is None:
                await asyncio.sleep(0.1)
        await _discover(client, "calc")
        [reply] = await _call(client, "r2", name="calc", request="add", payload={"a": 1, "b": 2})
        assert orjson.loads(reply.payload) == {"sum": 3}
        assert f"bridged to bus://127.0.0.1:{port}" in caplog.text
        await client.close()
        await svc.stop()
        await service_client.close()
    finally:
        await running.stop()
