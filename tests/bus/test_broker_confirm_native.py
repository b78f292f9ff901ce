"""The confirm lane in C (bus/broker/confirm_native.py, bus/native/_hotpath_confirm.c; PROTOCOL.md
5.12, 8, 10.1): each publish it takes gets the record, the window entry and the held ACK the
Python lane (bus/broker/confirming.py) gives it, and it leaves every other body to that lane."""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

import bus.broker.link as link_module
from bus.broker import confirm_native
from bus.broker import confirming as confirming_module
from bus.broker.config import JournalSetting
from bus.broker.replay import with_seq
from bus.journal import JournalReader
from bus.journal.segments import read_index
from bus.journal.writer import record_bytes
from bus.link import wire
from bus.message import message_binary
from bus.message.ids import format_id
from bus.message.message import Message, encode_message, read_message
from tests.bus.test_broker_server import RawLink
from tests.conftest import MakeBroker, MakeClient

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

WAIT = 10.0
OFFICE = "alice"
INBOX = "_INBOX.alice.c1"


def _publish(n: int, *, mid: bool = True, trc: str | None = None, **fields: Any) -> bytes:
    event = Message.event(fields.pop("grp", "sensor.temp"), {"n": n})
    event.rpy = fields.pop("rpy", INBOX)
    if not mid:
        event.mid = None
    event.trc = trc
    for name, value in fields.items():
        setattr(event, name, value)
    return encode_message(event)


class _Run:
    """One call of the C run with a journal window of plain numbers: what it took and left."""

    def __init__(self, seq: int = 41, reserved: int = 2**62, offset: int = 100,
                 max_segment: int = 10**9, block_end: int = 10**9) -> None:  # fmt: skip
        self.seq, self.offset = seq, offset
        self.window = (seq, reserved, offset, max_segment, block_end, 1 << 24)
        self.seen: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
        self.pending: list[bytes] = []
        self.held: list[tuple[int, str, bytes, bytes]] = []
        self.ids = os.urandom(16 * 64)

    def __call__(
        self, bodies: list[bytes], entries: int = 100_000, subscribers: Any = lambda grp: []
    ) -> tuple[Any, ...]:
        run = confirm_native._RUN
        assert run is not None
        return run(
            bodies, 0, 64, OFFICE.encode(), False, 1 << 20, 100, 10_000, 255, OFFICE, self.seen,
            entries, 7.5, self.window, record_bytes, 1234, self.pending, subscribers,
            None, with_seq, self.ids, 0, self.held, None, None, "central",
        )  # fmt: skip


native = pytest.mark.skipif(
    not confirm_native.NATIVE or not message_binary.lanes_on(), reason="no C accelerator"
)


@native
def test_each_publish_taken_gets_the_reference_record_window_entry_and_ack() -> None:
    # seq crosses 2**32 within the run: the ACK's seq goes from U32 to S64, as the encoder writes it
    run = _Run(seq=2**32 - 3)
    bodies = [_publish(0), _publish(1, trc="t-1"), _publish(2, mid=False), _publish(3, trc="x")]
    taken, seq, offset, ids_at, dropped, evicted, error = run(bodies)
    assert (taken, seq, ids_at, dropped, evicted, error) == (4, 2**32 + 1, 64, 4, False, None)
    seqs = list(range(2**32 - 2, 2**32 + 2))
    assert run.pending == [record_bytes(raw, 1234, s) for raw, s in zip(bodies, seqs, strict=True)]
    assert offset == 100 + sum(map(len, run.pending))
    for k, (raw, s, held) in enumerate(zip(bodies, seqs, run.held, strict=True)):
        publish = read_message(raw)
        ack = message_binary.reply_bytes(
            INBOX, publish.mid, format_id(run.ids, 16 * k), "ACK", "central", publish.trc,
            {"seq": s},
        )  # fmt: skip
        assert held == (s, INBOX, ack, raw)
        answer = read_message(held[2])
        assert (answer.typ, answer.rid, answer.payload["seq"], answer.src) == (  # type: ignore[index]
            "ACK", publish.mid, s, "central",
        )  # fmt: skip
    mids = [read_message(raw).mid for raw in bodies]
    assert run.seen == {(OFFICE, mids[k]): (seqs[k], 7.5) for k in (0, 1, 3)}


