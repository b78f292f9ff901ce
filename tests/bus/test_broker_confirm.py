"""Confirmed publishes and flush (bus/broker/confirm.py, PROTOCOL.md 5.12): real brokers."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.asyncio.client import connect
from bus.broker import confirming as confirming_module
from bus.broker import link as link_module
from bus.broker import routing as routing_module
from bus.broker.config import JournalSetting
from bus.broker.confirm import Confirmations
from bus.broker.link import Link
from bus.broker.server import Broker
from bus.errors import ConfigError, NakError
from bus.journal import JournalReader
from bus.link import wire
from bus.link.connection import control_message
from bus.message import header, message_binary
from bus.message import message as message_module
from bus.message.message import Message, decode_message, encode_message, read_message
from tests.bus.test_broker_server import RawLink
from tests.conftest import OFFICES, BrokerProcess, MakeBroker, MakeClient, NatsServer

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

WAIT = 5.0


# --- the window, time as an argument ----------------------------------------------------------


def test_a_retry_is_known_within_the_window_and_forgotten_after() -> None:
    confirms = Confirmations(window=10.0, entries=3)
    confirms.remember("alice", "m1", 7, now=0.0)
    assert confirms.duplicate("alice", "m1", now=9.9) == 7
    assert confirms.duplicate("bob", "m1", now=1.0) is None  # per post office
    assert confirms.duplicate("alice", "m1", now=10.0) is None
    for n in range(5):
        confirms.remember("alice", f"x{n}", n, now=20.0)
    assert confirms.duplicate("alice", "x0", now=20.0) is None  # bounded: the oldest go
    assert confirms.duplicate("alice", "x4", now=20.0) == 4


def test_held_acks_go_out_in_order_once_their_records_are_fsynced() -> None:
    confirms = Confirmations()
    for seq in (3, 4, 5):
        confirms.wait_for_sync(seq, "_INBOX.a", b"ack%d" % seq)
    assert confirms.synced(2) == []
    assert confirms.synced(4) == [("_INBOX.a", b"ack3"), ("_INBOX.a", b"ack4")]
    assert confirms.waiting == 1 and confirms.synced(9) == [("_INBOX.a", b"ack5")]


# --- against a broker -------------------------------------------------------------------------


@pytest.mark.parametrize("fsync", ["always", "interval"])
async def test_a_confirmed_publish_is_journaled_fsynced_and_delivered(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path, fsync: str
) -> None:
    setting = JournalSetting(str(tmp_path), fsync=fsync, fsync_interval_ms=100)
    broker = await make_broker(journal=setting)
    url = f"bus://127.0.0.1:{broker.port}"
    subscriber = await make_client(url, "bob")
    sub = await subscriber.subscribe("sensor")
    publisher = await make_client(url)
    seqs = [await publisher.publish("sensor.temp", {"n": n}, confirm=True) for n in range(5)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert broker.journal.synced_seq >= seqs[-1]  # on disk when the ACK came
    records = {r.seq: decode_message(r.raw) for r in JournalReader(tmp_path).records()}
    assert [records[seq].payload["n"] for seq in seqs] == list(range(5))  # type: ignore[index]
    assert [(await sub.get(WAIT)).payload["n"] for _ in range(5)] == list(range(5))


async def test_a_slow_fsync_for_a_confirm_stalls_no_other_traffic(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The interval policy fsyncs for the confirms that wait; a disk that takes its time must
    # not stop the broker routing everything else meanwhile.
    setting = JournalSetting(str(tmp_path), fsync="interval", fsync_interval_ms=60_000)
    broker = await make_broker(journal=setting)
    url = f"bus://127.0.0.1:{broker.port}"
    watcher = await (await make_client(url, "bob")).subscribe("other")
    publisher = await make_client(url)
    entered, released = threading.Event(), threading.Event()
    fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        entered.set()
        released.wait(10)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    # A broker that fsyncs on its loop's thread waits here until this timer lets it go.
    valve = threading.Timer(3.0, released.set)
    valve.start()
    try:
        confirm = asyncio.create_task(publisher.publish("sensor.t", {"n": 1}, confirm=True))
        assert await asyncio.to_thread(entered.wait, 10)
        await publisher.publish("other.t", {"n": 2})
        assert (await watcher.get(WAIT)).payload["n"] == 2
        assert not released.is_set()  # delivered while the fsync was still running
        assert not confirm.done()  # and the confirm still waits for it
        released.set()
        seq = await asyncio.wait_for(confirm, WAIT)
        assert seq is not None and broker.journal.synced_seq >= seq
    finally:
        released.set()
        valve.cancel()


async def test_a_retry_with_the_same_mid_is_neither_journaled_nor_delivered_twice(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="always"))
    subscriber = await make_client(f"bus://127.0.0.1:{broker.port}", "bob")
    sub = await subscriber.subscribe("sensor")
    link = await RawLink.open(broker.port)
    await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.raw1")
    event = Message.event("sensor.temp", {"c": 21})
    event.rpy = "_INBOX.raw1"
    first = second = None
    for _ in range(2):  # a publisher that did not hear the first ACK sends it again
        link.send(event)
        reply = await link.next()
        assert isinstance(reply, Message) and reply.typ == "ACK" and reply.rid == event.mid
        first, second = second, reply
    assert first is not None and second is not None
    assert first.payload["seq"] == second.payload["seq"] and second.payload["duplicate"] is True
    assert len([r for r in JournalReader(tmp_path).records() if b"sensor.temp" in r.raw]) == 1
    assert (await sub.get(WAIT)).payload["c"] == 21
    with pytest.raises(TimeoutError):
        await sub.get(0.3)
    assert broker.stats["duplicates"] == 1
    link.close()


async def test_without_a_journal_a_confirm_is_refused_but_the_event_delivered(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker()
    url = f"bus://127.0.0.1:{broker.port}"
    sub = await (await make_client(url, "bob")).subscribe("sensor")
    publisher = await make_client(url)
    with pytest.raises(NakError, match="not journaled") as refused:
        await publisher.publish("sensor.temp", {"c": 1}, confirm=True)
    assert refused.value.rcd == 503
    assert (await sub.get(WAIT)).payload["c"] == 1
    assert await publisher.publish("sensor.temp", {"c": 2}) is None  # unconfirmed: as before


async def test_flush_returns_once_everything_sent_before_is_routed(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    broker = await make_broker(journal=JournalSetting(str(tmp_path)))
    publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
    before = broker.stats["routed"]
    for n in range(2000):
        await publisher.publish("bulk.x", {"n": n})
    seq = await publisher.flush()
    assert broker.stats["routed"] - before == 2000 and seq == broker.journal.last_seq >= 2000


@pytest.mark.slow
async def test_kill_9_and_restart_lose_no_confirmed_publish_and_journal_none_twice(
    tmp_path: Path,
) -> None:
    # Issue 13: events whose publish() returned were lost when the broker was killed. With
    # confirm, every publish that returned is in the journal, and the ones in flight at the kill
    # are sent again after the restart and journaled once.
    broker = BrokerProcess("--journal", str(tmp_path), "--journal-fsync", "always")
    broker.start()
    try:
        publisher = await connect(broker.url, "alice", OFFICES["alice"], timeout=30)
        confirmed: dict[int, int] = {}

        async def publish_all() -> None:
            for n in range(600):
                confirmed[n] = await publisher.publish("sensor.temp", {"n": n}, confirm=True)

        task = asyncio.create_task(publish_all())
        for round_ in range(3):
            while len(confirmed) < 100 * (round_ + 1):
                await asyncio.sleep(0.01)
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(0.3)
            await asyncio.to_thread(broker.restart)
        await asyncio.wait_for(task, 60)
        await publisher.close()
    finally:
        broker.stop()
    journaled: dict[int, list[int]] = {}
    for record in JournalReader(tmp_path).records():
        message = decode_message(record.raw)
        if message.grp == "sensor.temp":
            journaled.setdefault(int(message.payload["n"]), []).append(record.seq or 0)
    assert sorted(journaled) == list(range(600))  # none lost
    assert all(len(seqs) == 1 for seqs in journaled.values()), {
        n: s for n, s in journaled.items() if len(s) > 1
    }  # none twice
    assert all(journaled[n] == [seq] for n, seq in confirmed.items())


async def test_on_nats_flush_works_and_confirm_says_it_cannot(nats_server: NatsServer) -> None:
    client = await connect(nats_server.url)
    try:
        await client.publish("bulk.x", {"n": 1})
        assert await client.flush() == 0
        with pytest.raises(ConfigError, match="at most once"):
            await client.publish("bulk.x", {"n": 2}, confirm=True)
    finally:
        await client.close()


@pytest.fixture
async def always(make_broker: MakeBroker, tmp_path: Path) -> Broker:
    """A broker journaling under ``fsync always``."""
    return await make_broker(journal=JournalSetting(str(tmp_path), fsync="always"))


@pytest.fixture
def failing_fsync(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """``os.fsync`` fails with EIO while the returned event is set (it starts set)."""
    failing = threading.Event()
    failing.set()
    fsync = os.fsync

    def broken_fsync(fd: int) -> None:
        if failing.is_set():
            raise OSError(5, "Input/output error")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", broken_fsync)
    return failing


async def test_under_fsync_always_nothing_leaves_before_its_fsync_and_a_burst_shares_one(
    always: Broker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fsync always promises that nothing the broker sends (a delivery, a receipt, an ACK)
    # names a record that is not on disk yet; it keeps that promise with one fsync per input
    # batch, not one per record (a test's 12,000-event burst took over 5 s of fsyncs). The
    # coalescing clock (a flush, and so an fsync, every 0.5 ms of routing) is taken out of the
    # picture: on a slow or loaded host it made the count of fsyncs a measure of time.
    monkeypatch.setattr(link_module, "COALESCE_SECONDS", 3600.0)
    broker = always
    unsynced: list[int] = []
    write_batch = Link.write_batch

    def checked(link: Link) -> None:
        journal = link.broker.journal
        if link.batch and journal.synced_seq < journal.last_seq:
            unsynced.append(journal.last_seq - journal.synced_seq)
        write_batch(link)

    monkeypatch.setattr(Link, "write_batch", checked)
    url = f"bus://127.0.0.1:{broker.port}"
    sub = await (await make_client(url, "bob")).subscribe("sensor")
    publisher = await make_client(url)
    total = 2_000
    for n in range(total):
        await publisher.publish("sensor.temp", {"n": n})
    seq = await publisher.publish("sensor.temp", {"n": total}, confirm=True)
    assert [(await sub.get(WAIT)).payload["n"] for _ in range(total + 1)] == list(range(total + 1))
    assert unsynced == []
    assert broker.journal.synced_seq >= seq == total + 1
    assert broker.journal.fsyncs < total / 10


async def test_under_fsync_always_a_failed_fsync_holds_the_ack_until_one_succeeds(
    always: Broker, make_client: MakeClient, failing_fsync: threading.Event
) -> None:
    broker = always
    publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
    confirming = asyncio.create_task(publisher.publish("sensor.temp", {"n": 1}, confirm=True))
    await asyncio.sleep(0.5)
    assert not confirming.done()  # journaled, but not on disk: no ACK yet
    assert broker.stats["journal_errors"] >= 1
    failing_fsync.clear()
    seq = await asyncio.wait_for(confirming, WAIT)  # the broker tried again
    assert broker.journal.synced_seq >= seq


async def test_under_fsync_always_a_held_ack_leaves_when_another_command_fsynced_its_record(
    always: Broker,
) -> None:
    # One read holds a confirmed publish and then manage.journal, which fsyncs the journal
    # before reading it. The batch's commit then found nothing left to fsync and returned
    # before releasing the held ACK: the publisher waited for some later journaled message.
    link = await RawLink.open(always.port)
    try:
        await link.connect_sha256("admin", "AB.admin", inbox="_INBOX.adm1")
        event = Message.event("sensor.temp", {"c": 21})
        event.rpy = "_INBOX.adm1"
        query = control_message("manage.journal", {"limit": 1})
        link.writer.write(
            wire.encode_message(encode_message(event)) + wire.encode_message(encode_message(query))
        )
        answers = {}
        for _ in range(2):
            reply = await link.next()  # within WAIT, or TimeoutError
            assert isinstance(reply, Message) and reply.typ == "ACK", reply
            answers[reply.rid] = reply
        assert set(answers) == {event.mid, query.mid}
        seq = answers[event.mid].payload["seq"]
        assert always.journal.synced_seq >= seq
        assert answers[query.mid].payload.to_dict()["records"][0]["MID"] == event.mid
    finally:
        link.close()


# --- fsync none: one write() per input batch, no ACK before it ---------------------------------


@pytest.fixture(params=["c", "python"])
def lanes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The accelerated path (C routing, the confirm lane reading headers in C, the ACK written
    by the C encoder, a run of them journaled and answered by bus/native/_hotpath_confirm.c)
    or the pure-Python one (the broker's Python routing and dispatch, every
    message decoded, the ACK built as a Message)."""
    if request.param == "c":
        if link_module._ROUTE is None or not message_binary.lanes_on() or not header.accelerated():
            pytest.skip("the C accelerators are not in use")
        yield "c"
        return
    monkeypatch.setattr(link_module, "_ROUTE", None)
    monkeypatch.setattr(confirming_module, "NATIVE", False)  # the confirm lane's C run
    monkeypatch.setattr(message_binary, "_fast_texts", None)
    was = header.accelerated()
    header.use_accelerator(False)
    try:
        yield "python"
    finally:
        header.use_accelerator(was)


