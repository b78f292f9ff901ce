"""Publish receipts (PROTOCOL.md 5.12): an unconfirmed publish is delivered or reported failed.

The broker receipts what it took from a link; the client keeps the rest, resends it after a
reconnection (never twice into the journal) and reports what it cannot deliver. The kill -9
tests run the broker as a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest

from bus.asyncio.client import Client, connect
from bus.broker import Broker, BrokerConfig
from bus.broker.config import JournalSetting
from bus.broker.link import Link
from bus.errors import BufferFullError, ClosedError, PublishFailedError
from bus.link.connection import ClientConnection, ReceiptReceived
from bus.link.receipts import (
    ENTRY_COST,
    Outbox,
    as_list,
    decode_receipt,
    encode_receipt,
    event_kind,
)
from bus.message.message import Message, encode_message, read_message
from tests.bus.asyncio.test_durable import WAIT
from tests.conftest import OFFICES, BrokerProcess


async def _connect(url: str, name: str, **options: object) -> Client:
    return await connect(url, name, OFFICES[name], backoff_initial=0.05, backoff_max=0.3, **options)  # type: ignore[arg-type]


def test_the_receipt_frame_is_an_mq_command_old_clients_ignore() -> None:
    frame = encode_receipt(3, 258)
    assert frame.hex(" ") == ("05 12 00 01 52 03 00 00 00 00 00 00 00 02 01 00 00 00 00 00 00")
    assert decode_receipt(frame[4:]) == (3, 258)
    assert decode_receipt(b"Rshort") is None


def test_the_outbox_drops_what_is_receipted_and_resends_the_rest_in_order() -> None:
    events = [encode_message(Message.event("a.b", {"i": i})) for i in range(4)]
    outbox = Outbox(window=3 * (len(events[0]) + ENTRY_COST))
    for raw in events[:3]:
        outbox.written(raw)
    assert outbox.full
    outbox.receipt(1, 7)
    assert len(outbox) == 2 and not outbox.full and outbox.seq == 7
    outbox.new_link()  # the link is lost: events 1 and 2 wait for a resend
    assert list(outbox.resend) == events[1:3] and outbox.scan_from == 7
    outbox.taken({read_message(events[1]).mid or ""}, 9)  # the broker had journaled event 1
    assert list(outbox.resend) == [events[2]]
    outbox.written(outbox.resend.popleft())  # resent on the new link, then a new one
    outbox.written(events[3])
    outbox.written(None)  # a confirmed publish
    outbox.new_link()
    assert list(outbox.resend) == events[2:] and outbox.scan_from == 9
    assert outbox.resend_mids() == [read_message(raw).mid for raw in events[2:]]


def test_what_the_receipts_count_is_every_event_and_nothing_else() -> None:
    event = Message.event("a.b", {"i": 1})
    assert event_kind(event) is True
    assert event_kind(read_message(encode_message(event))) is True
    event.rpy = "_INBOX.x"  # a confirmed publish: counted, its confirmation covers it
    assert event_kind(event) is False
    assert event_kind(read_message(encode_message(event))) is False
    request = Message.request("g", "c", {"a": 1}, reply_to="_INBOX.x")
    assert event_kind(request) is None
    assert event_kind(read_message(encode_message(request))) is None
    assert event_kind(read_message(encode_message(request)).reply({"ok": 1})) is None


def test_the_client_connection_hands_a_receipt_to_its_owner() -> None:
    conn = ClientConnection(name="", secret=None, inbox="_INBOX.x", now=0.0)
    conn.state = conn.state.READY  # type: ignore[misc]
    conn.receive_data(encode_receipt(5, 0), 0.0)
    assert conn.next_event() == ReceiptReceived(5, 0)


async def test_the_broker_names_the_resent_events_it_already_journaled(tmp_path: Path) -> None:
    config = BrokerConfig(port=0, open=True, journal=JournalSetting(str(tmp_path), fsync="none"))
    async with Broker(config) as broker:
        client = await connect(f"bus://127.0.0.1:{broker.port}")
        event = Message.event("plant.level", {"i": 1})
        await client.publish_event(event)
        start = await client.flush()
        assert client.unreceipted == 0
        answer = await client.manage(
            "manage.receipts", {"since": start - 1, "mids": ["not-sent", event.mid]}
        )
        assert as_list(answer.payload["taken"]) == [event.mid]
        answer = await client.manage("manage.receipts", {"since": start, "mids": [event.mid]})
        assert as_list(answer.payload["taken"]) == []
        await client.close()


async def test_events_unreceipted_when_the_broker_dies_are_reported_to_the_caller(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess("--journal", str(tmp_path))
    broker.start()
    try:
        reported: list[PublishFailedError] = []
        handled = await _connect(broker.url, "alice", reconnect=False)
        handled.on_publish_failed = reported.append
        raising = await _connect(broker.url, "bob", reconnect=False)
        assert broker.process is not None
        broker.process.send_signal(signal.SIGSTOP)  # it reads nothing more, then dies
        for i in range(10):
            await handled.publish("plant.level", {"i": i})
            await raising.publish("plant.level", {"i": i})
        await asyncio.sleep(0.05)  # written to the socket
        assert handled.unreceipted == raising.unreceipted == 10
        broker.kill()
        async with asyncio.timeout(WAIT):
            while handled.connected or raising.connected:
                await asyncio.sleep(0.02)
        assert [e.payload["i"] for e in reported[0].events] == list(range(10))
        with pytest.raises(PublishFailedError) as caught:  # no handler: the next publish says
            await raising.publish("plant.level", {"i": 10})
        assert [e.payload["i"] for e in caught.value.events] == list(range(10))
        assert handled.publishes_failed == raising.publishes_failed == 10
    finally:
        broker.stop()


async def test_closing_while_the_broker_is_away_reports_what_it_never_took(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess("--journal", str(tmp_path))
    broker.start()
    try:
        reported: list[PublishFailedError] = []
        client = await _connect(broker.url, "alice", on_publish_failed=reported.append)
        broker.kill()
        async with asyncio.timeout(WAIT):
            while client.connected:
                await asyncio.sleep(0.02)
        await client.publish("plant.level", {"i": 0})  # buffered while disconnected
        await client.close()
        assert [e.payload["i"] for e in reported[0].events] == [0]
    finally:
        broker.stop()


async def test_kill_9_five_times_unconfirmed_publishes_are_delivered_or_reported(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess("--journal", str(tmp_path), "--journal-fsync", "none")
    broker.start()
    try:
        publisher = await _connect(broker.url, "alice", buffer_size=100_000)
        subscriber = await _connect(broker.url, "bob")
        sub = await subscriber.subscribe("plant.*", resume=True)
        returned: list[int] = []  # publish() returned: delivered, or reported below
        failed: set[int] = set()
        sent = 0
        for _round in range(5):
            for _ in range(600):
                try:
                    await publisher.publish("plant.level", {"i": sent})
                    returned.append(sent)
                except PublishFailedError as exc:  # earlier ones; this one was not sent
                    failed.update(int(e.payload["i"]) for e in exc.events)
                    failed.add(sent)
                except BufferFullError:
                    failed.add(sent)
                sent += 1
                if sent % 50 == 0:
                    await asyncio.sleep(0)  # what was published leaves in one write
                if sent % 600 == 300:  # mid-round, just after a write: kill -9, restart
                    broker.kill()
                    await asyncio.to_thread(broker.restart)
            await publisher.wait_connected(WAIT)
        try:
            await publisher.flush(WAIT)
        except PublishFailedError as exc:
            failed.update(int(e.payload["i"]) for e in exc.events)
        assert publisher.unreceipted == 0
        expected = [i for i in returned if i not in failed]
        got: list[int] = []
        with contextlib.suppress(TimeoutError):  # what is missing then is named below
            async with asyncio.timeout(WAIT):
                while len(got) < len(expected):
                    got.append(int((await sub.get()).payload["i"]))
        await asyncio.sleep(0.3)
        while sub.pending():
            got.append(int((await sub.get()).payload["i"]))
        assert len(got) == len(set(got)), "an event was delivered twice"
        lost = sorted(set(expected) - set(got))
        assert not lost, f"{len(lost)} events whose publish returned were lost silently: {lost}"
        assert got == sorted(got), "events came out of order"
        assert len(failed) < sent // 2
        await publisher.close()
        await subscriber.close()
    finally:
        broker.stop()


async def test_a_resent_event_the_journal_already_holds_is_not_routed_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = BrokerConfig(port=0, open=True, journal=JournalSetting(str(tmp_path), fsync="none"))
    async with Broker(config) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        publisher = await connect(url, backoff_initial=0.05, backoff_max=0.1)
        subscriber = await connect(url)
        sub = await subscriber.subscribe("plant.*")
        monkeypatch.setattr(Link, "_receipt", lambda self: None)  # its receipts get lost
        for i in range(5):
            await publisher.publish("plant.level", {"i": i})
        await publisher.flush()  # routed and journaled, never receipted
        assert publisher.unreceipted == 5
        monkeypatch.undo()
        assert publisher._transport is not None
        publisher._transport._abort()  # the link is lost: the five are resent unless known
        async with asyncio.timeout(WAIT):
            while publisher.reconnects < 1:
                await asyncio.sleep(0.01)
        await publisher.publish("plant.level", {"i": 5})
        await publisher.flush()
        assert publisher.unreceipted == 0
        got = [int((await sub.get()).payload["i"]) for _ in range(6)]
        await asyncio.sleep(0.1)
        assert got == list(range(6)) and not sub.pending()
        assert broker.journal.last_seq == 6
        await publisher.close()
        await subscriber.close()


async def test_a_client_that_does_not_ask_gets_no_receipts() -> None:
    async with Broker(BrokerConfig(port=0, open=True)) as broker:
        client = await connect(f"bus://127.0.0.1:{broker.port}", receipts=False)
        heard: list[tuple[int, int]] = []
        assert client._transport is not None
        client._transport.on_receipt = lambda count, seq: heard.append((count, seq))
        for i in range(20):
            await client.publish("plant.level", {"i": i})
        await client.flush()
        assert heard == [] and client.unreceipted == 0
        await client.close()


async def test_a_client_that_gives_up_reconnecting_reports_what_it_held(tmp_path: Path) -> None:
    broker = BrokerProcess("--journal", str(tmp_path))
    broker.start()
    try:
        client = await _connect(broker.url, "alice", give_up_after=0.5)
        assert broker.process is not None
        broker.process.send_signal(signal.SIGSTOP)
        await client.publish("plant.level", {"i": 0})  # written, never receipted
        await asyncio.sleep(0.05)
        broker.kill()  # and it does not come back
        async with asyncio.timeout(WAIT):
            while client.connected:
                await asyncio.sleep(0.02)
        await client.publish("plant.level", {"i": 1})  # buffered while it tries
        with pytest.raises(PublishFailedError) as caught:
            async with asyncio.timeout(WAIT):
                while True:  # until it gives up: then the next publish says what failed
                    await asyncio.sleep(0.1)
                    await client.publish("plant.level", {"i": 2})
        assert [e.payload["i"] for e in caught.value.events][:2] == [0, 1]
        with pytest.raises(ClosedError):
            await client.publish("plant.level", {"i": 3})
    finally:
        broker.stop()


async def test_a_broker_without_receipts_is_still_published_to_at_most_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Broker._control_reply

    def older(self: Broker, link: Link, message: Message, cmd: str) -> Message:
        if cmd == "manage.receipts":  # what a broker from before receipts answers
            return message.nak(f"unknown command {cmd!r}", 404)
        return original(self, link, message, cmd)

    monkeypatch.setattr(Broker, "_control_reply", older)
    async with Broker(BrokerConfig(port=0, open=True)) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        publisher, subscriber = await connect(url), await connect(url)
        sub = await subscriber.subscribe("plant.*")
        for i in range(3):
            await publisher.publish("plant.level", {"i": i})
        await publisher.flush()
        assert publisher.unreceipted == 0  # nothing kept: no receipt would ever come
        assert [int((await sub.get()).payload["i"]) for _ in range(3)] == [0, 1, 2]
        await publisher.close()
        await subscriber.close()
