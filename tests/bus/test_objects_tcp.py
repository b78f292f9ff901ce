"""The Object System over real loopback TCP: routing, disconnects, bad input, linked servers."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import struct
import sys
from collections.abc import AsyncIterator

import pytest

import bus.objects.tcp as tcp_module
from bus.objects.codec import BusinessObject
from bus.objects.router import Router
from bus.objects.server_objects import NOTIFY_EVENTS
from bus.objects.tcp import ObjectServer
from tests.bus.objclient import LOCAL, ObjClient

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops


@pytest.fixture
async def server() -> AsyncIterator[ObjectServer]:
    srv = ObjectServer(Router("srv"), max_metadata=1024, max_payload=4096)
    await srv.start(port=0)
    yield srv
    await srv.stop()


async def _marker(sender: ObjClient, *receivers: ObjClient, name: str = "marker") -> None:
    """Send a marker event and wait for it everywhere: what arrived before it was routed first."""
    await sender.send({"event": name})
    for receiver in receivers:
        await receiver.expect(name)


async def test_two_clients_route_content_and_events(server: ObjectServer) -> None:
    a = await ObjClient.open(server.port, **{"receive-mode": "no_echo"})
    b = await ObjClient.open(server.port)
    await a.expect("routing/subscribe/notify", routing_id=b.routing_id)
    await a.send({"type": "text/plain; charset=UTF-8"}, "hyvä".encode())
    got = await b.recv()
    assert got is not None and got.payload.decode() == "hyvä"
    assert got.route == [a.routing_id, "srv"]
    await b.send({"event": "chat"})
    assert (await a.expect("chat")).route[0] == b.routing_id
    await a.close()
    await b.close()


async def _until(client: ObjClient, event: str) -> list[str | None]:
    """Events (or content types) received before ``event``; routing notices left out."""
    seen: list[str | None] = []
    while True:
        obj = await client.recv()
        assert obj is not None, "connection closed"
        if obj.event == event:
            return seen
        if not (obj.event or "").startswith("routing/"):
            seen.append(obj.event or obj.type)


async def test_events_only_and_types_over_tcp(server: ObjectServer) -> None:
    ev = await ObjClient.open(server.port, receive_mode="events_only")
    img = await ObjClient.open(server.port, types=["image/*"])
    sender = await ObjClient.open(server.port)
    await sender.send({"type": "text/plain"}, b"t")
    await sender.send({"type": "image/png"}, b"p")
    await sender.send({"event": "note"})
    await sender.send({"event": "end"})
    assert await _until(ev, "end") == ["note"]
    assert await _until(img, "end") == ["image/png", "note"]
    for client in (ev, img, sender):
        await client.close()


async def test_to_restricts_delivery_over_tcp(server: ObjectServer) -> None:
    a = await ObjClient.open(server.port)
    b = await ObjClient.open(server.port)
    c = await ObjClient.open(server.port)
    await a.send({"event": "secret", "to": b.routing_id})
    await a.send({"event": "end"})
    assert await _until(b, "end") == ["secret"]
    assert await _until(c, "end") == []
    for client in (a, b, c):
        await client.close()


async def test_clean_close_announces_disconnect(server: ObjectServer) -> None:
    watcher = await ObjClient.open(server.port)
    leaver = await ObjClient.open(server.port)
    rid = leaver.routing_id
    await leaver.close()
    notice = await watcher.expect("routing/disconnect")
    assert notice.metadata["routing-id"] == rid
    await watcher.close()


async def test_killed_client_process_announces_disconnect(server: ObjectServer) -> None:
    watcher = await ObjClient.open(server.port)
    script = (
        "import socket,sys,time\n"
        f"s=socket.create_connection(('127.0.0.1',{server.port}))\n"
        's.sendall(b\'{"event":"routing/subscribe","routing-id":"doomed"}\\x00\')\n'
        "s.recv(4096); print('up', flush=True); time.sleep(60)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 10) == b"up\n"
    await watcher.expect("routing/subscribe/notify", routing_id="doomed")
    proc.send_signal(signal.SIGKILL)
    await asyncio.wait_for(proc.wait(), 10)
    notice = await watcher.expect("routing/disconnect", routing_id="doomed")
    assert notice.route == ["doomed"]  # about "doomed"; passes Objectoplex links (6.5)
    await watcher.close()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b'{"event":"x","pad":"' + b"x" * 2000 + b'"}\x00', "limit"),
        (b'{"type":"a/b","size":100000}\x00', "limit"),
        (b"{not json}\x00", "malformed"),
        (b'{"size":-3}\x00', "malformed"),
    ],
)
async def test_bad_objects_get_an_error_then_close_and_others_carry_on(
    server: ObjectServer, data: bytes, code: str
) -> None:
    bystander = await ObjClient.open(server.port)
    bad = await ObjClient.open(server.port)
    bad.send_raw(data)
    error = await bad.expect("error")
    assert error.metadata["code"] == code
    assert await bad.recv() is None  # then the server closed the connection
    await bad.close()
    notice = await bystander.expect("routing/disconnect")
    assert notice.metadata["routing-id"] == bad.routing_id
    # the server still serves everyone else
    late = await ObjClient.open(server.port)
    await late.send({"event": "still-here"})
    await bystander.expect("still-here")
    await late.close()
    await bystander.close()


async def test_partial_object_then_rest_is_routed(server: ObjectServer) -> None:
    a = await ObjClient.open(server.port)
    b = await ObjClient.open(server.port)
    wire = b'{"type":"text/plain","size":4}\x00abcd'
    for i in range(len(wire)):
        a.send_raw(wire[i : i + 1])
        await a.writer.drain()
    got = await b.recv()
    while got is not None and got.event is not None:
        got = await b.recv()
    assert got is not None and got.payload == b"abcd"
    await a.close()
    await b.close()


async def test_linked_servers_in_a_loop_deliver_once_and_announce_disconnects() -> None:
    servers = [ObjectServer(Router(name), server_peers=LOCAL) for name in ("A", "B", "C")]
    for srv in servers:
        await srv.start(port=0)
    a, b, c = servers
    links = [a.link("127.0.0.1", b.port), b.link("127.0.0.1", c.port), c.link("127.0.0.1", a.port)]
    for link in links:
        await link.wait()
    x = await ObjClient.open(a.port, receive_mode="no_echo")
    y = await ObjClient.open(b.port, receive_mode="no_echo")
    z = await ObjClient.open(c.port, receive_mode="no_echo")
    await x.send({"event": "hello", "id": "h"})
    await x.send({"event": "direct", "to": z.routing_id})
    await x.send({"event": "end"})
    for client, expected in ((y, ["hello", "end"]), (z, ["hello", "direct", "end"])):
        seen = []
        while True:
            obj = await client.recv()
            assert obj is not None
            if obj.event in {"hello", "direct", "end"}:
                seen.append(obj.event)
            if obj.event == "end":
                break
        assert seen == expected
    # a reply across servers by `to`
    await z.send({"event": "back", "to": x.routing_id})
    back = await x.expect("back")
    assert back.route[0] == z.routing_id and back.route[-1] == "A"
    # a client leaving C is announced on A and B, once each
    await z.close()
    await x.expect("routing/disconnect", routing_id=z.routing_id)
    await y.expect("routing/disconnect", routing_id=z.routing_id)
    await _marker(y, x, name="after-disconnect")
    for client in (x, y):
        await client.close()
    for srv in servers:
        await srv.stop()


async def test_silent_linked_server_is_dropped_by_keepalive() -> None:
    srv = ObjectServer(Router("srv"), keepalive_interval=0.2, server_peers=LOCAL)
    await srv.start(port=0)
    watcher = await ObjClient.open(srv.port)
    # a "server" that subscribes with role: server, then never answers anything
    mute = await ObjClient.open(srv.port, subscribe=False)
    await mute.send({"event": "routing/subscribe", "role": "server", "routing-id": "mute"})
    await watcher.expect("routing/subscribe/notify", routing_id="mute")
    notice = await watcher.expect("routing/disconnect", routing_id="mute", timeout=10)
    assert notice.route == ["mute"]
    seen = [o.event for o in await mute.quiet(2.0)]
    assert "ping" in seen  # it was asked before being dropped
    await mute.close()
    await watcher.close()
    await srv.stop()


async def test_link_reconnects_after_the_other_server_restarts() -> None:
    b = ObjectServer(Router("B"), server_peers=LOCAL)
    await b.start(port=0)
    port = b.port
    a = ObjectServer(Router("A"), retry_delay=0.1)
    await a.start(port=0)
    link = a.link("127.0.0.1", port)
    await link.wait()
    await b.stop()
    b2 = ObjectServer(Router("B"), server_peers=LOCAL)
    await b2.start(port=port)
    x = await ObjClient.open(a.port)
    y = await ObjClient.open(b2.port)
    # once relinked, objects flow again
    for _ in range(100):
        await x.send({"event": "probe"})
        try:
            await y.expect("probe", timeout=0.2)
            break
        except TimeoutError:
            continue
    else:
        pytest.fail("link was not re-established")
    for client in (x, y):
        await client.close()
    await a.stop()
    await b2.stop()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("all", ["mine", "theirs", "text/plain"]),
        ("no_echo", ["theirs", "text/plain"]),
        ("events_only", ["theirs"]),
        ("none", []),
    ],
)
async def test_every_receive_mode_over_tcp(
    server: ObjectServer, mode: str, expected: list[str]
) -> None:
    me = await ObjClient.open(server.port, **{"receive-mode": mode})
    other = await ObjClient.open(server.port, receive_mode="all")
    await me.send({"event": "mine"})
    await other.send({"event": "theirs"})
    await other.send({"type": "text/plain"}, b"x")
    await other.send({"event": "done"})
    await other.expect("done")  # its echo: everything of `other` has been routed
    await me.send({"event": "ping", "id": "end"})  # answered whatever the mode
    seen = []
    while (obj := await me.recv()) is not None and obj.event != "pong":
        if obj.event not in {"done", *NOTIFY_EVENTS}:
            seen.append(obj.event or obj.type)
    assert seen == expected
    await me.close()
    await other.close()


async def test_a_client_that_does_not_read_is_cut_off() -> None:
    srv = ObjectServer(Router("srv"), max_write_buffer=64 * 1024)
    await srv.start(port=0)
    stuck = await ObjClient.open(srv.port)
    watcher = await ObjClient.open(srv.port, types="none")
    sender = await ObjClient.open(srv.port, receive_mode="none")
    chunk = b"x" * 65536
    for _ in range(400):  # 26 MB: more than the kernel buffers hold for a reader that sleeps
        await sender.send({"type": "application/octet-stream"}, chunk)
    notice = await watcher.expect("routing/disconnect", routing_id=stuck.routing_id)
    assert notice.route == [stuck.routing_id]
    for client in (stuck, watcher, sender):
        await client.close()
    await srv.stop()


async def test_linked_servers_hear_periodic_neighbor_announcements() -> None:
    srv = ObjectServer(Router("srv"), announce_interval=0.1, server_peers=LOCAL)
    await srv.start(port=0)
    client = await ObjClient.open(srv.port)
    peer = await ObjClient.open(srv.port, subscribe=False)
    await peer.send({"event": "routing/subscribe", "role": "server", "routing-id": "other"})
    announcement = await peer.expect("routing/announcement/neighbors")
    assert announcement.metadata["node"] == "srv"
    ids = {n["routing-id"] for n in announcement.metadata["neighbors"]}
    assert ids == {client.routing_id, "other"}
    await client.send({"event": "ping", "id": "p"})
    seen = []
    while (obj := await client.recv()) is not None and obj.event != "pong":
        seen.append(obj.event)
    assert "routing/announcement/neighbors" not in seen  # servers only
    await client.close()
    await peer.close()
    await srv.stop()


class _Clock:
    """``time`` for the driver: each reading is ``step`` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(("step", "written_while_routing"), [(0.0, False), (0.0001, True)])
