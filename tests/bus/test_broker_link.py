"""A broker link's output batching (``bus/broker/link.py``), on the real broker and client."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import bus.asyncio.transport as transport_module
import bus.broker.link as link_module
from bus import wire
from bus.broker import Broker, BrokerConfig
from bus.broker.link import COALESCE_SECONDS, Link
from bus.connection import ClientConnection, ClientState, control_message
from bus.message import Message, decode_message, encode_message
from tests.conftest import MakeClient


class _Ticking:
    """A monotonic clock that moves on by ``step`` each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


async def test_a_long_input_batch_is_routed_on_before_it_ends(
    broker: Broker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
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
