"""Objectoplex's own functional tests, rewritten against our listener, and two-server scenarios.

The first half is the black-box equivalent of the original's robot suite (``subscriptions``,
``ping``, ``legacy_ping``, ``client_registry``): the same subscriptions and objects, sent as the
original's client library builds them (every object has an ``id``; a rule list comes with
``"echo": true``), checked over a real socket. The second half links our server to a stand-in
for the original server (``tests/bus/objectoplex_like.py``), in both directions.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus.errors import ConfigError
from bus.objects.router import Router
from bus.objects.tcp import ObjectServer
from tests.bus.mopclient import MopClient
from tests.bus.objclient import LOCAL, ObjClient
from tests.bus.objectoplex_like import ObjectoplexLike
from tests.conftest import free_tcp_ports

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

WAIT = 5.0


def _msgid() -> str:
    return f"<{uuid.uuid4().hex}@robot>"


def _subscription(rules: list[str]) -> dict[str, Any]:
    """``common.make_subscription_object``: a rule list with echo, as the original client sends."""
    return {"event": "routing/subscribe", "subscriptions": rules, "echo": True, "id": _msgid()}


def _with_natures(nature: str) -> dict[str, Any]:
    """``make_object_with_natures``: no type, no event, ``natures`` a bare string."""
    return {"natures": nature, "id": _msgid(), "size": 0}


def _event(name: str, natures: list[str] | None = None) -> dict[str, Any]:
    return {"event": name, "natures": natures or [], "id": _msgid(), "size": 0}


def _text(natures: list[str] | None = None) -> tuple[dict[str, Any], bytes]:
    metadata = {"type": "text/plain; charset=UTF-8", "natures": natures or [], "id": _msgid()}
    return metadata, b"gonzo"


def _application() -> tuple[dict[str, Any], bytes]:
    return {"type": "application/octet-stream", "id": _msgid()}, b"gonzo"


@pytest.fixture
async def server() -> AsyncIterator[ObjectServer]:
    srv = ObjectServer(Router("ours"), server_peers=LOCAL)
    await srv.start(port=0)
    yield srv
    await srv.stop()


async def _connect(server: ObjectServer) -> ObjClient:
    return await ObjClient.open(server.port, subscribe=False)


async def _reply_for(client: ObjClient, sent: dict[str, Any]) -> dict[str, Any] | None:
    """``reply_for_object``: the first object whose in-reply-to is the sent id, within 1 s."""
    try:
        obj = await client.expect_any(lambda o: o.metadata.get("in-reply-to") == sent["id"], 1.0)
    except TimeoutError:
        return None
    return obj.metadata


async def _received(client: ObjClient, sent: dict[str, Any]) -> bool:
    """``should_receive_object``: did the object come back? A ping sent after it is answered
    after it was routed, so everything it could bring has arrived by the pong (no timed wait)."""
    marker = _event("ping")
    await client.send(marker)
    seen = False
    while True:
        obj = await client.recv(WAIT)
        assert obj is not None, "closed"
        seen = seen or obj.metadata.get("id") == sent["id"]
        if obj.metadata.get("in-reply-to") == marker["id"]:
            return seen


# subscriptions.robot --------------------------------------------------------------------------

HOFF = ["hasselhoff"]

# (rules, [(object maker, received?)]) for each test case of subscriptions.robot.
SUBSCRIPTION_CASES = {
    "Nothing": (
        [],
        [
            (lambda: (_with_natures("hasselhoff"), b""), False),
            (lambda: (_event("generic/event"), b""), False),
        ],
    ),
    "All": (["*"], [(lambda: (_with_natures("hasselhoff"), b""), True)]),
    "Only Events": (
        ["@*"],
        [
            (lambda: (_with_natures("hasselhoff"), b""), False),
            (lambda: (_event("generic/event"), b""), True),
        ],
    ),
    "Everything But Events": (
        ["*", "!@*"],
        [
            (lambda: (_with_natures("hasselhoff"), b""), True),
            (lambda: (_event("generic/event"), b""), False),
        ],
    ),
    "Texts And Events": (
        ["text/*", "@*"],
        [
            (lambda: (_with_natures("hasselhoff"), b""), False),
            (_application, False),
            (lambda: (_event("generic/event"), b""), True),
            (_text, True),
        ],
    ),
    "Texts Not Having Hasselhoff Nature And Events With Hasselhoff Nature": (
        ["text/*", "!#hasselhoff", "@*"],
        [
            (lambda: _text(HOFF), False),
            (lambda: (_event("generic/event", HOFF), b""), True),
            (_text, True),
            (lambda: (_event("generic/event"), b""), True),
        ],
    ),
    "Texts And Events Without Hasselhoff Natures": (
        ["text/*", "@*", "!#hasselhoff"],
        [
            (lambda: _text(HOFF), False),
            (lambda: (_event("generic/event", HOFF), b""), False),
            (_text, True),
            (lambda: (_event("generic/event"), b""), True),
        ],
    ),
    "Everything Except Texts Unless They Have Hasselhoff Nature": (
        ["*", "!text/*", "#hasselhoff"],
        [(_application, True), (_text, False), (lambda: _text(HOFF), True)],
    ),
}


@pytest.mark.parametrize("case", list(SUBSCRIPTION_CASES))
async def test_subscriptions_robot_case(server: ObjectServer, case: str) -> None:
    rules, steps = SUBSCRIPTION_CASES[case]
    client = await _connect(server)
    subscription = _subscription(rules)
    await client.send(subscription)
    assert await _reply_for(client, subscription) is not None
    for make, expected in steps:
        metadata, payload = make()
        await client.send(metadata, payload)
        assert await _received(client, metadata) is expected, (case, metadata)
    await client.close()


# ping.robot and legacy_ping.robot -------------------------------------------------------------


@pytest.mark.parametrize(
    "subscription",
    [
        _subscription([]),
        {"event": "routing/subscribe", "receive-mode": "all", "types": "all", "id": _msgid()},
    ],
    ids=["rules", "legacy"],
)
async def test_ping_robot_should_respond_to_ping(
    server: ObjectServer, subscription: dict[str, Any]
) -> None:
    client = await _connect(server)
    await client.send(subscription)
    assert await _reply_for(client, subscription) is not None
    ping = _event("ping")
    await client.send(ping)
    pong = await _reply_for(client, ping)
    assert pong is not None and pong["event"] == "pong"
    await client.close()


async def test_a_ping_before_subscription_is_answered(server: ObjectServer) -> None:
    """legacy_ping.robot expects no answer here (the original drops the ping silently); we answer
    ``pong``, as issue 14 asks and PROTOCOL.md 6.3 documents: busgate never drops silently."""
    client = await _connect(server)
    ping = _event("ping")
    await client.send(ping)
    pong = await _reply_for(client, ping)
    assert pong is not None and pong["event"] == "pong"
    await client.close()


@pytest.fixture
async def objectoplex_pings() -> AsyncIterator[ObjectServer]:
    """A server with the compatibility switch: pings before subscribing go unanswered."""
    srv = ObjectServer(Router("ours", ping_before_subscribe="ignore"), server_peers=LOCAL)
    await srv.start(port=0)
    yield srv
    await srv.stop()


async def test_legacy_ping_robot_passes_whole_under_the_switch(
    objectoplex_pings: ObjectServer,
) -> None:
    """Both cases of legacy_ping.robot (and ping.robot) on one server, in the suite's order: no
    reply to a ping before subscribing (the robot waits 1 s), then a pong once subscribed."""
    client = await _connect(objectoplex_pings)
    early = _event("ping")
    await client.send(early)
    assert await _reply_for(client, early) is None
    assert objectoplex_pings.router.ignored_pings == 1  # dropped, but counted
    legacy = {"event": "routing/subscribe", "receive-mode": "all", "types": "all", "id": _msgid()}
    await client.send(legacy)
    assert await _reply_for(client, legacy) is not None
    ping = _event("ping")
    await client.send(ping)
    pong = await _reply_for(client, ping)
    assert pong is not None and pong["event"] == "pong"
    await client.close()


def test_the_switch_takes_only_its_two_values() -> None:
    with pytest.raises(ConfigError, match="ping_before_subscribe"):
        Router(ping_before_subscribe="sometimes")


# client_registry.robot, with a registry written from the original's behaviour --------------


class Registry:
    """The original's ``clients`` service: joins, notices and departures, ``list``."""

    def __init__(self, client: ObjClient) -> None:
        self.client = client
        self.clients: dict[str, dict[str, Any]] = {}
        self.task = asyncio.create_task(self._run())

    @classmethod
    async def open(cls, port: int) -> Registry:
        client = await ObjClient.open(port, subscriptions=["@*"], echo=False)
        await client.send({"event": "services/register", "name": "clients", "id": _msgid()})
        return cls(client)

    async def _run(self) -> None:
        while (obj := await self.client.recv(3600)) is not None:
            meta = obj.metadata
            event = meta.get("event")
            if event == "routing/subscribe/notification":
                self._add(meta, meta.get("routing-id"))
            elif event == "routing/disconnect":
                self.clients.pop(meta.get("routing-id", ""), None)
            elif event == "services/request" and meta.get("name") == "clients":
                await self._request(meta)

    def _add(self, meta: dict[str, Any], routing_id: str | None) -> None:
        if routing_id is None:
            routing_id = meta["route"][0]
        self.clients[routing_id] = {
            "client": meta.get("client", "no-client"),
            "user": meta.get("user", "no-user"),
            "routing-id": routing_id,
            "server": meta.get("role") == "server",
        }

    async def _request(self, meta: dict[str, Any]) -> None:
        sender = meta["route"][0]
        reply: dict[str, Any] = {"event": "services/reply", "in-reply-to": meta["id"], "to": sender}
        if meta.get("request") == "join":
            self._add(meta, sender)
            await self.client.send({**reply, "message": "Succesfully registered!"})
        elif meta.get("request") == "list":
            payload = json.dumps({"clients": list(self.clients.values())}).encode()
            await self.client.send({**reply, "type": "application/json"}, payload)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.client.close()