async def test_a_long_batch_is_written_as_it_is_routed_and_a_short_one_at_its_end(
    server: ObjectServer, monkeypatch: pytest.MonkeyPatch, step: float, written_while_routing: bool
) -> None:
    """What one read brings is routed in one go, and what it routes to a peer leaves in one write
    at the end of it, unless routing it takes longer than COALESCE_SECONDS: then what is routed
    so far is written at once, so no object waits behind a long batch (the clock is a fake one:
    ``step`` seconds per reading)."""
    receiver = await ObjClient.open(server.port, receive_mode="no_echo")
    sender = await ObjClient.open(server.port, receive_mode="none")
    [conn] = [info.conn for info in server.router.peers() if info.routing_id == sender.routing_id]
    written: list[bytes] = []
    write = asyncio.StreamWriter.write

    def spy(self: asyncio.StreamWriter, data: bytes) -> None:
        written.append(bytes(data))
        write(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "write", spy)
    monkeypatch.setattr(tcp_module, "time", _Clock(step))
    batch = [BusinessObject({"type": "text/plain", "n": n}, b"x") for n in range(100)]
    batch[50] = BusinessObject({"event": "halfway"})  # an event in the run: in its place
    server.receive_batch(conn, batch)
    assert bool(written) is written_while_routing
    if written_while_routing:
        assert 1 < len(written) < 100  # coalesced, just not for longer than allowed
    await asyncio.sleep(0)  # the end of the loop's callback: the rest is written
    assert written
    monkeypatch.undo()
    got: list[object] = []
    while len(got) < len(batch):
        obj = await receiver.recv()
        assert obj is not None
        if not (obj.event or "").startswith("routing/"):  # the sender's subscribe notices
            got.append(obj.metadata.get("n", obj.event))
    assert got == [obj.metadata.get("n", obj.event) for obj in batch]
    await receiver.close()
    await sender.close()


