"""Issue 4, requirement by requirement, over real loopback TCP (raw sockets speaking the wire).

What `test_objects_tcp.py` already covers over TCP is not repeated here: receive modes, types,
`to`, clean and killed disconnects, bad input, linked loops, the silent server link.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bus.objects.codec import BusinessObject
from bus.objects.router import Router
from bus.objects.tcp import ClientKeepalive, ObjectServer
from tests.bus.objclient import LOCAL, ObjClient

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops


@pytest.fixture
async def server() -> AsyncIterator[ObjectServer]:
    srv = ObjectServer(Router("srv"))
    await srv.start(port=0)
    yield srv
    await srv.stop()


async def _seen_until_pong(client: ObjClient) -> list[Any]:
    """Ping the server; what (event or content type) arrived before the pong, notices left out."""
    await client.send({"event": "ping", "id": "end"})
    seen = []
    while (obj := await client.recv()) is not None and obj.event != "pong":
        if not (obj.event or "").startswith("routing/"):
            seen.append(obj.event or obj.type)
    return seen


async def test_routing_id_assigned_reply_in_reply_to_and_notify(server: ObjectServer) -> None:
    a = await ObjClient.open(server.port, subscribe=False)
    await a.send({"event": "routing/subscribe", "id": "s1"})
    reply = await a.expect("routing/subscribe/reply")
    assert reply.metadata["in-reply-to"] == "s1"
    assigned = reply.metadata["routing-id"]
    assert isinstance(assigned, str) and len(assigned) == 36  # a UUID the server chose
    b = await ObjClient.open(server.port, subscribe=False)
    await b.send({"event": "routing/subscribe", "routing-id": "bee", "routing-ids": ["hive"]})
    reply_b = await b.expect("routing/subscribe/reply")
    assert "in-reply-to" not in reply_b.metadata  # the request had no id
    assert reply_b.metadata["routing-id"] == "bee"
    notify = await a.expect("routing/subscribe/notify", routing_id="bee")
    assert notify.metadata["routing-ids"] == ["hive"]
    await b.send({"event": "hello"})
    assert (await a.expect("hello")).route == ["bee", "srv"]
    for client in (a, b):
        await client.close()


async def test_nothing_is_routed_before_subscribe(server: ObjectServer) -> None:
    talker = await ObjClient.open(server.port)
    late = await ObjClient.open(server.port, subscribe=False)
    await late.send({"event": "early", "id": "e1"})
    refused = await late.recv()
    assert refused is not None and refused.event == "error"
    assert refused.metadata["code"] == "refused" and refused.metadata["in-reply-to"] == "e1"
    await talker.send({"event": "before"})
    await talker.expect("before")  # its echo: routed, and not to `late`
    await late.send({"event": "routing/subscribe", "id": "s"})
    first = await late.recv()
    assert first is not None and first.event == "routing/subscribe/reply"
    await talker.send({"event": "after"})
    assert await _seen_until_pong(late) == ["after"]
    assert "early" not in [o.event for o in await talker.quiet(0.2)]
    for client in (talker, late):
        await client.close()


async def test_rule_list_last_match_wins_over_tcp(server: ObjectServer) -> None:
    rules = ["text/*", "!text/html", "@alert*", "#urgent", "!@alert/test"]
    me = await ObjClient.open(server.port, subscriptions=rules)
    sender = await ObjClient.open(server.port)
    await sender.send({"type": "text/plain"}, b"a")
    await sender.send({"type": "text/html"}, b"b")
    await sender.send({"type": "image/png"}, b"c")
    await sender.send({"type": "image/gif", "natures": ["urgent"]}, b"d")
    await sender.send({"event": "alert/fire"})
    await sender.send({"event": "alert/test"})
    await sender.send({"event": "chat"})
    await sender.send({"event": "done"})
    await sender.expect("done")
    assert await _seen_until_pong(me) == ["text/plain", "image/gif", "alert/fire"]
    for client in (me, sender):
        await client.close()


async def test_extra_routing_ids_receive_to_objects_in_order(server: ObjectServer) -> None:
    holder = await ObjClient.open(server.port, **{"routing-ids": ["desk-7"]})
    sender = await ObjClient.open(server.port, receive_mode="none")
    await sender.send({"event": "for-desk", "to": "desk-7"})
    await sender.send({"event": "for-list", "to": ["nobody", "desk-7"]})
    await sender.send({"event": "not-for-desk", "to": "desk-9"})
    await sender.send({"event": "done"})
    seen = []
    while (obj := await holder.recv()) is not None and obj.event != "done":
        if not (obj.event or "").startswith("routing/"):
            seen.append(obj.event)
    assert seen == ["for-desk", "for-list"]
    for client in (holder, sender):
        await client.close()


async def test_an_object_already_routed_here_is_dropped(server: ObjectServer) -> None:
    a = await ObjClient.open(server.port, receive_mode="no_echo")
    b = await ObjClient.open(server.port)
    await b.send({"event": "looped", "route": ["far-client", "srv", "far-server"]})
    await b.send({"event": "fresh", "route": ["far-client", "far-server"]})
    fresh = await a.expect("fresh")
    assert fresh.route == ["far-client", "far-server", "srv"]
    assert "looped" not in [o.event for o in await a.quiet(0.2)]
    for client in (a, b):
        await client.close()


async def test_ping_pong_and_neighbors_reply_over_tcp(server: ObjectServer) -> None:
    a = await ObjClient.open(server.port, receive_mode="none")
    b = await ObjClient.open(server.port, **{"routing-id": "bee"})
    await a.send({"event": "ping", "id": "p1"})
    pong = await a.expect("pong")
    assert pong.metadata["in-reply-to"] == "p1" and pong.metadata["to"] == a.routing_id
    await a.send({"event": "routing/neighbors", "id": "n1"})
    reply = await a.expect("routing/neighbors/reply")
    assert reply.metadata["in-reply-to"] == "n1" and reply.metadata["node"] == "srv"
    neighbors = {(n["routing-id"], n["role"]) for n in reply.metadata["neighbors"]}
    assert neighbors == {(a.routing_id, "client"), ("bee", "client")}
    for client in (a, b):
        await client.close()


async def test_services_register_discovery_request_reply_over_tcp(server: ObjectServer) -> None:
    svc = await ObjClient.open(server.port, receive_mode="no_echo", **{"routing-id": "clock-1"})
    caller = await ObjClient.open(server.port, receive_mode="no_echo")
    bystander = await ObjClient.open(server.port, receive_mode="no_echo")
    await svc.send({"event": "services/register", "name": "clock", "id": "r1"})
    registered = await svc.expect("services/register/reply")
    assert registered.metadata["in-reply-to"] == "r1"
    await caller.send({"event": "services/discovery", "name": "clock", "id": "d1"})
    found = await caller.expect("services/discovery/reply")
    assert found.metadata["in-reply-to"] == "d1"
    assert found.metadata["services"] == [{"name": "clock", "routing-id": "clock-1"}]
    await caller.send({"event": "services/request", "name": "clock", "id": "q1", "to": "clock-1"})
    request = await svc.expect("services/request")
    await svc.send(
        {
            "event": "services/reply",
            "in-reply-to": request.id,
            "to": request.route[0],
            "type": "text/plain",
        },
        b"12:00",
    )
    answer = await caller.expect("services/reply")
    assert answer.metadata["in-reply-to"] == "q1" and answer.payload == b"12:00"
    await caller.send({"event": "done"})
    seen = [o.event for o in await bystander.quiet(0.3)]
    assert "services/reply" not in seen and "services/request" not in seen
    # the service goes: discovery no longer lists it
    await svc.close()
    await caller.expect("routing/disconnect", routing_id="clock-1")
    await caller.send({"event": "services/discovery", "id": "d2"})
    assert (await caller.expect("services/discovery/reply")).metadata["services"] == []
    for client in (caller, bystander):
        await client.close()


# ---------------------------------------------------------------- looped topology and ids


async def _triangle() -> list[ObjectServer]:
    servers = [ObjectServer(Router(name), server_peers=LOCAL) for name in ("A", "B", "C")]
    for srv in servers:
        await srv.start(port=0)
    a, b, c = servers
    for link in (a.link("127.0.0.1", b.port), b.link("127.0.0.1", c.port)):
        await link.wait()
    await c.link("127.0.0.1", a.port).wait()
    return servers


async def test_a_loop_delivers_objects_without_id_and_reused_ids_once_each() -> None:
    servers = await _triangle()
    x = await ObjClient.open(servers[0].port, receive_mode="no_echo")
    y = await ObjClient.open(servers[1].port, receive_mode="no_echo")
    z = await ObjClient.open(servers[2].port, receive_mode="no_echo")
    await asyncio.sleep(0)  # notices settle; the markers below order what follows
    sent = [
        ({"event": "n1"}, b""),  # no id: the first server gives one
        ({"type": "text/plain"}, b"no id either"),
        ({"event": "r1", "id": "1"}, b""),  # a sender that reuses one id for everything
        ({"event": "r2", "id": "1"}, b""),
        ({"event": "r3", "id": "1"}, b""),
        ({"event": "end", "id": "1"}, b""),
    ]
    for metadata, payload in sent:
        await x.send(metadata, payload)
    for client in (y, z):
        seen = []
        while (obj := await client.recv()) is not None:
            if not (obj.event or "").startswith("routing/"):
                seen.append(obj.event or obj.type)
                assert obj.id  # every object carries an id after its first server
            if obj.event == "end":
                break
        assert seen == ["n1", "text/plain", "r1", "r2", "r3", "end"]
    await x.send({"event": "ping", "id": "p"})
    await x.expect("pong")
    for client in (y, z):
        assert [o.event for o in await client.quiet(0.3)] == []  # no late second copies
    for client in (x, y, z):
        await client.close()
    for srv in servers:
        await srv.stop()


async def test_a_stopping_server_announces_its_clients_then_itself_to_the_network() -> None:
    a = ObjectServer(Router("A"), server_peers=LOCAL)
    b = ObjectServer(Router("B"))
    for srv in (a, b):
        await srv.start(port=0)
    await b.link("127.0.0.1", a.port).wait()
    watcher = await ObjClient.open(a.port)
    leaving = await ObjClient.open(b.port)
    await watcher.expect("routing/subscribe/notify", routing_id=leaving.routing_id)
    await b.stop()
    gone: list[str] = []
    while len(gone) < 2:
        notice = await watcher.expect("routing/disconnect")
        gone.append(notice.metadata["routing-id"])
    assert gone == [leaving.routing_id, "B"]
    for client in (watcher, leaving):
        await client.close()
    await a.stop()


# ---------------------------------------------------------------- keepalive for clients


class RawClient:
    """A client that may answer the server's pings, or fall silent (stop reading and writing)."""

    def __init__(self, client: ObjClient, answer: bool) -> None:
        self.client = client
        self.answer = answer
        self.pings = 0
        self.answered = asyncio.Event()
        self.seen: list[BusinessObject] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        with contextlib.suppress(ConnectionError, TimeoutError):
            while (obj := await self.client.recv(timeout=30)) is not None:
                self.seen.append(obj)
                if obj.event == "ping" and obj.route == []:
                    self.pings += 1
                    if self.answer:
                        pong = {"event": "pong", "in-reply-to": obj.id}
                        await self.client.send(pong)
                        self.answered.set()

    async def expect(self, event: str, **fields: Any) -> BusinessObject:
        """Wait (bounded) until an object with this event and these metadata values came."""
        wanted = {k.replace("_", "-"): v for k, v in fields.items()}

        async def find() -> BusinessObject:
            while True:
                for obj in self.seen:
                    if obj.event == event and all(
                        obj.metadata.get(k) == v for k, v in wanted.items()
                    ):
                        return obj
                await asyncio.sleep(0.02)

        return await asyncio.wait_for(find(), 10)

    @property
    def routing_id(self) -> str:
        return self.client.routing_id

    def routing_id_in(self, srv: ObjectServer) -> bool:
        """Whether the server still has this client."""
        return self.routing_id in {p.routing_id for p in srv.router.peers()}

    async def fall_silent(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def close(self) -> None:
        await self.fall_silent()
        await self.client.close()


async def _keepalive_server(policy: ClientKeepalive, interval: float) -> ObjectServer:
    srv = ObjectServer(Router("srv"), keepalive_interval=interval, client_keepalive=policy)
    await srv.start(port=0)
    return srv


async def test_silent_answering_client_is_announced_with_routing_disconnect() -> None:
    srv = await _keepalive_server(ClientKeepalive.AUTO, 0.2)
    watcher = await ObjClient.open(srv.port)
    client = RawClient(await ObjClient.open(srv.port), answer=True)
    rid = client.routing_id
    await asyncio.wait_for(client.answered.wait(), 10)
    assert any(p.routing_id == rid and p.answers_pings for p in srv.router.peers())
    await client.fall_silent()  # as a hung process, or a host gone without a FIN
    notice = await watcher.expect("routing/disconnect", routing_id=rid, timeout=10)
    assert notice.route == [rid]
    # the watcher never answered a ping and sent nothing for many intervals: `auto` keeps it
    await watcher.send({"event": "ping", "id": "still-here"})
    await watcher.expect("pong", in_reply_to="still-here")
    await client.close()
    await watcher.close()
    await srv.stop()


async def test_an_original_client_that_never_answers_is_kept_under_auto() -> None:
    srv = await _keepalive_server(ClientKeepalive.AUTO, 0.1)
    quiet = RawClient(await ObjClient.open(srv.port), answer=False)
    talker = await ObjClient.open(srv.port, receive_mode="none")

    async def pinged() -> None:
        while quiet.pings == 0:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(pinged(), 10)
    await asyncio.sleep(1.0)  # ten intervals of silence after the unanswered ping
    assert quiet.routing_id_in(srv)
    await quiet.close()
    await talker.close()
    await srv.stop()


async def test_require_drops_a_silent_client_but_any_bytes_count_as_liveness() -> None:
    srv = await _keepalive_server(ClientKeepalive.REQUIRE, 1.0)
    watcher = RawClient(await ObjClient.open(srv.port), answer=True)
    mute = RawClient(await ObjClient.open(srv.port), answer=False)
    chatty = await ObjClient.open(srv.port, receive_mode="none")

    async def chatter() -> None:
        while True:
            await chatty.send({"event": "chatter"})
            await asyncio.sleep(0.1)

    chatting = asyncio.create_task(chatter())
    notice = await watcher.expect("routing/disconnect", routing_id=mute.routing_id)
    assert notice.route == [mute.routing_id]
    assert mute.pings >= 1  # it was asked before being dropped
    await asyncio.sleep(2.0)  # two more windows
    chatting.cancel()
    # `chatty` never answered a ping either, but kept sending: still connected
    await chatty.send({"event": "ping", "id": "alive"})
    await chatty.expect("pong", in_reply_to="alive")
    assert chatty.routing_id not in {
        n.metadata["routing-id"] for n in watcher.seen if n.event == "routing/disconnect"
    }
    await chatty.close()
    for raw in (watcher, mute):
        await raw.close()
    await srv.stop()


async def test_off_never_pings_clients() -> None:
    srv = await _keepalive_server(ClientKeepalive.OFF, 0.1)
    client = RawClient(await ObjClient.open(srv.port), answer=True)
    await asyncio.sleep(0.6)
    assert client.pings == 0 and client.routing_id_in(srv)
    await client.close()
    await srv.stop()
