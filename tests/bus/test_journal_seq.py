"""Sequence numbers and segment indexes (bus/journal): numbering across restarts, reading from a
sequence number or a time without scanning the journal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bus.journal import (
    SEGMENT_HEADER_SIZE,
    FsyncPolicy,
    Journal,
    JournalFilter,
    JournalReader,
    decode_index,
    encode_segment_header,
    index_path,
    list_segments,
    read_index,
    read_segment,
    segment_name,
)
from tests.docexamples import examples

T0 = 1_700_000_000.0


def raw(i: int) -> bytes:
    return b"message-%06d-" % i + b"." * (i % 40)


def damage_record(segment: Path, nth: int) -> int:
    """Flip a CRC byte of the nth record of a segment (in place); returns its offset."""
    at = [r.offset for r in read_segment(segment)][nth]
    with open(segment, "r+b") as fh:
        fh.seek(at + 5)
        byte = fh.read(1)
        fh.seek(at + 5)
        fh.write(bytes([byte[0] ^ 0xFF]))
    return at


def test_every_record_gets_the_next_number_across_rotations_and_restarts(tmp_path: Path) -> None:
    got: list[int | None] = []
    for run in range(3):
        with Journal(tmp_path, max_segment_bytes=600) as journal:
            assert journal.last_seq == run * 20
            got += [journal.append(raw(i), T0 + i) for i in range(run * 20, run * 20 + 20)]
            assert journal.last_seq == run * 20 + 20
    assert got == list(range(1, 61))
    records = list(JournalReader(tmp_path).records())
    assert [r.seq for r in records] == got and [r.raw for r in records] == [
        raw(i) for i in range(60)
    ]
    assert len(list_segments(tmp_path)) > 6
    assert JournalReader(tmp_path).last_seq() == 60


def test_filtered_messages_get_no_number(tmp_path: Path) -> None:
    with Journal(tmp_path, filter=JournalFilter(types=frozenset({"RQS"}))) as journal:
        assert journal.append(b'{"TYP":"EVT"}', T0) is None
        assert journal.append(b'{"TYP":"RQS"}', T0) == 1
        assert journal.append(b"x" * 10, T0) is None
        assert journal.append(b'{"TYP":"RQS"}', T0) == 2


def test_the_number_survives_an_empty_or_damaged_newest_segment(tmp_path: Path) -> None:
    with Journal(tmp_path, max_segment_bytes=500) as journal:
        for i in range(30):
            journal.append(raw(i), T0 + i)
    segments = list_segments(tmp_path)
    # a crash between creating a segment and writing its first record: only the header
    empty = tmp_path / segment_name(len(segments) + 1)
    empty.write_bytes(encode_segment_header(T0 + 40, 31))
    with Journal(tmp_path) as journal:
        assert journal.last_seq == 30 and journal.append(raw(30), T0 + 50) == 31
    # the newest segment's only record damaged beyond use: the number comes from its header
    newest = list_segments(tmp_path)[-1]
    damage_record(newest, 0)
    with Journal(tmp_path) as journal:
        # record 31 is damaged, but 31 was handed out: the reserved mark keeps it used
        assert journal.last_seq == 31
        assert journal.damage and journal.append(raw(31), T0 + 51) == 32
    # a damaged segment header: the number comes from the records
    newest = list_segments(tmp_path)[-1]
    with open(newest, "r+b") as fh:
        fh.write(b"XX")
    with Journal(tmp_path) as journal:
        assert journal.last_seq == 32 and journal.append(raw(32), T0 + 52) == 33


def test_read_from_a_number_skips_earlier_segments_and_blocks(tmp_path: Path) -> None:
    with Journal(tmp_path, max_segment_bytes=20_000, index_interval=2_000) as journal:
        for i in range(1000):
            journal.append(raw(i), T0 + i)
    segments = list_segments(tmp_path)
    assert len(segments) > 3 and all(index_path(s).exists() for s in segments)
    # damage early records: a reader that skips them never sees the damage
    damage_record(segments[0], 5)
    damage_record(segments[2], 1)
    reader = JournalReader(tmp_path)
    got = [r.seq for r in reader.read_from(900)]
    assert got == list(range(900, 1001)) and reader.damage == []
    middle = [r.seq for r in reader.records(since_seq=400, until_seq=420)]
    assert middle == list(range(400, 420))
    by_time = [r.seq for r in reader.records(since=T0 + 700, until=T0 + 710)]
    assert by_time == list(range(701, 711)) and reader.damage == []
    everything = list(reader.records())
    assert len(everything) == 998 and len(reader.damage) == 2


def test_reading_on_from_where_a_read_ended_gives_the_same_records(tmp_path: Path) -> None:
    # records(at=...) is how the broker reads a catch-up's next batch: from the end of the
    # batch before, not from the index block holding it.
    journal = Journal(tmp_path, max_segment_bytes=20_000, index_interval=2_000)
    try:
        for i in range(1000):
            journal.append(raw(i), T0 + i)
        reader = journal.reader()
        everything = {r.seq: r for r in reader.records()}
        segments = list_segments(tmp_path)
        last_of_first = max(r.seq for r in everything.values() if r.path == str(segments[0]))
        for k in (2, 137, last_of_first + 1, 640, 999, 1000):
            before = everything[k - 1]
            at = (before.path, before.end)
            want = [(r.seq, r.raw) for r in reader.records(since_seq=k)]
            assert [(r.seq, r.raw) for r in reader.records(since_seq=k, at=at)] == want
            gone = (str(tmp_path / "gone.seg"), before.end)  # a segment no longer there
            assert [(r.seq, r.raw) for r in reader.records(since_seq=k, at=gone)] == want
        # Reading starts at `at`: damage between the block's start and it is never read.
        in_third = [r.seq for r in read_segment(segments[2])]
        k = in_third[4]
        damage_record(segments[2], 2)  # the record of k - 2, in the same index block as k
        assert [r.seq for r in reader.records(since_seq=k)][:1] == [k]
        assert reader.damage != []  # read from the block's start, over the damage
        at = (everything[k - 1].path, everything[k - 1].end)
        assert [r.seq for r in reader.records(since_seq=k, at=at)][:1] == [k]
        assert reader.damage == []
    finally:
        journal.close()


def test_records_need_not_be_in_time_order(tmp_path: Path) -> None:
    # a clock stepping back: blocks keep their min and max, nothing is skipped wrongly
    times = [T0 + 100, T0 + 101, T0 + 5, T0 + 102, T0 + 6, T0 + 103]
    with Journal(tmp_path, index_interval=50) as journal:
        for i, ts in enumerate(times):
            journal.append(raw(i), ts)
    reader = JournalReader(tmp_path)
    assert [r.seq for r in reader.records(since=T0, until=T0 + 10)] == [3, 5]
    index = read_index(list_segments(tmp_path)[0])
    assert index is not None and index.min_ts == round((T0 + 5) * 1e6)


def test_the_writers_reader_skips_inside_the_segment_being_written(tmp_path: Path) -> None:
    journal = Journal(tmp_path, index_interval=1_000)
    try:
        for i in range(500):
            journal.append(raw(i), T0 + i)
        live = journal.segment_path
        assert live is not None and not index_path(live).exists()
        damage_record(live, 3)
        own = journal.reader()
        assert [r.seq for r in own.read_from(480)] == list(range(480, 501))
        assert own.damage == []
        other = JournalReader(tmp_path)  # without the writer's blocks: scans, sees the damage
        assert [r.seq for r in other.read_from(480)] == list(range(480, 501))
        assert len(other.damage) == 1
        journal.append(raw(500), T0 + 500)
        assert [r.seq for r in own.read_from(500)] == [500, 501]
    finally:
        journal.close()


def test_index_files_describe_their_segments(tmp_path: Path) -> None:
    with Journal(tmp_path, max_segment_bytes=3_000, index_interval=500) as journal:
        for i in range(100):
            journal.append(raw(i), T0 + i)
    seen = 0
    for segment in list_segments(tmp_path):
        index = read_index(segment)
        assert index is not None and index.segment_size == segment.stat().st_size
        records = list(read_segment(segment))
        assert index.count == len(records) and sum(b.count for b in index.blocks) == len(records)
        assert (index.first_seq, index.last_seq) == (records[0].seq, records[-1].seq)
        assert index.blocks[0].offset == SEGMENT_HEADER_SIZE
        assert len(index.blocks) >= 2 or index.segment_size < SEGMENT_HEADER_SIZE + 500
        starts = {r.offset for r in records}
        assert all(b.offset in starts for b in index.blocks)
        seen += len(records)
    assert seen == 100
    # a damaged index is ignored (readers scan), never trusted
    first = index_path(list_segments(tmp_path)[0])
    data = bytearray(first.read_bytes())
    data[20] ^= 1
    first.write_bytes(bytes(data))
    assert read_index(list_segments(tmp_path)[0]) is None
    assert len(list(JournalReader(tmp_path).records())) == 100


def test_doc_index_example() -> None:
    [example] = [e for e in examples("journal") if e.id == "segment-index"]
    index = decode_index(example.hex("index"))
    assert index is not None
    assert index.segment_size == int(example.body["segment_size"])
    assert index.count == int(example.body["count"])
    assert f"{index.first_seq}..{index.last_seq}" == example.body["seq"]
    assert f"{index.min_ts}..{index.max_ts}" == example.body["ts_us"]
    [block] = index.blocks
    assert f"{block.offset} {block.first_seq} {block.count}" == example.body["block"]


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_synced_seq_follows_the_policy(tmp_path: Path, policy: FsyncPolicy) -> None:
    with Journal(tmp_path, fsync=policy, fsync_interval=10) as journal:
        journal.append(raw(0), T0)
        journal.append(raw(1), T0 + 1)
        expected = {FsyncPolicy.ALWAYS: 2, FsyncPolicy.INTERVAL: 0, FsyncPolicy.NONE: 0}
        assert journal.synced_seq == expected[policy]
        journal.tick(T0 + 5)
        assert journal.synced_seq == expected[policy]
        journal.tick(T0 + 11)  # the interval has passed: a timer's tick syncs
        assert journal.synced_seq == (2 if policy is not FsyncPolicy.NONE else 0)
        journal.flush()
        assert journal.synced_seq == 2


def test_a_group_commit_fsyncs_once_for_what_was_appended_since_the_last(tmp_path: Path) -> None:
    with Journal(tmp_path, fsync=FsyncPolicy.ALWAYS, group_commit=True) as journal:
        for n in range(3):
            journal.append(raw(n), T0 + n)
        assert (journal.synced_seq, journal.fsyncs) == (0, 0)  # the owner commits, not append
        journal.commit(T0 + 3)
        assert (journal.synced_seq, journal.fsyncs) == (3, 1)
        journal.commit(T0 + 4)  # nothing new: no fsync
        assert journal.fsyncs == 1
    with Journal(tmp_path, fsync=FsyncPolicy.INTERVAL, group_commit=True) as journal:
        assert not journal.group_commit  # only always has one


def test_an_fsync_made_elsewhere_covers_what_was_appended_before_it(tmp_path: Path) -> None:
    with Journal(tmp_path, fsync=FsyncPolicy.INTERVAL, fsync_interval=10) as journal:
        assert journal.sync_handle() is None  # nothing appended: nothing to fsync
        journal.append(raw(0), T0)
        journal.append(raw(1), T0 + 1)
        handle = journal.sync_handle()
        assert handle is not None
        fd, seq = handle
        journal.append(raw(2), T0 + 2)  # after the handle: not covered by its fsync
        os.fsync(fd)
        os.close(fd)  # the duplicate is the caller's; the journal's own stays open
        journal.mark_synced(seq, T0 + 3)
        assert seq == 2 and journal.synced_seq == 2
        journal.mark_synced(1, T0 + 4)  # an older fsync ending late takes nothing back
        assert journal.synced_seq == 2
        journal.append(raw(3), T0 + 5)
    assert [r.seq for r in JournalReader(tmp_path).records()] == [1, 2, 3, 4]


def test_a_short_write_takes_the_partial_record_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path)
    journal.append(raw(0), T0)
    real_write = os.write
    calls = {"n": 0}

    def short(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, data[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", short)
    with pytest.raises(Exception, match="No space left"):
        journal.append(raw(1), T0 + 1)
    monkeypatch.setattr(os, "write", real_write)
    assert journal.append(raw(1), T0 + 1) == 2  # the failed append used no number
    journal.close()
    reader = JournalReader(tmp_path)
    assert [r.seq for r in reader.records()] == [1, 2] and reader.damage == []


def test_reading_in_chunks_cuts_no_record(tmp_path: Path) -> None:
    """Segments larger than a read: a record cut by a chunk's end is neither damage nor torn."""
    from bus.journal import scan_file

    with Journal(tmp_path, max_segment_bytes=2_000_000) as journal:
        for i in range(20_000):
            journal.append(raw(i), T0 + i)
    for segment in list_segments(tmp_path):
        chunks = list(scan_file(segment, SEGMENT_HEADER_SIZE, chunk=4096))
        assert len(chunks) > 10
        assert all(c.result.damage == [] and c.result.partial == 0 for c in chunks)
    reader = JournalReader(tmp_path)
    assert len(list(reader.records())) == 20_000 and reader.damage == reader.torn_tails == []