def _reset(client: ObjClient) -> None:
    """Close with SO_LINGER 0, as a crashed or killed client does: the kernel sends a reset."""
    sock = client.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.writer.transport.abort()


async def _objects_of(client: ObjClient, round_: int, count: int) -> list[int]:
    """The ``n`` of the content objects of round ``round_`` that ``client`` receives, until it has
    ``count`` of them or nothing comes for 5 s."""
    got: list[int] = []
    while len(got) < count:
        try:
            obj = await client.recv()
        except TimeoutError:
            break
        if obj is None:
            break
        if obj.metadata.get("round") == round_:
            got.append(obj.metadata["n"])
    return got


async def test_clients_that_reset_while_objects_flow_cost_the_others_nothing(
    server: ObjectServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 item 1. Clients reset their connections (SO_LINGER 0) while objects are queued
    for them: on uvloop the write to such a client's closed transport raised RuntimeError out of
    the server's flush, the clients after it in that flush were never written to again (connected,
    receiving nothing), and the sender whose objects were being routed was disconnected. Every
    other client must get every object, in order, the sender must stay, and nothing may be
    logged as a warning or an error (the standard loop warned for each write to a reset socket)."""
    caplog.set_level(logging.WARNING)
    sender = await ObjClient.open(server.port, receive_mode="none")
    readers = [await ObjClient.open(server.port, receive_mode="no_echo") for _ in range(6)]
    count = 300
    for round_ in range(3):
        doomed = [await ObjClient.open(server.port) for _ in range(6)]

        async def send(round_: int = round_, doomed: list[ObjClient] = doomed) -> None:
            for n in range(count):
                await sender.send({"type": "text/plain", "round": round_, "n": n}, b"x" * 200)
                if n % 50 == 25:  # one reset every 50 objects, while the others flow
                    _reset(doomed[n // 50])

        results = await asyncio.gather(
            send(), *(_objects_of(reader, round_, count) for reader in readers)
        )
        assert results[1:] == [list(range(count))] * len(readers), f"round {round_}"
    await sender.send({"event": "still-here"})
    for reader in readers:
        await reader.expect("still-here")
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert problems == []
    for client in (sender, *readers):
        await client.close()