def _join() -> dict[str, Any]:
    return {
        "event": "services/request",
        "name": "clients",
        "request": "join",
        "client": "ROBOT",
        "user": "robot-user",
        "id": _msgid(),
    }


async def _registry_subscribe(client: ObjClient) -> str:
    subscription = _subscription(["!*", "@services/*"])
    await client.send(subscription)
    reply = await _reply_for(client, subscription)
    assert reply is not None
    return str(reply["routing-id"])


async def test_client_registry_robot(server: ObjectServer) -> None:
    registry = await Registry.open(server.port)
    client = await _connect(server)
    routing_id = await _registry_subscribe(client)
    join = _join()
    await client.send(join)
    assert await _reply_for(client, join) is not None  # Client Registry Service Should Reply
    listing = {"event": "services/request", "name": "clients", "request": "list", "id": _msgid()}
    await client.send(listing)
    obj = await client.expect_any(lambda o: o.metadata.get("in-reply-to") == listing["id"], WAIT)
    [me] = [c for c in json.loads(obj.payload)["clients"] if c["routing-id"] == routing_id]
    assert (me["client"], me["user"]) == ("ROBOT", "robot-user")
    await client.close()
    await registry.close()


async def test_an_original_registry_sees_our_clients_arrive_and_leave(server: ObjectServer) -> None:
    registry = await Registry.open(server.port)
    client = await ObjClient.open(server.port)
    await _until(lambda: client.routing_id in registry.clients)
    await client.close()
    await _until(lambda: client.routing_id not in registry.clients)
    await registry.close()


