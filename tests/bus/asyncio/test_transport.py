"""The broker link's write coalescing (``bus/asyncio/transport.py``), on a real broker."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import bus.asyncio.transport as transport_module
from bus.asyncio.client import Client
from bus.asyncio.transport import COALESCE_SECONDS, BrokerTransport, SessionInfo, Transport
from bus.broker import Broker
from bus.broker.config import JournalSetting
from bus.message.message import Message, decode_message, encode_event, encode_message
from tests.conftest import MakeBroker, MakeClient


class _Clock:
    """``time`` for the transport module: a monotonic clock the test moves (by ``step`` at
    each reading, when set)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def _writes(client: Client) -> list[bytes]:
    """Record what the client's socket transport is handed, write by write."""
    transport = client._transport
    assert isinstance(transport, BrokerTransport) and transport._wire is not None
    socket = transport._wire.transport
    assert socket is not None
    written: list[bytes] = []
    original = socket.write

    def write(data: bytes) -> None:
        written.append(bytes(data))
        original(data)

    socket.write = write  # type: ignore[method-assign,assignment]
    return written


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(transport_module, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


async def test_messages_sent_together_leave_in_one_write(
    make_client: MakeClient, clock: _Clock
) -> None:
    publisher, subscriber = await make_client(), await make_client()
    subscription = await subscriber.subscribe("coal.*")
    written = _writes(publisher)
    for n in range(3):
        await publisher.publish("coal.tick", {"n": n})
    assert written == []  # held for the end of this loop iteration
    await asyncio.sleep(0)
    assert len(written) == 1 and all(b"coal.tick" in w for w in written)
    for n in range(3):
        event = await asyncio.wait_for(anext(subscription), 5)
        assert event.payload_data() == {"n": n}


async def test_a_long_iteration_does_not_hold_what_was_sent_early(
    make_client: MakeClient, clock: _Clock
) -> None:
    # A busy loop iteration (a burst of requests, a publishing loop that never waits) must not
    # keep its first messages from the broker until it ends: downstream processes would wait,
    # then all work at once.
    publisher, subscriber = await make_client(), await make_client()
    subscription = await subscriber.subscribe("coal.*")
    written = _writes(publisher)
    await publisher.publish("coal.tick", {"n": 0})
    clock.now += COALESCE_SECONDS * 2  # the loop's work since the first one was queued
    await publisher.publish("coal.tick", {"n": 1})
    assert len(written) == 1  # both left before the iteration ended, in one write
    assert written[0].count(b"coal.tick") == 2
    await publisher.publish("coal.tick", {"n": 2})
    assert len(written) == 1  # a new batch starts: held again
    await asyncio.sleep(0)
    assert len(written) == 2
    for n in range(3):
        event = await asyncio.wait_for(anext(subscription), 5)
        assert event.payload_data() == {"n": n}


async def test_confirmed_publishes_made_together_leave_in_one_write_however_long_it_takes(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path, clock: _Clock
) -> None:
    # What they wait for is their ACKs, sent once the broker's batch is journaled: written
    # together they are one batch (one journal write, one write of ACKs back); a write per
    # COALESCE_SECONDS of the loop's work made the broker journal and answer each part apart.
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
    written = _writes(publisher)
    clock.step = COALESCE_SECONDS * 2  # each publish takes longer than a request may wait
    confirms = [
        asyncio.ensure_future(publisher.publish("coal.tick", {"n": n}, confirm=True))
        for n in range(5)
    ]
    await asyncio.sleep(0)  # they are queued, the iteration's end not reached
    assert written == []
    await asyncio.sleep(0)
    assert len(written) == 1 and written[0].count(b"coal.tick") == 5
    clock.step = 0.0
    seqs = await asyncio.wait_for(asyncio.gather(*confirms), 10)
    assert seqs == list(range(seqs[0], seqs[0] + 5))


async def test_confirmed_publishes_queued_past_the_bound_leave_without_waiting(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    clock: _Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport_module, "CONFIRMS_HELD", 3)
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
    written = _writes(publisher)
    clock.step = COALESCE_SECONDS * 2
    confirms = [
        asyncio.ensure_future(publisher.publish("coal.tick", {"n": n}, confirm=True))
        for n in range(5)
    ]
    await asyncio.sleep(0)
    assert [w.count(b"coal.tick") for w in written] == [3]  # the bound reached: out at once
    await asyncio.sleep(0)
    assert [w.count(b"coal.tick") for w in written] == [3, 2]
    clock.step = 0.0
    seqs = await asyncio.wait_for(asyncio.gather(*confirms), 10)
    assert seqs == list(range(seqs[0], seqs[0] + 5))


async def test_a_transport_sends_an_encoded_event_as_the_message_it_is() -> None:
    """The default ``send_event`` (a transport that does not write bodies as they are, as
    the NATS one): the event is read back and sent as a message."""
    sent: list[Message] = []

    class Recording(Transport):
        async def open(self, on_message: object, on_lost: object) -> SessionInfo:
            raise NotImplementedError

        async def send(self, message: Message) -> None:
            sent.append(message)

        async def call(self, cmd: str, args: Mapping[str, Any], timeout: float) -> Message:
            raise NotImplementedError

        async def close(self) -> None:
            return None

    raw = encode_event("m-1", "sensor.temp", {"c": 18.5})
    await Recording().send_event(raw)
    [message] = sent
    assert decode_message(encode_message(message)) == decode_message(raw)
    assert (message.mid, message.grp, message.typ) == ("m-1", "sensor.temp", "EVT")
    assert message.payload["c"] == 18.5


async def test_an_open_cancelled_as_its_socket_connects_leaves_no_error_unretrieved(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A client closed while it reconnected cancels open(). Cancelled inside create_connection
    # once the socket was up, create_connection closed it, and the link's loss failed the
    # handshake's future with AuthError after open() had gone: nobody retrieved it, and asyncio
    # logged "Future exception was never retrieved" whenever the collector took it (a leak
    # hunt saw it after
    # tests/gateway/routes/test_admin.py::test_drain_a_group_and_disconnect_a_link).
    link = BrokerTransport("127.0.0.1", broker.port, name=None, secret=None, inbox="_INBOX.x")
    opening: list[asyncio.Task[SessionInfo]] = []
    made = transport_module._Wire.connection_made

    def made_then_cancelled(wire: Any, socket: asyncio.BaseTransport) -> None:
        made(wire, socket)
        opening[0].cancel()  # before create_connection hands the socket over

    monkeypatch.setattr(transport_module._Wire, "connection_made", made_then_cancelled)
    opening.append(asyncio.create_task(link.open(lambda _: None, lambda _: None)))
    with pytest.raises(asyncio.CancelledError):
        await opening[0]
    await asyncio.sleep(0.1)  # the socket's loss reaches the link
    del link, opening[:]
    gc.collect()  # the link's futures are freed: one with an error nobody took says so
    assert "never retrieved" not in caplog.text