@native
@pytest.mark.parametrize(
    "case",
    ["retry", "json", "non-ascii inbox", "system type", "forged src", "plain event",
     "reserved seq", "index block ends", "segment full"],
)  # fmt: skip
def test_a_body_the_c_lane_cannot_answer_alone_is_left_untouched(case: str) -> None:
    first, last = _publish(0), _publish(2)
    run = _Run()
    record = len(record_bytes(first, 1234, 42))
    second = _publish(1)
    if case == "retry":
        second = first
    elif case == "json":
        second = b'{"MID":"m-1","GRP":"sensor.temp","TYP":"EVT","RPY":"_INBOX.x","PLD":{"n":1}}'
    elif case == "non-ascii inbox":
        second = _publish(1, rpy="_INBOX.caf\u00e9")
    elif case == "system type":
        second = _publish(1, grp="OAM.sensor")
    elif case == "forged src":
        second = _publish(1, src="mallory")
    elif case == "plain event":
        second = _publish(1, rpy=None)
    elif case == "reserved seq":
        run = _Run(reserved=42)
    elif case == "index block ends":
        run = _Run(block_end=100 + record)
    else:
        run = _Run(max_segment=100 + record + 10)
    taken, seq, offset, _, _, _, error = run([first, second, last])
    assert (taken, seq, offset, error) == (1, 42, 100 + record, None)
    assert len(run.pending) == len(run.held) == len(run.seen) == 1


@native
def test_the_window_keeps_its_newest_entries_and_says_it_let_the_oldest_go() -> None:
    run = _Run()
    bodies = [_publish(n) for n in range(4)]
    looked: list[str] = []  # a type nobody receives is looked up once per run
    assert run(bodies[:2], subscribers=lambda grp: looked.append(grp) or [])[0] == 2
    assert looked == ["sensor.temp"]
    run = _Run()
    assert run(bodies, entries=2)[:6] == (
        4,
        45,
        run.window[2] + sum(map(len, run.pending)),
        64,
        4,
        True,
    )
    mids = [read_message(raw).mid for raw in bodies]
    assert list(run.seen) == [(OFFICE, mids[2]), (OFFICE, mids[3])]


@native
def test_a_failure_midway_is_returned_with_what_was_taken_before_it() -> None:
    # the record of the publish being routed is appended (as the Python loop appends before it
    # delivers); the caller accounts for it and raises (confirm_native.native_confirms)
    def subscribers(grp: str) -> list[int]:
        if len(run.pending) == 2:
            raise RuntimeError("lookup failed")
        return []

    run = _Run()
    bodies = [_publish(n, grp=f"sensor.t{n}") for n in range(3)]  # a lookup each
    taken, seq, offset, _, dropped, _, error = run(bodies, subscribers=subscribers)
    assert (taken, seq, offset, dropped) == (2, 43, 100 + sum(map(len, run.pending)), 1)
    assert isinstance(error, RuntimeError) and str(error) == "lookup failed"
    assert (len(run.pending), len(run.held), len(run.seen)) == (2, 1, 1)


def _shared_first_nine(name: str) -> tuple[Any, tuple[Any, ...]]:
    """``route`` or ``confirm_run`` and the arguments after the nine they share
    (bus/native/_hotpath.h parse_run_args), for one publish nobody receives."""
    if name == "route":
        return link_module._ROUTE, ({}, {}, [], None, lambda grp: [], with_seq)
    run = _Run()
    rest = (OFFICE, run.seen, 100_000, 7.5, run.window, record_bytes, 1234, run.pending)
    rest += (lambda grp: [], None, with_seq, run.ids, 0, run.held, None, None, "central")
    return confirm_native._RUN, rest


