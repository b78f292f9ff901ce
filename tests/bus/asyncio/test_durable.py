"""Durable subscriptions (PROTOCOL.md 5.14): what a subscriber missed comes from the journal,
then live events, none twice, across a broker's kill -9, a slow reader and a late start.

The broker runs as a child process with a journal (``busgate broker --journal``) where it is
killed; in-process otherwise.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus.asyncio.client import Client, Subscription, connect
from bus.broker import Broker, BrokerConfig
from bus.broker.config import JournalSetting
from bus.broker.replay import replay_batch
from bus.errors import BusError, NotJournaledError
from bus.journal import Journal
from bus.message.message import Message, decode_message, encode_message
from tests.bus.test_cli_client import BUSGATE
from tests.bus.test_journal_reservation import power_loss
from tests.conftest import OFFICES, BrokerProcess
from tests.docexamples import examples

WAIT = 15.0


async def _connect(url: str, name: str, **options: object) -> Client:
    return await connect(url, name, OFFICES[name], backoff_initial=0.05, backoff_max=0.3, **options)  # type: ignore[arg-type]


async def _take(sub: Subscription, count: int) -> list[int]:
    got: list[int] = []
    async with asyncio.timeout(WAIT):
        while len(got) < count:
            message = await sub.get()
            got.append(int(message.payload["i"]))
    return got


@pytest.fixture
async def journaled(tmp_path: Path) -> AsyncIterator[str]:
    config = BrokerConfig(port=0, open=True, journal=JournalSetting(str(tmp_path), fsync="none"))
    async with Broker(config) as broker:
        yield f"bus://127.0.0.1:{broker.port}"


async def test_since_replays_the_journal_then_goes_live_in_order(journaled: str) -> None:
    publisher = await connect(journaled)
    for i in range(50):
        await publisher.publish("sensor.temp", {"i": i})
        await publisher.publish("other.thing", {"i": -1})
    await publisher.flush()
    late = await connect(journaled)
    sub = await late.subscribe("sensor.*", since=0)
    for i in range(50, 60):
        await publisher.publish("sensor.temp", {"i": i})
    got = await _take(sub, 60)
    assert got == list(range(60))  # the journal's 50, then live, in order, none twice
    assert sub.position is not None and sub.position > 100  # its place in the journal
    # A plain subscriber of the same pattern on the same client gets live events only.
    plain = await late.subscribe("sensor.*")
    await publisher.publish("sensor.temp", {"i": 60})
    assert await _take(plain, 1) == [60] and await _take(sub, 1) == [60]
    assert plain.pending() == 0 and sub.pending() == 0
    await publisher.close()
    await late.close()


async def test_since_time_replays_from_a_moment(journaled: str) -> None:
    publisher = await connect(journaled)
    for i in range(5):
        await publisher.publish("log.line", {"i": i})
    await publisher.flush()
    await asyncio.sleep(0.05)
    moment = time.time()
    for i in range(5, 8):
        await publisher.publish("log.line", {"i": i})
    await publisher.flush()
    reader = await connect(journaled)
    sub = await reader.subscribe("log.*", since_time=moment)
    assert await _take(sub, 3) == [5, 6, 7]
    await publisher.close()
    await reader.close()


async def test_a_reader_too_slow_for_its_queue_catches_up_from_the_journal(journaled: str) -> None:
    publisher = await connect(journaled)
    reader = await connect(journaled, queue_size=50)
    sub = await reader.subscribe("burst.*", resume=True)
    total = 3000
    for i in range(total):
        await publisher.publish("burst.x", {"i": i})
    await publisher.flush()
    got = await _take(sub, total)
    assert got == list(range(total))  # a plain subscriber would have dropped most
    assert sub.dropped == 0 and sub.resumes >= 1
    await publisher.close()
    await reader.close()


async def test_without_a_journal_resuming_is_refused_with_a_clear_error() -> None:
    # Issue 30 item 2: on a broker without --journal, resume=True was a silent promise: a
    # durable subscriber missed 1,283 of 6,101 events across kill -9 rounds with gaps at 0.
    async with Broker(BrokerConfig(port=0, open=True)) as broker:
        client = await connect(f"bus://127.0.0.1:{broker.port}")
        for kind in ({"resume": True}, {"since": 0}, {"since_time": time.time()}):
            with pytest.raises(NotJournaledError, match="no journal.*--journal DIR") as refused:
                await client.subscribe("a.*", **kind)  # type: ignore[arg-type]
            assert refused.value.rcd == 409
        plain = await client.subscribe("a.*")  # nothing left half-subscribed; plain is live
        await client.publish("a.b", {"i": 1})
        assert (await plain.get(WAIT)).payload["i"] == 1 and plain.pending() == 0
        await client.close()


async def test_a_journal_filter_that_keeps_none_of_the_pattern_is_refused(tmp_path: Path) -> None:
    setting = JournalSetting(str(tmp_path), filter="sensor.>", fsync="none")
    async with Broker(BrokerConfig(port=0, open=True, journal=setting)) as broker:
        client = await connect(f"bus://127.0.0.1:{broker.port}")
        with pytest.raises(NotJournaledError, match="does not keep 'door.*'"):
            await client.subscribe("door.*", resume=True)
        kept = await client.subscribe("sensor.*", resume=True)  # what it keeps still resumes
        await client.publish("sensor.t", {"i": 1})
        assert (await kept.get(WAIT)).seq is not None
        await client.close()


async def test_a_broker_back_without_its_journal_makes_a_durable_subscriber_count_the_gap(
    tmp_path: Path,
) -> None:
    # kill -9, then the broker comes back without --journal: what was published meanwhile
    # cannot be replayed, so the subscription says so (gaps, last_gap) and goes on live.
    broker = BrokerProcess("--journal", str(tmp_path))
    broker.start()
    try:
        publisher = await _connect(broker.url, "alice")
        subscriber = await _connect(broker.url, "bob")
        sub = await subscriber.subscribe("plant.*", resume=True)
        await publisher.publish("plant.level", {"i": 0})
        await publisher.flush()  # receipted: not sent again after the restart
        assert await _take(sub, 1) == [0]
        broker.kill()
        broker.extra = ()  # the same port, no journal
        await asyncio.to_thread(broker.restart)
        async with asyncio.timeout(WAIT):
            while sub.gaps == 0:
                await asyncio.sleep(0.02)
        assert sub.gaps == 1 and "no journal" in sub.last_gap
        await publisher.wait_connected(WAIT)
        await publisher.publish("plant.level", {"i": 1})
        assert await _take(sub, 1) == [1]  # live again
        await publisher.close()
        await subscriber.close()
    finally:
        broker.stop()


async def test_kill_9_five_times_durable_subscribers_lose_nothing_and_see_nothing_twice(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess("--journal", str(tmp_path), "--journal-fsync", "always")
    broker.start()
    try:
        publisher = await _connect(broker.url, "alice")
        subscriber = await _connect(broker.url, "bob")
        sub = await subscriber.subscribe("plant.*", resume=True)
        confirmed: list[int] = []
        failed = 0
        sent = 0
        for _round in range(5):
            for _ in range(60):
                try:
                    await publisher.publish("plant.level", {"i": sent}, confirm=True, timeout=5.0)
                    confirmed.append(sent)
                except BusError:
                    failed += 1  # the caller heard: not counted as delivered
                sent += 1
                if sent % 60 == 30:  # mid-round: kill -9, restart on the same port
                    broker.kill()
                    await asyncio.to_thread(broker.restart)
            await publisher.wait_connected(WAIT)
        got = await _take(sub, len(confirmed))
        await asyncio.sleep(0.3)
        while sub.pending():
            got.append(int((await sub.get()).payload["i"]))
        assert len(got) == len(set(got)), "an event was delivered twice"
        assert set(confirmed) <= set(got), "a confirmed event was lost"
        assert got == sorted(got), "events came out of order"
        # It resumed after its reconnections (under load several kills can fall within one
        # outage of the subscriber's, so only "at least one" is certain).
        assert sub.resumes >= subscriber.reconnects >= 1
        assert failed < sent // 2
        await publisher.close()
        await subscriber.close()
    finally:
        broker.stop()


async def test_a_power_loss_that_cuts_the_journal_makes_no_durable_subscriber_skip(
    tmp_path: Path,
) -> None:
    # Issue 30 item 3: the broker delivers before it fsyncs (fsync interval, the default); a
    # power loss cut the journal's unsynced tail, the restarted broker numbered new events
    # 21..50 again, and a subscriber whose position was 50 skipped them (30 of 50 missed).
    broker = BrokerProcess(
        "--journal", str(tmp_path), "--journal-fsync-interval-ms", "3600000",
    )  # fmt: skip
    broker.start()
    try:
        publisher = await _connect(broker.url, "alice")
        subscriber = await _connect(broker.url, "bob")
        sub = await subscriber.subscribe("plant.*", resume=True)
        for i in range(50):
            await publisher.publish("plant.level", {"i": i})
        await publisher.flush()
        assert await _take(sub, 50) == list(range(50))
        broker.kill()
        power_loss(tmp_path, keep=20)  # nothing was fsynced: records 21..50 are gone
        await asyncio.to_thread(broker.restart)
        await publisher.wait_connected(WAIT)
        for i in range(50, 100):
            await publisher.publish("plant.level", {"i": i})
        await publisher.flush()
        assert await _take(sub, 50) == list(range(50, 100))  # every new event, in order
        await publisher.close()
        await subscriber.close()
    finally:
        broker.stop()


async def _listen(url: str, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = await asyncio.create_subprocess_exec(
        BUSGATE, "listen", *args, "--bus", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    # a hang guard that also covers the process's start (seconds on a loaded host)
    out, err = await asyncio.wait_for(proc.communicate(), 4 * WAIT)
    lines = [json.loads(line) for line in out.decode().splitlines()]
    return proc.returncode or 0, lines, err.decode()


async def test_busgate_listen_since_a_sequence_number_or_a_time(journaled: str) -> None:
    publisher = await connect(journaled)
    for i in range(4):
        await publisher.publish("door.open", {"i": i})
    await publisher.flush()
    code, lines, err = await _listen(journaled, "door.*", "--since", "0", "--count", "4")
    assert code == 0, err
    assert [line["payload"]["i"] for line in lines] == [0, 1, 2, 3]
    seqs = [line["header"]["SEQ"] for line in lines]
    assert seqs == sorted(seqs)
    # From the SEQ of the second one: the two after it.
    code, lines, _ = await _listen(journaled, "door.*", "--since", str(seqs[1]), "--count", "2")
    assert [line["payload"]["i"] for line in lines] == [2, 3]
    code, lines, _ = await _listen(journaled, "door.*", "--since", "15m", "--count", "4")
    assert [line["payload"]["i"] for line in lines] == [0, 1, 2, 3]
    code, _, err = await _listen(journaled, "door.*", "--since", "yesterday-ish")
    assert code == 2 and "sequence number" in err
    await publisher.close()


async def test_busgate_listen_since_says_when_the_broker_keeps_no_journal() -> None:
    async with Broker(BrokerConfig(port=0, open=True)) as broker:  # it replayed nothing, silently
        code, lines, err = await _listen(f"bus://127.0.0.1:{broker.port}", "a.*", "--since", "15m")
    assert code == 1 and lines == [] and "no journal" in err and "--journal DIR" in err


def test_the_documented_replay_batch(tmp_path: Path) -> None:
    (example,) = examples("resume")
    with Journal(tmp_path) as journal:
        for item in example.body["published"].split("; "):
            type_, payload = item.split(" ", 1)
            journal.append(encode_message(Message.event(type_, json.loads(payload))), time.time())
        request = json.loads(example.body["request"].split(" ", 1)[1])
        batch = replay_batch(
            journal.reader().records(since_seq=request["since"] + 1),
            request["pattern"],
            request["since"],
            end_seq=journal.last_seq,
        )
    answer = json.loads(example.body["answer"])
    assert (batch.last_seq, len(batch.events), batch.more) == (
        answer["seq"], answer["replayed"], answer["more"]
    )  # fmt: skip
    shown = []
    for raw in batch.events:
        message = decode_message(raw)
        shown.append(f"SEQ={message.seq} RPL={message.rpl} {json.dumps(message.payload_data())}")
    assert "; ".join(shown) == example.body["events"]


_PUBLISHER = """
import asyncio, sys
from bus.asyncio.client import connect
async def main():
    client = await connect(sys.argv[1], "alice", sys.argv[2])
    for i in range(int(sys.argv[3])):
        await client.publish("flood.x", {"i": i, "pad": "x" * 2000})
    await client.flush()
    await client.close()