async def _until(predicate: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.02)


# Two servers: ours and the original, linked in both directions ------------------------------


@pytest.fixture
async def original() -> AsyncIterator[ObjectoplexLike]:
    other = ObjectoplexLike()
    await other.start()
    yield other
    await other.stop()


@pytest.mark.parametrize("direction", ["ours-links", "original-links", "both"])
async def test_linked_with_the_original_objects_and_departures_cross(
    server: ObjectServer, original: ObjectoplexLike, direction: str
) -> None:
    if direction in ("ours-links", "both"):
        await server.link("127.0.0.1", original.port).wait()
    if direction in ("original-links", "both"):
        await original.link(server.port)
    await _until(lambda: len(original.servers()) == (2 if direction == "both" else 1))
    assert original.errors == []  # our subscription has types and no receive-mode
    registry = await Registry.open(original.port)  # a client registry on the original's side
    theirs = await ObjClient.open(original.port, subscriptions=["*"])
    ours = await ObjClient.open(server.port, receive_mode="no_echo")
    # The original's registry sees our client arrive...
    await _until(lambda: ours.routing_id in registry.clients)
    # ...objects cross both ways, exactly once each, double link or not...
    await ours.send({"event": "hello", "id": "from-ours"})
    await theirs.send({"event": "hi", "id": "from-theirs"})
    got_theirs = [o.metadata["id"] for o in await theirs.quiet(0.5) if o.event == "hello"]
    got_ours = [o.metadata["id"] for o in await ours.quiet(0.5) if o.event == "hi"]
    assert got_theirs == ["from-ours"] and got_ours == ["from-theirs"]
    # ...and our client's departure reaches the original's clients.
    await ours.close()
    await _until(lambda: ours.routing_id not in registry.clients)
    left = await theirs.expect("routing/disconnect", routing_id=ours.routing_id)
    assert left.route[0] == ours.routing_id
    await theirs.close()
    await registry.close()


