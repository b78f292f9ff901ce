"""History and last values from the broker's journal (bus/broker/history.py and
history_commands.py, PROTOCOL.md 5.15): pages read forward and backward, the journal's filter
refused with a 409 naming it, the last event of each type then live ones."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from bus.asyncio.client import Client
from bus.broker import history_commands
from bus.broker.config import JournalSetting
from bus.broker.history import Coverage, coverage, read_before
from bus.errors import ConfigError, NakError, NotJournaledError
from bus.journal import Journal, JournalFilter, JournalReader
from bus.message.message import Message, encode_message, read_message
from tests.conftest import MakeBroker, MakeClient
from tests.docexamples import examples


@pytest.mark.parametrize(
    ("groups", "types", "pattern", "kept"),
    [
        (None, None, "sensor.*", Coverage.ALL),
        (("sensor.>",), None, "sensor.*", Coverage.ALL),
        (("sensor.>",), None, "sensor", Coverage.SOME),  # the major type itself is left out
        (("sensor.temp",), None, "sensor.*", Coverage.SOME),
        (("sensor.*",), None, "sensor.temp", Coverage.ALL),
        (("sensor.*",), None, "pump.on", Coverage.NONE),
        (("*.temp",), None, "sensor.*", Coverage.SOME),
        (("demo",), None, "demo.x", Coverage.NONE),  # the filter's "demo" is that group alone
        (None, frozenset({"RQS", "ACK"}), "sensor.temp", Coverage.NONE),
        (("sensor.>",), frozenset({"EVT"}), ">", Coverage.SOME),
    ],
)
def test_coverage_follows_the_journal_filter(
    groups: tuple[str, ...] | None, types: frozenset[str] | None, pattern: str, kept: Coverage
) -> None:
    assert coverage(JournalFilter(groups=groups, types=types), pattern) is kept


def test_coverage_without_a_journal_and_a_bad_pattern() -> None:
    assert coverage(None, "sensor.*") is Coverage.NONE
    with pytest.raises(ConfigError):
        coverage(None, "sensor.>.x")


def test_read_before_finds_a_rare_type_far_back_and_stops_at_the_scan_bound(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path, fsync="none", max_segment_bytes=64 * 1024)
    now = time.time()
    rare = [journal.append(encode_message(Message.event("rare.one", {"i": 0})), now)]
    for i in range(3000):
        journal.append(encode_message(Message.event("busy.one", {"i": i})), now)
    rare.append(journal.append(encode_message(Message.event("rare.one", {"i": 1})), now))
    journal.close()
    reader = JournalReader(tmp_path)
    page = read_before(
        reader, "rare.*", before_seq=journal.last_seq + 1, limit=5, max_bytes=1 << 20
    )
    assert [r.seq for r in page.events] == rare and not page.more
    bounded = read_before(
        reader, "rare.*", before_seq=journal.last_seq + 1, limit=5, max_bytes=1 << 20, max_scan=1000
    )
    # stopped early: what it found, and where to go on from
    assert [r.seq for r in bounded.events] == rare[1:]
    assert bounded.more and bounded.next is not None and bounded.next["before"] > rare[0]


async def _journaled(make_broker: MakeBroker, tmp_path: Path, **journal: str) -> str:
    setting = JournalSetting(str(tmp_path), fsync="none", **journal)
    broker = await make_broker(open=True, journal=setting)
    return f"bus://127.0.0.1:{broker.port}"


async def _publish(client: Client, events: list[tuple[str, int]]) -> list[int]:
    return [await client.publish(t, {"i": i}, confirm=True) for t, i in events]


def _ids(page_events: list[object]) -> list[tuple[str, int]]:
    return [(e.message.grp, e.message.payload["i"]) for e in page_events]  # type: ignore[attr-defined]


async def test_history_pages_forward_backward_and_from_a_time(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    client = await make_client(await _journaled(make_broker, tmp_path))
    started = time.time()
    events = [(t, i) for i in range(6) for t in ("tank.level", "tank.temp", "pump.on")]
    seqs = await _publish(client, events)
    newest = await client.history("tank.level", limit=2)
    assert _ids(newest.events) == [("tank.level", 4), ("tank.level", 5)]  # oldest first
    assert [e.seq for e in newest.events] == [seqs[12], seqs[15]]
    assert newest.seq == seqs[-1] and newest.more and newest.next == {"before": seqs[12]}
    back = await client.history("tank.level", limit=2, **newest.next)  # the page before
    assert _ids(back.events) == [("tank.level", 2), ("tank.level", 3)]
    forward = await client.history("tank.*", limit=3, since=seqs[3])
    assert _ids(forward.events) == [("tank.temp", 1), ("tank.level", 2), ("tank.temp", 2)]
    assert forward.more and forward.next == {"since": seqs[7]}
    rest = await client.history("tank.*", limit=100, since=forward.next["since"])
    assert len(rest.events) == 6 and not rest.more and rest.next is None
    timed = await client.history("pump", since_time=started - 1, limit=100)  # a major type
    assert _ids(timed.events) == [("pump.on", i) for i in range(6)]
    assert all(started - 1 <= e.time <= time.time() for e in timed.events)
    window = await client.history("tank.temp", since=seqs[0], before=seqs[7])
    assert _ids(window.events) == [("tank.temp", 0), ("tank.temp", 1)]
    assert (await client.history("door.open")).events == []  # kept, but nothing happened


async def test_a_type_the_journal_does_not_keep_is_409_naming_its_filter(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    url = await _journaled(make_broker, tmp_path, filter="tank.>,alarm")
    client = await make_client(url)
    await _publish(client, [("tank.level", 1)])
    await client.publish("alarm.fire", {"i": 2})  # not journaled: the filter's alarm is exact
    with pytest.raises(NotJournaledError) as refused:
        await client.history("pump.*")
    assert refused.value.rcd == 409
    assert "--journal-filter tank.>,alarm" in refused.value.msg
    with pytest.raises(NotJournaledError):
        await client.subscribe("pump.on", last=True)
    assert "pump.on" not in client._subs  # nothing stays subscribed
    some = await client.history("alarm")  # the filter keeps alarm, not alarm.fire
    assert some.events == [] and some.filter == "--journal-filter tank.>,alarm"
    plain = await make_client(f"bus://127.0.0.1:{(await make_broker(open=True)).port}")
    with pytest.raises(NotJournaledError, match="keeps no journal"):
        await plain.history("tank.level")
    with pytest.raises(NakError) as bad:
        await client.history("tank.level", before=-1)
    assert bad.value.rcd == 400


async def test_last_gives_the_newest_of_each_type_then_live_events_none_twice(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    url = await _journaled(make_broker, tmp_path)
    publisher = await make_client(url)
    seqs = await _publish(publisher, [("tank.level", 1), ("tank.temp", 2), ("tank.level", 3)])
    await _publish(publisher, [("pump.on", 4)])
    reader = await make_client(url, name="bob")
    sub = await reader.subscribe("tank.*", last=True)
    first = [await sub.get(5) for _ in range(2)]
    assert [(m.grp, m.payload["i"], m.seq) for m in first] == [
        ("tank.temp", 2, seqs[1]),
        ("tank.level", 3, seqs[2]),
    ]
    await _publish(publisher, [("tank.temp", 5)])
    live = await sub.get(5)
    assert (live.grp, live.payload["i"]) == ("tank.temp", 5)
    with pytest.raises(TimeoutError):
        await sub.get(0.3)  # nothing twice
    # a second subscriber reads on from where the first left the last values
    again = await (await make_client(url, name="carol")).subscribe("tank.*", last=True)
    assert [(m.grp, m.payload["i"]) for m in [await again.get(5), await again.get(5)]] == [
        ("tank.level", 3),
        ("tank.temp", 5),
    ]


async def test_last_values_of_a_long_journal_are_read_in_a_worker_thread_first(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(history_commands, "_THREAD_AFTER", 100)  # 20,000 records, made small
    url = await _journaled(make_broker, tmp_path)
    client = await make_client(url)
    for i in range(300):
        await client.publish(f"mill.m{i % 7}", {"i": i})
    await client.flush()
    # meanwhile the broker answers others: the scan runs off its loop
    reader, other = await make_client(url, name="carol"), await make_client(url, name="bob")
    sub, _ = await asyncio.gather(reader.subscribe("mill.*", last=True), other.flush())
    got = {m.grp: m.payload["i"] for m in [await sub.get(5) for _ in range(7)]}
    assert got == {f"mill.m{k}": max(i for i in range(300) if i % 7 == k) for k in range(7)}


async def test_the_documented_history_page(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    (example,) = examples("history")
    client = await make_client(await _journaled(make_broker, tmp_path))
    for item in example.body["published"].split("; "):
        type_, payload = item.split(" ", 1)
        await client.publish(type_, json.loads(payload), confirm=True)
    request = json.loads(example.body["request"].split(" ", 1)[1])
    answer = await client.manage("manage.history", request)
    data = answer.payload_data()
    wanted = json.loads(example.body["answer"])
    assert {key: data[key] for key in wanted} == wanted
    shown = [read_message(raw) for raw in data["events"]]
    text = "; ".join(f"{m.grp} {json.dumps(m.payload_data())}" for m in shown)
    assert text == example.body["events"]