asyncio.run(main())
"""


async def test_a_subscriber_evicted_by_the_broker_resumes_with_every_event_in_order(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(
        "--journal", str(tmp_path), "--journal-fsync", "none", "--max-queue-bytes", "65536",
    )  # fmt: skip
    broker.start()
    try:
        subscriber = await _connect(broker.url, "bob")
        sub = await subscriber.subscribe("flood.*", resume=True)
        total = 8000
        # This process stops reading until the publisher is done (its whole loop blocks on
        # the child): 16 MB pass the socket buffers and the broker's 64 KiB queue for it, and
        # the broker evicts it as a slow consumer.
        publisher = subprocess.run(
            [sys.executable, "-c", _PUBLISHER, broker.url, OFFICES["alice"], str(total)],
            timeout=120, check=False,
        )  # fmt: skip
        assert publisher.returncode == 0
        got = await _take(sub, total)
        assert got == list(range(total))
        assert subscriber.reconnects >= 1 and sub.resumes >= 1  # it was evicted, and resumed
        await subscriber.close()
    finally:
        broker.stop()


async def test_since_returns_when_the_journal_holds_more_than_the_queue(journaled: str) -> None:
    # subscribe() waited for the whole catch-up, and each batch for the reader to make room: a
    # journal of more than half the queue hung it for good, as nobody could read yet.
    publisher = await connect(journaled)
    total = 400
    for i in range(total):
        await publisher.publish("backlog.x", {"i": i})
    await publisher.flush()
    reader = await connect(journaled, queue_size=50)
    async with asyncio.timeout(WAIT):
        sub = await reader.subscribe("backlog.*", since=0)
    await publisher.publish("backlog.x", {"i": total})  # live, after the backlog
    assert await _take(sub, total + 1) == list(range(total + 1))  # in order, none twice
    assert sub.dropped == 0 and sub.pending() == 0
    await publisher.close()
    await reader.close()


async def test_a_catch_up_of_several_batches_gives_every_event_once_in_order(
    journaled: str,
) -> None:
    # Batches of 1,000: the broker reads each on from where the one before ended (its cursor),
    # over events of other types between them.
    publisher = await connect(journaled)
    total = 2_600
    for i in range(total):
        await publisher.publish("mill.rpm", {"i": i})
        if i % 3 == 0:
            await publisher.publish("other.noise", {"i": -1})
    await publisher.flush()
    reader = await connect(journaled)
    sub = await reader.subscribe("mill.*", since=0)
    assert await _take(sub, total) == list(range(total))
    again = await reader.subscribe("mill.*", since=0)  # a second catch-up, same link and pattern
    assert await _take(again, total) == list(range(total))
    await publisher.publish("mill.rpm", {"i": total})
    assert await _take(sub, 1) == [total] and await _take(again, 1) == [total]
    assert sub.pending() == 0 and again.pending() == 0
    await publisher.close()
    await reader.close()


async def test_the_broker_reads_the_next_batch_ahead_and_forgets_it_with_the_link(
    tmp_path: Path,
) -> None:
    config = BrokerConfig(port=0, open=True, journal=JournalSetting(str(tmp_path), fsync="none"))
    async with Broker(config) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        publisher = await connect(url)
        total = 3_500
        for i in range(total):
            await publisher.publish("tank.level", {"i": i})
        await publisher.flush()
        reader = await connect(url, queue_size=1_000)  # full after one batch: asks no more
        sub = await reader.subscribe("tank.*", since=0)
        async with asyncio.timeout(WAIT):
            while not any(c.ready for c in broker._replay_cursors.values()):
                await asyncio.sleep(0.01)
        (cursor,) = broker._replay_cursors.values()
        assert cursor.ready is not None and len(cursor.ready.events) == 1_000
        assert broker._read_ahead_bytes == cursor.size > 0
        assert await _take(sub, total) == list(range(total))
        assert broker._replay_cursors == {} and broker._read_ahead_bytes == 0
        # A link that goes midway takes its place in the journal with it.
        other = await connect(url, queue_size=1_000)
        await other.subscribe("tank.*", since=0)
        async with asyncio.timeout(WAIT):
            while not any(c.ready for c in broker._replay_cursors.values()):
                await asyncio.sleep(0.01)
        await other.close()
        async with asyncio.timeout(WAIT):
            while broker._replay_cursors:
                await asyncio.sleep(0.01)
        assert broker._read_ahead_bytes == 0
        await publisher.close()
        await reader.close()


async def test_the_batch_that_reaches_the_end_is_read_when_asked_for(tmp_path: Path) -> None:
    # It comes with the live subscription: read ahead, it would miss what is journaled
    # between the reading and the asking.
    config = BrokerConfig(port=0, open=True, journal=JournalSetting(str(tmp_path), fsync="none"))
    async with Broker(config) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        publisher = await connect(url)
        for i in range(1_500):
            await publisher.publish("tank.level", {"i": i})
        await publisher.flush()
        reader = await connect(url, queue_size=1_000)  # full after one batch: asks no more
        sub = await reader.subscribe("tank.*", since=0)
        await asyncio.sleep(0.1)  # the broker's turn to read ahead
        (cursor,) = broker._replay_cursors.values()
        assert cursor.ready is None  # the rest reaches the end: not read ahead
        for i in range(1_500, 1_800):  # journaled before the client asks for the rest
            await publisher.publish("tank.level", {"i": i})
        await publisher.flush()
        assert await _take(sub, 1_800) == list(range(1_800))
        await publisher.publish("tank.level", {"i": 1_800})
        assert await _take(sub, 1) == [1_800] and sub.pending() == 0
        await publisher.close()
        await reader.close()