async def test_an_unconfigured_original_cannot_link_in(original: ObjectoplexLike) -> None:
    strict = ObjectServer(Router("strict"))  # no server peers allowed
    await strict.start(port=0)
    watcher = await ObjClient.open(strict.port)
    await original.link(strict.port)
    await _until(lambda: any(m.get("code") == "forbidden" for m in original.received))
    assert original.servers() == []  # our server did not subscribe back
    assert all(
        not p.server and not p.subscribed
        for p in strict.router.peers()
        if p.routing_id != watcher.routing_id
    )
    await watcher.close()
    await strict.stop()


async def test_busgate_broker_links_out_from_the_command_line_and_warns_while_down(
    original: ObjectoplexLike,
) -> None:
    """``busgate broker --objects-link`` (repeatable), with ``--mop-port`` beside it."""
    down, mop_port = free_tcp_ports(2)  # nothing listens on `down`
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("busgate")), "broker", "--open", "--port", "0",
        "--objects-link", f"127.0.0.1:{original.port}", "--objects-link", f"127.0.0.1:{down}",
        "--mop-port", str(mop_port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
        assert b"listening" in line
        await _until(lambda: len(original.servers()) == 1)  # linked, without a listener of its own
        warned = b""
        async with asyncio.timeout(WAIT):
            while f"127.0.0.1:{down} is down".encode() not in warned:
                warned += await proc.stderr.readline()
        assert b"WARNING" in warned
        post_office = await MopClient.open(mop_port, "lab", b"any")  # open mode: no secret
        assert post_office.accept is not None
        await post_office.close()
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), WAIT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_triangle_with_two_originals_delivers_once_to_our_clients(
    server: ObjectServer,
) -> None:
    """Ours linked to two original servers that are linked to each other: a loop. Each original
    passes on what the other sends it; our clients still get every object once (PROTOCOL.md
    6.6), with or without an id from the sender."""
    first, second = ObjectoplexLike(), ObjectoplexLike()
    for original in (first, second):
        await original.start()
    try:
        await first.link(second.port)
        for original in (first, second):
            await server.link("127.0.0.1", original.port).wait()
        await _until(lambda: len(first.servers()) == 2 and len(second.servers()) == 2)
        ours = await ObjClient.open(server.port, receive_mode="no_echo")
        theirs = await ObjClient.open(first.port, subscriptions=["*"])
        near_second = await ObjClient.open(second.port, subscriptions=["!*"])
        await theirs.send({"event": "with-id", "id": "t1"})
        await theirs.send({"event": "without-id"})
        await theirs.send({"event": "end", "id": "t2"})
        # Once the second original has the end marker from the first, it has passed every
        # copy on to us; what its own client sends now reaches us after them, on that link.
        await _until(lambda: any(m.get("id") == "t2" for m in second.received))
        await near_second.send({"event": "sync", "id": "s1"})
        seen = []
        while (obj := await ours.recv()) is not None and obj.event != "sync":
            seen.append(obj.event)
        assert [seen.count(e) for e in ("with-id", "without-id", "end")] == [1, 1, 1]
        for client in (ours, theirs, near_second):
            await client.close()
    finally:
        for original in (first, second):
            await original.stop()