def _journal_writes(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the os.write calls made to the broker's journal segment from now on."""
    sizes: list[int] = []
    write = os.write

    def counted(fd: int, data: bytes) -> int:
        if fd == broker.journal._fd:
            sizes.append(len(data))
        return write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    return sizes


async def _confirmed_burst(link: RawLink, inbox: str, count: int) -> list[Message]:
    """``count`` confirmed publishes in one TCP write; their answers, in arrival order."""
    events = []
    for n in range(count):
        event = Message.event("sensor.temp", {"n": n})
        event.rpy = inbox
        events.append(event)
    link.writer.write(b"".join(wire.encode_message(encode_message(e)) for e in events))
    answers = []
    for _ in range(count):
        reply = await link.next()  # within WAIT, or TimeoutError
        assert isinstance(reply, Message), reply
        answers.append(reply)
    assert [a.rid for a in answers] == [e.mid for e in events]  # in the order sent
    return answers


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the broker links' reads, as they come (patched before the link is made: uvloop
    binds the method when the connection is made)."""
    reads: list[int] = []
    data_received = Link.data_received

    def counted(into: Link, data: bytes) -> None:
        reads.append(len(data))
        data_received(into, data)

    monkeypatch.setattr(Link, "data_received", counted)
    return reads


async def test_under_fsync_none_a_burst_is_journaled_with_one_write_per_batch_before_any_ack(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lanes: str,
) -> None:
    # Output is handed on once per read from a link (the coalescing clock is taken out of the
    # picture: with it, also every 0.5 ms of routing), and the journal's records go with one
    # write() before it; before, every record was its own write().
    monkeypatch.setattr(link_module, "COALESCE_SECONDS", 3600.0)
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    url = f"bus://127.0.0.1:{broker.port}"
    sub = await (await make_client(url, "bob")).subscribe("sensor")
    early: list[int] = []  # output written while records it may name were not written yet
    write_batch = Link.write_batch

    def checked(out: Link) -> None:
        journal = out.broker.journal
        if out.batch and journal.written_seq < journal.last_seq:
            early.append(journal.last_seq - journal.written_seq)
        write_batch(out)

    monkeypatch.setattr(Link, "write_batch", checked)
    reads = _count_reads(monkeypatch)
    link = await RawLink.open(broker.port)
    try:
        await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.burst")
        reads.clear()
        writes = _journal_writes(broker, monkeypatch)
        count = 300
        answers = await _confirmed_burst(link, "_INBOX.burst", count)
        assert all(a.typ == "ACK" for a in answers), [a.msg for a in answers if a.typ != "ACK"]
        seqs = [a.payload["seq"] for a in answers]
        assert seqs == sorted(seqs) and len(set(seqs)) == count  # in order, one record each
        assert [(await sub.get(WAIT)).payload["n"] for _ in range(count)] == list(range(count))
        assert early == []
        # at most one write() per read, not one per record (300 events arrive in a few reads)
        assert 0 < len(writes) <= len(reads) < count, (len(writes), len(reads))
        records = [r for r in JournalReader(tmp_path).records() if b"sensor.temp" in r.raw]
        assert [r.seq for r in records] == seqs
    finally:
        link.close()


@pytest.mark.parametrize("fsync", ["none", "always"])
async def test_the_acks_of_a_burst_leave_in_one_write_per_batch_each_counted(
    make_broker: MakeBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str
) -> None:
    # The ACKs released together for one inbox are one write to its link (was: one per ACK);
    # the link's count of messages sent (manage.connections) still counts each ACK.
    monkeypatch.setattr(link_module, "COALESCE_SECONDS", 3600.0)
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync=fsync))
    writes: list[int] = []
    write = Link.write

    def counted_write(out: Link, data: bytes, control: bool = False) -> bool:
        if not control and out.conn is not None and out.conn.office == "alice":
            writes.append(len(data))
        return write(out, data, control)

    monkeypatch.setattr(Link, "write", counted_write)
    reads = _count_reads(monkeypatch)
    link = await RawLink.open(broker.port)
    try:
        await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.grouped")
        (ours,) = [out for out in broker._links.values() if out.conn.office == "alice"]
        reads.clear()
        sent_before = ours.messages_out
        count = 300
        answers = await _confirmed_burst(link, "_INBOX.grouped", count)
        assert all(a.typ == "ACK" for a in answers)
        assert 0 < len(writes) <= len(reads) < count, (len(writes), len(reads))
        assert ours.messages_out - sent_before == count
    finally:
        link.close()


@pytest.mark.parametrize("fsync", ["none", "interval", "always"])
async def test_a_burst_mixing_retries_json_and_plain_events_is_answered_in_order(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lanes: str,
    fsync: str,
) -> None:
    # The confirm lane takes runs of confirmed publishes; what it leaves (a retry, a JSON
    # body, a plain event) goes the one-by-one way, and every answer comes in the order sent
    # (within one read: the coalescing clock may write a batch's ACKs before a retry of one
    # of them is read, and the retry's ACK then leaves before the ACKs still held).
    monkeypatch.setattr(link_module, "COALESCE_SECONDS", 3600.0)
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync=fsync))
    sub = await (await make_client(f"bus://127.0.0.1:{broker.port}", "bob")).subscribe("sensor")
    link = await RawLink.open(broker.port)
    try:
        await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.mixed")
        sent: list[Message] = []
        for n in range(40):
            event = Message.event("sensor.temp", {"n": n})
            if n % 10 != 7:  # every tenth a plain event, no answer
                event.rpy = "_INBOX.mixed"
            if n % 10 == 3:
                event.enc = "JSON"
            if n % 10 == 5:  # a retry of the publish two before (same MID)
                event = read_message(encode_message(sent[-2]))
            sent.append(event)
        link.writer.write(b"".join(wire.encode_message(encode_message(e)) for e in sent))
        confirmed = [e for e in sent if e.rpy]
        answers = []
        for _ in confirmed:
            reply = await link.next()
            assert isinstance(reply, Message) and reply.typ == "ACK", reply
            answers.append(reply)
        assert [a.rid for a in answers] == [e.mid for e in confirmed]  # in the order sent
        seq_of: dict[str, int] = {}
        for event, answer in zip(confirmed, answers, strict=True):
            payload = answer.payload.to_dict()
            if event.mid in seq_of:
                assert payload == {"seq": seq_of[event.mid], "duplicate": True}
            else:
                seq_of[event.mid] = payload["seq"]
        unique = [n for n in range(40) if n % 10 != 5]
        assert [(await sub.get(WAIT)).payload["n"] for _ in unique] == unique
        records = [r for r in JournalReader(tmp_path).records() if b"sensor.temp" in r.raw]
        assert len(records) == len(unique)  # a retry is not journaled again
        assert sorted(seq_of.values()) == [r.seq for r in records if r.raw.count(b"RPY")]
    finally:
        link.close()


async def test_a_burst_the_journal_s_filter_leaves_out_is_delivered_and_answered_nak(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path, lanes: str
) -> None:
    setting = JournalSetting(str(tmp_path), fsync="none", filter="other.>")
    broker = await make_broker(journal=setting)
    sub = await (await make_client(f"bus://127.0.0.1:{broker.port}", "bob")).subscribe("sensor")
    link = await RawLink.open(broker.port)
    try:
        await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.filtered")
        for _ in range(2):  # the second burst goes through the lane's runs
            answers = [
                (a.typ, a.rcd, "filter" in (a.msg or ""))
                for a in await _confirmed_burst(link, "_INBOX.filtered", 20)
            ]
            assert answers == [("NAK", 503, True)] * 20
            assert [(await sub.get(WAIT)).payload["n"] for _ in range(20)] == list(range(20))
        assert broker.journal.last_seq == 0
    finally:
        link.close()


async def test_under_fsync_none_a_failed_journal_write_is_answered_nak_never_ack(
    make_broker: MakeBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lanes: str
) -> None:
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    link = await RawLink.open(broker.port)
    try:
        await _nak_when_full(broker, link, tmp_path, monkeypatch)
    finally:
        link.close()


async def _nak_when_full(
    broker: Broker, link: RawLink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.full")
    await _confirmed_burst(link, "_INBOX.full", 1)  # the segment is open
    write = os.write

    def full(fd: int, data: bytes) -> int:
        if fd == broker.journal._fd:
            raise OSError(28, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(os, "write", full)
    answers = await _confirmed_burst(link, "_INBOX.full", 20)
    assert [(a.typ, a.rcd) for a in answers] == [("NAK", 503)] * 20
    assert all("could not write" in (a.msg or "") for a in answers)
    assert broker.stats["journal_errors"] >= 1
    monkeypatch.setattr(os, "write", write)
    # the same publish again (same MID): journaled now, not taken for a duplicate of a record
    # the journal lost
    retry = Message.event("sensor.temp", {"n": 99})
    retry.mid = answers[0].rid
    retry.rpy = "_INBOX.full"
    link.send(retry)
    reply = await link.next()
    assert isinstance(reply, Message) and reply.typ == "ACK" and reply.rid == retry.mid
    assert "duplicate" not in reply.payload.to_dict()
    seq = reply.payload["seq"]
    held = {r.seq: r.raw for r in JournalReader(tmp_path).records()}
    assert retry.mid.encode() in held[seq] and len(held) == 2


def test_the_direct_ack_is_the_frame_path_s_ack_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    event = Message.event("sensor.temp", {"n": 1})
    event.rpy, event.trc = "_INBOX.a", "trace-1"
    read = read_message(encode_message(event))
    fresh = "6f1c2a8e-4b1d-4c2e-9a3f-0123456789ab"
    direct = message_binary.reply_bytes(
        read.rpy, read.mid, fresh, "ACK", "central", read.trc, {"seq": 7}
    )
    if direct is None:
        pytest.skip("the C encoder is not in use")
    monkeypatch.setattr(message_binary, "_fast_texts", None)  # the frame path writes it
    monkeypatch.setattr(message_module, "new_id", lambda: fresh)
    assert direct == encode_message(read.ack({"seq": 7}, src="central"))


async def test_a_confirmed_publish_with_a_forged_src_is_stamped_and_confirmed(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path, lanes: str
) -> None:
    # the confirm lane takes only publishes whose SRC already names the sender; this one goes
    # the usual way, which stamps it (5.11)
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    sub = await (await make_client(f"bus://127.0.0.1:{broker.port}", "bob")).subscribe("sensor")
    link = await RawLink.open(broker.port)
    try:
        await _forged_and_honest(link, sub)
    finally:
        link.close()


async def _forged_and_honest(link: RawLink, sub: Any) -> None:
    await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.forged")
    forged = Message.event("sensor.temp", {"n": 1})
    forged.rpy, forged.src = "_INBOX.forged", "bob"
    honest = Message.event("sensor.temp", {"n": 2})
    honest.rpy, honest.src = "_INBOX.forged", "alice"
    link.send(forged)
    link.send(honest)
    for event in (forged, honest):
        reply = await link.next()
        assert isinstance(reply, Message) and reply.typ == "ACK" and reply.rid == event.mid
    got = [await sub.get(WAIT) for _ in range(2)]
    assert [(m.payload["n"], m.src) for m in got] == [(1, "alice"), (2, "alice")]
    assert [m.seq for m in got] == sorted(m.seq for m in got) and got[0].seq is not None


async def test_under_fsync_always_a_retry_is_not_answered_before_its_first_copy_is_fsynced(
    always: Broker, failing_fsync: threading.Event
) -> None:
    # A publisher that did not hear the first ACK sends the same MID again; the answer
    # "duplicate, seq N" says N is journaled as the policy promises, so it waits for that too
    # (it left at once, naming a record not on disk yet).
    broker = always
    link = await RawLink.open(broker.port)
    try:
        await link.connect_sha256("alice", "AB.alice", inbox="_INBOX.retry")
        event = Message.event("sensor.temp", {"n": 1})
        event.rpy = "_INBOX.retry"
        link.send(event)
        await _until(lambda: broker.stats["journal_errors"] >= 1)  # journaled, fsync failed
        link.send(event)  # the retry
        await _until(lambda: broker.stats["duplicates"] == 1)  # read and answered, or held
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await link.next()  # an answer would have been written with the retry's read
        failing_fsync.clear()
        answers = [await link.next(), await link.next()]
        assert all(isinstance(a, Message) and a.typ == "ACK" for a in answers), answers
        first, second = (a.payload.to_dict() for a in answers if isinstance(a, Message))
        assert first == {"seq": second["seq"]} and second["duplicate"] is True
        assert broker.journal.synced_seq >= first["seq"]
    finally:
        link.close()


async def test_a_confirm_nobody_receives_is_looked_up_once_and_a_later_subscriber_gets_the_next(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lanes: str,
) -> None:
    # Journal-only confirms (no live subscriber) redid the whole pattern match for every event;
    # the empty answer is remembered now, and forgotten when anyone subscribes.
    broker = await make_broker(journal=JournalSetting(str(tmp_path), fsync="none"))
    url = f"bus://127.0.0.1:{broker.port}"
    bob = await make_client(url, "bob")
    await bob.subscribe("other.*")  # a wildcard nobody's confirms match: the lookup tries it
    await _until(lambda: "other.*" in broker.router.patterns())
    matched: list[tuple[str, ...]] = []
    match_tokens = routing_module.match_tokens

    def counted(pattern: tuple[str, ...], tokens: tuple[str, ...] | list[str]) -> bool:
        matched.append(pattern)
        return match_tokens(pattern, tokens)

    monkeypatch.setattr(routing_module, "match_tokens", counted)
    publisher = await make_client(url)
    first = await publisher.publish("sensor.temp", {"n": 1}, confirm=True)
    assert matched  # the first confirm looked for subscribers
    matched.clear()
    second = await publisher.publish("sensor.temp", {"n": 2}, confirm=True)
    assert second > first and matched == []  # the second did not look again
    sub = await bob.subscribe("sensor.*")
    await _until(lambda: "sensor.*" in broker.router.patterns())
    await publisher.publish("sensor.temp", {"n": 3}, confirm=True)
    assert (await sub.get(WAIT)).payload["n"] == 3  # the remembered "nobody" was forgotten
    assert broker.stats["dropped"] >= 2


async def _until(condition: Any, timeout: float = WAIT) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)