@native
@pytest.mark.parametrize("name", ["route", "confirm_run"])
def test_both_runs_read_the_arguments_they_share_alike_and_refuse_bad_ones(name: str) -> None:
    function, rest = _shared_first_nine(name)
    assert function is not None
    bodies = [_publish(0), _publish(1)]

    def call(bodies: Any = bodies, start: int = 0, limit: int = 64, office: Any = b"alice",
             max_depth: int = 100) -> tuple[Any, ...]:  # fmt: skip
        return function(  # type: ignore[no-any-return]
            bodies, start, limit, office, False, 1 << 20, max_depth, 10_000, 255, *rest
        )

    assert call(start=2)[0] == 2  # nothing left: an empty run
    assert call(start=5)[0] == 5
    assert call(limit=0)[0] == 0
    # a negative start or limit would read before the list: refused, nothing taken
    for bad in ({"start": -1}, {"limit": -1}, {"max_depth": -1}):
        with pytest.raises(ValueError, match=f"{name}\\(\\): start, limit and max_depth"):
            call(**bad)
    for bad_types in ({"bodies": tuple(bodies)}, {"office": "alice"}):
        with pytest.raises(TypeError, match=f"{name}\\(\\): bad argument types"):
            call(**bad_types)
    if name == "confirm_run":
        assert call(limit=1)[:2] == (1, 42)  # one taken: seq 42, the window's next


# --- through a broker, on both lanes ----------------------------------------------------------


@pytest.fixture(params=["c", "python"])
def lane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c" and not confirming_module.NATIVE:
        pytest.skip("no C confirm lane")
    if request.param == "python":
        monkeypatch.setattr(confirming_module, "NATIVE", False)
    return str(request.param)


@pytest.mark.parametrize("fsync", ["none", "interval"])
async def test_a_burst_across_segments_and_index_blocks_is_journaled_once_in_order(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path, lane: str, fsync: str
) -> None:
    # Small segments and index blocks: the C lane hands the record that starts a new one to the
    # journal's own path mid-run, and takes the run up again after it.
    setting = JournalSetting(
        str(tmp_path), fsync=fsync, fsync_interval_ms=20, max_segment_bytes=16_384
    )
    broker = await make_broker(journal=setting)
    journal = broker.journal
    journal.index_interval = journal._blocks.interval = 2048
    url = f"bus://127.0.0.1:{broker.port}"
    sub = await (await make_client(url, "bob")).subscribe("sensor")
    link = await RawLink.open(broker.port)
    try:
        await link.connect_sha256(OFFICE, "AB.alice", inbox=INBOX)
        count = 300
        bodies = [_publish(n, trc=f"t{n}" if n % 3 else None) for n in range(count)]
        link.writer.write(b"".join(wire.encode_message(raw) for raw in bodies))
        answers = [await link.next() for _ in range(count)]  # each within RawLink's wait
    finally:
        link.close()
    assert all(isinstance(a, Message) and a.typ == "ACK" for a in answers), answers[:3]
    sent = [read_message(raw) for raw in bodies]
    # (the pure-Python build may send an ACK whose record an fsync already covered before
    # earlier ones still held: matched by RID, PROTOCOL.md 5.12)
    acks = {a.rid: a for a in answers}  # type: ignore[union-attr]
    assert sorted(acks) == sorted(e.mid for e in sent)  # type: ignore[type-var]
    assert [acks[e.mid].trc for e in sent] == [e.trc for e in sent]
    seqs = [acks[e.mid].payload["seq"] for e in sent]  # type: ignore[index]
    assert seqs == list(range(seqs[0], seqs[0] + count))  # one record each, in order
    events = [await sub.get(WAIT) for _ in range(count)]
    assert [(e.payload["n"], e.seq) for e in events] == list(enumerate(seqs))
    assert len(list(tmp_path.glob("*.seg"))) >= 3, sorted(p.name for p in tmp_path.iterdir())
    records = [r for r in JournalReader(tmp_path).records() if b"sensor.temp" in r.raw]
    assert [(r.seq, r.raw) for r in records] == list(zip(seqs, bodies, strict=True))
    # each segment's index (the sealed ones' files, the live one's in the writer) counts and
    # numbers its blocks' records as they are in the segment
    live = journal.segment_path
    for segment in sorted(tmp_path.glob("*.seg")):
        index = journal._live_index()[1] if segment == live else read_index(segment)
        assert index is not None, segment
        offsets = [(r.offset, r.seq) for r in records if Path(r.path) == segment]
        assert index.count >= len(offsets) > 0  # (the first segment holds link notices too)
        for block, end in index.block_ranges():
            inside = [seq for offset, seq in offsets if block.offset <= offset < end]
            if inside:
                assert (block.count, block.first_seq) == (len(inside), inside[0]), segment
    for at in seqs[::17]:  # found through the segments' indexes
        found = next(iter(JournalReader(tmp_path).records(since_seq=at)))
        assert (found.seq, found.raw) == (at, bodies[at - seqs[0]])
