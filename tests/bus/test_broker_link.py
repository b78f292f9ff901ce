"""A broker link's output batching (``bus/broker/link.py``), on the real broker and client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

import bus.asyncio.transport as transport_module
import bus.broker.link as link_module
from bus.asyncio.client import Subscription
from bus.broker import Broker, BrokerConfig
from bus.broker.journal_setting import JournalSetting
from bus.broker.link import COALESCE_SECONDS, Link
from bus.discovery.names import RESERVED_PREFIXES
from bus.journal import JournalReader
from bus.link import wire
from bus.link.connection import ClientConnection, ClientState, control_message
from bus.message.message import Flag, Message, decode_message, encode_message, read_message
from tests.bus.test_broker_server import RawLink
from tests.conftest import MakeBroker, MakeClient

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops


class _Ticking:
    """A monotonic clock that moves on by ``step`` each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize("path", ["python", "c"])
async def test_a_long_input_batch_is_routed_on_before_it_ends(
    broker: Broker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "python":
        monkeypatch.setattr(link_module, "_ROUTE", None)
    elif link_module._ROUTE is None:
        pytest.skip("the C accelerator is not in use")
    else:  # the C path reads the clock after each run of messages: here, a run of one
        monkeypatch.setattr(link_module, "_FAST_RUN", 1)
    publisher, subscriber = await make_client(), await make_client()
    subscription = await subscriber.subscribe("batch.*")
    sub_link = next(link for link in broker._links.values() if link.conn and link.conn.inbox
                    == subscriber.inbox)  # fmt: skip
    batches: list[int] = []
    write_batch = Link.write_batch

    def record(link: Link) -> None:
        if link is sub_link and link.batch:
            batches.append(len(link.batch))
        write_batch(link)

    monkeypatch.setattr(Link, "write_batch", record)
    # The publisher's three events leave in one write (its clock stands still); routing each
    # takes the broker longer than COALESCE_SECONDS (its clock runs).
    monkeypatch.setattr(transport_module, "time", SimpleNamespace(monotonic=lambda: 5.0))
    monkeypatch.setattr(
        link_module, "time", SimpleNamespace(monotonic=_Ticking(COALESCE_SECONDS * 1.5).monotonic)
    )
    for n in range(3):
        await publisher.publish("batch.tick", {"n": n})
    for n in range(3):
        event = await asyncio.wait_for(anext(subscription), 5)
        assert event.payload_data() == {"n": n}
    assert batches == [1, 1, 1]  # each written as soon as its turn took too long


async def test_a_short_input_batch_leaves_in_one_write(
    broker: Broker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher, subscriber = await make_client(), await make_client()
    subscription = await subscriber.subscribe("batch.*")
    batches: list[int] = []
    write_batch = Link.write_batch

    def record(link: Link) -> None:
        if link.batch and b"batch.tick" in link.batch[0]:
            batches.append(len(link.batch))
        write_batch(link)

    monkeypatch.setattr(Link, "write_batch", record)
    monkeypatch.setattr(transport_module, "time", SimpleNamespace(monotonic=lambda: 5.0))
    monkeypatch.setattr(link_module, "time", SimpleNamespace(monotonic=lambda: 7.0))
    for n in range(3):
        await publisher.publish("batch.tick", {"n": n})
    for n in range(3):
        event = await asyncio.wait_for(anext(subscription), 5)
        assert event.payload_data() == {"n": n}
    assert batches == [3]


class _Socket:
    """What a Link writes to, in memory."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close


def _logged_in(broker: Broker) -> tuple[Link, _Socket]:
    socket, link = _Socket(), Link(broker)
    link.connection_made(socket)  # type: ignore[arg-type]
    client = ClientConnection(name="", secret=None, inbox=f"_INBOX.{link.number}", now=0.0)
    client.start()
    link.data_received(client.data_to_send())
    client.receive_data(b"".join(socket.out), 0.0)
    socket.out.clear()
    while client.next_event() is not wire.NEED_DATA:
        pass
    assert client.state is ClientState.READY
    return link, socket


def _subscribe(link: Link, socket: _Socket, pattern: str) -> None:
    control = control_message("manage.subscribe", {"pattern": pattern})
    link.data_received(wire.encode_message(encode_message(control)))
    socket.out.clear()


@pytest.mark.parametrize("scan", [False, True], ids=["python", "c-scan"])
async def test_a_link_evicted_by_its_own_batch_routes_none_of_the_rest(scan: bool) -> None:
    if scan and not wire.use_accelerator(True):
        pytest.skip("the C accelerator was not built")
    wire.use_accelerator(scan)
    try:
        broker = Broker(BrokerConfig(port=0, open=True, max_queue_bytes=2000))
        slow, slow_socket = _logged_in(broker)
        other, other_socket = _logged_in(broker)
        _subscribe(slow, slow_socket, "echo.*")
        _subscribe(other, other_socket, "echo.*")
        slow.pause_writing()  # its own events queue up for it, until it is evicted
        events = [Message.event("echo.tick", {"n": n, "pad": "x" * 100}) for n in range(50)]
        slow.data_received(b"".join(wire.encode_message(encode_message(e)) for e in events))
        assert slow.number not in broker._links and slow.conn is not None
        assert not slow.conn.ready
        other.write_batch()
        decoder = wire.WireDecoder()
        decoder.receive_data(b"".join(other_socket.out))
        routed = [decode_message(e.data).payload["n"] for e in decoder.events()]  # type: ignore[union-attr]
        assert routed == list(range(len(routed))) and 0 < len(routed) < len(events)
        framed = len(wire.encode_message(encode_message(events[0])))
        assert len(routed) == 2000 // framed + 1  # up to the one that overflowed its queue
    finally:
        wire.use_accelerator(True)


# -- the C routing path (bus/native/_hotpath.c route, Link._route_fast) ----------------------------


def _traffic() -> list[Message]:
    """Requests and answers to one group, for the C path and the Python path in turn: SRC the
    sender's own (C), absent on a request (Python: the broker adds it), a mailbox of it (C),
    an ACK (C), a request for every consumer (Python)."""
    messages = []
    for n in range(42):
        kind = n % 6
        message = Message.request("svc", "echo", {"n": n}, reply_to="_INBOX.rawfast")
        message.mid = f"m{n}"
        if kind != 2:
            message.src = "alice.desk" if kind == 3 else "alice"
        if kind == 4:
            message.typ = "ACK"
        if kind == 5:
            message.flg = Flag.ALL
        messages.append(message)
    return messages


_Got = list[list[tuple[str | None, str | None]]]


_Links = list[tuple[str, int, int, int]]


async def _deliver_all(
    broker: Broker, queues: list[Subscription], messages: list[Message], expected: int
) -> tuple[_Got, dict[str, int], _Links, RawLink]:
    """Send ``messages`` from post office alice over a raw link; wait until the ``queues``
    received ``expected`` in all. What each received (MID, SRC, in order), what the broker and
    each link counted, and the raw link (for the caller to read, then close)."""
    got: _Got = [[] for _ in queues]

    async def read(index: int) -> None:
        async for message in queues[index]:
            got[index].append((message.mid, message.src))

    readers = [asyncio.create_task(read(index)) for index in range(len(queues))]
    sender = await RawLink.open(broker.port)
    await sender.connect_sha256("alice", "fast.1", inbox="_INBOX.rawfast")
    before = dict(broker.stats)
    for message in messages:
        sender.send(message)
    async with asyncio.timeout(10):
        while sum(map(len, got)) < expected:
            await asyncio.sleep(0.01)
    for reader in readers:
        reader.cancel()
    links = sorted(
        (link.conn.office, link.messages_in, link.messages_out, link.bytes_out)
        for link in broker._links.values()
        if link.conn is not None
    )
    stats = {name: broker.stats[name] - before.get(name, 0) for name in broker.stats}
    return got, stats, links, sender


async def _route_traffic(
    broker: Broker, make_client: MakeClient
) -> tuple[_Got, dict[str, int], _Links]:
    """Send the traffic through ``broker`` to three competing consumers."""
    url = f"bus://127.0.0.1:{broker.port}"
    consumers = [await make_client(url, name) for name in ("bob", "carol", "admin")]
    queues = [await consumer.consume("svc") for consumer in consumers]
    traffic = _traffic()
    expected = len(traffic) + 2 * sum(1 for m in traffic if m.to_all)  # those go to all three
    got, stats, links, sender = await _deliver_all(broker, queues, traffic, expected)
    sender.close()
    return got, stats, links


def _count_c_routes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Have the C path count what it routes: (messages, of which events) per call."""
    route = link_module._ROUTE
    if route is None:
        pytest.skip("the C accelerator is not in use (the Python path is the one tested)")
    calls: list[tuple[int, int]] = []

    def counted(bodies: list[bytes], start: int, *args: object) -> tuple[int, int, int]:
        end, written, events = route(bodies, start, *args)
        calls.append((end - start, events))
        return end, written, events

    monkeypatch.setattr(link_module, "_ROUTE", counted)
    return calls


async def test_the_c_routing_path_routes_and_counts_as_the_python_path(
    make_broker: MakeBroker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_c = _count_c_routes(monkeypatch)
    fast = await _route_traffic(await make_broker(), make_client)
    assert (
        sum(routed for routed, _ in by_c) == 28
    )  # every message with SRC its own or a mailbox of it, or an ACK
    monkeypatch.setattr(link_module, "_ROUTE", None)
    reference = await _route_traffic(await make_broker(), make_client)
    assert fast == reference
    # Round-robin across both paths: the n-th message for one consumer goes to consumer n % 3.
    one_each = [m for m in _traffic() if not m.to_all]
    for index, received in enumerate(fast[0]):
        mine = [(m.mid, m.src or "alice") for m in one_each[index::3]]
        assert [item for item in received if item[0] not in _ALL_MIDS] == mine
    assert fast[1]["routed"] == len(_traffic())


_ALL_MIDS = {m.mid for m in _traffic() if m.to_all}


async def test_a_paused_consumer_keeps_its_order_behind_the_c_path(
    broker: Broker, make_client: MakeClient
) -> None:
    # A consumer whose transport is paused queues in user space (Link.write); the C path must
    # not write past that queue: it leaves such a message to the Python path.
    consumer = await make_client(name="bob")
    queue = await consumer.consume("svc")
    requester = await make_client(name="alice")
    link = next(link for link in broker._links.values() if link.conn and link.conn.office == "bob")
    link.pause_writing()
    for n in range(5):
        await requester.send(Message.request("svc", "echo", {"n": n}, reply_to=requester.inbox))
    async with asyncio.timeout(5):
        while len(link.queue) < 5:
            await asyncio.sleep(0.01)
    assert not link.batch  # all queued behind the pause, none batched ahead
    link.resume_writing()
    got = [(await asyncio.wait_for(anext(queue), 5)).payload_data()["n"] for _ in range(5)]
    assert got == list(range(5))


def _events() -> list[Message]:
    """Events for the C path (SRC its own or none) and for the Python path (a confirmed one,
    one of the system's types, one nobody subscribes to), in turn."""
    events = []
    for n in range(30):
        kind = n % 6
        event = Message.event("other.tick" if kind == 5 else "sensor.temp", {"n": n})
        event.mid = f"e{n}"
        if kind in (0, 2):
            event.src = "alice"
        if kind == 3:
            event.rpy = "_INBOX.rawfast"  # confirmed: without a journal, refused (NAK 503)
        if kind == 4:
            event.grp = "OAM.SERVICE"  # the system's: refused from a client
        events.append(event)
    return events


async def _publish_events(
    broker: Broker, make_client: MakeClient
) -> tuple[_Got, dict[str, int], _Links, int]:
    """Publish the events through ``broker`` to two subscribers; also the events the
    sender's link counted for its receipts."""
    url = f"bus://127.0.0.1:{broker.port}"
    subscribers = [await make_client(url, name) for name in ("bob", "carol")]
    subscriptions = [
        await subscribers[0].subscribe("sensor.*"),
        await subscribers[1].subscribe("sensor.temp"),
    ]
    events = _events()
    expected = 2 * sum(1 for e in events if e.grp == "sensor.temp")
    got, stats, links, sender = await _deliver_all(broker, subscriptions, events, expected)
    naks = [await sender.next() for _ in range(sum(1 for e in events if e.rpy))]
    assert all(isinstance(nak, Message) and nak.typ == "NAK" for nak in naks)
    sending = next(link for link in broker._links.values() if link.conn and link.conn.office
                   == "alice")  # fmt: skip
    sender.close()
    return got, stats, links, sending.events_in


async def test_the_c_routing_path_delivers_events_as_the_python_path(
    make_broker: MakeBroker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_c = _count_c_routes(monkeypatch)
    fast = await _publish_events(await make_broker(), make_client)
    assert (
        sum(events for _, events in by_c) == 15
    )  # SRC its own or none, subscribed, not the system's, not confirmed
    monkeypatch.setattr(link_module, "_ROUTE", None)
    assert await _publish_events(await make_broker(), make_client) == fast
    temps = [(e.mid, e.src) for e in _events() if e.grp == "sensor.temp"]
    assert fast[0] == [temps, temps]  # both subscribers, in order, SRC as sent
    assert fast[3] == len(_events())  # every event counted for the receipts (PROTOCOL.md 5.12)
    assert fast[1]["refused_system"] == 5 and fast[1]["dropped"] == 5


def test_the_c_path_mirrors_the_constants_it_was_written_against() -> None:
    # bus/native/_hotpath.c spells these out (FLAG_ALL, LAST_FRAME, MAX_FRAME, reserved_type): a
    # change
    # here must be made there too.
    assert int(Flag.ALL) == 1
    assert int(wire.FrameType.LAST) == 3 and wire.DEFAULT_MAX_FRAME == 16381
    assert RESERVED_PREFIXES == ("OAM.", "_INBOX.")


async def _publish_journaled(
    broker: Broker, make_client: MakeClient, directory: Path
) -> tuple[list[tuple[str | None, int | None]], list[tuple[int | None, str | None]], int]:
    """Publish the events through ``broker`` (journal in ``directory``) to a subscriber: what
    it received (MID, SEQ, in order), what the journal holds (seq, MID) and what was dropped."""
    subscriber = await make_client(f"bus://127.0.0.1:{broker.port}", "bob")
    subscription = await subscriber.subscribe("sensor.*")
    events = _events()
    expected = sum(1 for e in events if e.grp == "sensor.temp" and not e.rpy)
    received: list[tuple[str | None, int | None]] = []
    sender = await RawLink.open(broker.port)
    await sender.connect_sha256("alice", "fast.1", inbox="_INBOX.rawfast")
    for event in events:
        if not event.rpy:  # a confirmed publish takes the Python path: elsewhere
            sender.send(event)
    async with asyncio.timeout(10):
        while len(received) < expected:
            message = await subscription.get(10)
            received.append((message.mid, message.seq))
    sender.close()
    journaled = [
        (record.seq, read_message(record.raw).mid) for record in JournalReader(directory).records()
    ]
    return received, journaled, broker.stats["dropped"]


async def test_with_a_journal_the_c_path_journals_and_numbers_events_as_the_python_path(
    make_broker: MakeBroker,
    make_client: MakeClient,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Journaled events took the Python path; the C path journals them as routed and delivers
    # each with its SEQ (PROTOCOL.md 5.14), the same records and the same numbers.
    by_c = _count_c_routes(monkeypatch)
    fast = await _publish_journaled(
        await make_broker(journal=JournalSetting(str(tmp_path / "c"), fsync="none")),
        make_client,
        tmp_path / "c",
    )
    assert sum(events for _, events in by_c) == 15  # every subscribed event of a client's own
    monkeypatch.setattr(link_module, "_ROUTE", None)
    reference = await _publish_journaled(
        await make_broker(journal=JournalSetting(str(tmp_path / "py"), fsync="none")),
        make_client,
        tmp_path / "py",
    )
    assert fast == reference
    received, journaled, dropped = fast
    assert [seq for _, seq in received] == [
        seq for seq, mid in journaled if mid in {m for m, _ in received}
    ]
    assert dropped == 5  # nobody subscribes to other.tick: journaled all the same
    assert len(journaled) == 20  # every one sent (no confirmed one) but the system's, refused


async def test_a_publisher_of_confirms_is_not_probed_by_the_c_route_read_after_read(
    make_broker: MakeBroker,
    make_client: MakeClient,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # A read that starts with a confirmed publish, after a read that ended with one, goes to
    # the confirm lane first (Link.confirming): the C route would read its header only to
    # leave it. What follows that is not a confirm is still routed by C.
    probes = _count_c_routes(monkeypatch)
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    url = f"bus://127.0.0.1:{broker.port}"
    publisher, subscriber = await make_client(url), await make_client(url, "bob")
    subscription = await subscriber.subscribe("conf.*")
    probes.clear()
    seqs = [await publisher.publish("conf.tick", {"n": n}, confirm=True) for n in range(5)]
    assert len(probes) == 1  # the first read's, after the handshake's control messages
    await publisher.publish("conf.tick", {"n": 5})  # a plain event: C routes it
    got = [await asyncio.wait_for(anext(subscription), 10) for _ in range(6)]
    assert [event.payload_data()["n"] for event in got] == list(range(6))
    assert probes[1:] == [(1, 1)]
    assert [event.seq for event in got[:5]] == seqs
