"""Partitions of the busjournal Python source without Spark: every record read exactly once,
damage skipped, time and sequence ranges planned from indexes (pipeline/plan.py, source.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.cli import main
from bus.journal import Journal, encode_record, list_segments, read_segment
from bus.message.message import Message, encode_message
from pipeline.plan import Bounds, JournalRange, bounds_from_options, plan_batch
from pipeline.source import _Partition, _StreamReader, read_range

T0 = 1_700_000_000.0


def write(directory: Path, count: int, first: int = 0, **options: int) -> None:
    options.setdefault("max_segment_bytes", 40_000)
    with Journal(directory, **options) as journal:
        for i in range(first, first + count):
            # bodies that hold the record magic, and even a whole record, must not fool a split
            text = "BJR2" * (i % 3) if i % 7 else encode_record(b"fake", T0, 5).decode("latin-1")
            msg = Message.request("demo", "echo", {"i": i, "t": text})
            journal.append(encode_message(msg), T0 + i)


def numbers(parts: list[JournalRange]) -> list[int]:
    found = []
    for part in parts:
        for batch in read_range(part):
            found += [int(dict(m)["i"]) for m in batch.column("payload_map").to_pylist()]
    return found


def rows(directory: Path, split: int, bounds: Bounds | None = None) -> list[int]:
    return numbers(plan_batch(str(directory), split, bounds or Bounds()))


@pytest.mark.parametrize("split", [0, 997, 4096, 10_000])
def test_every_split_size_reads_each_record_once(tmp_path: Path, split: int) -> None:
    write(tmp_path, 600)
    assert len(list_segments(tmp_path)) > 2
    assert sorted(rows(tmp_path, split)) == list(range(600))


def test_the_segment_being_written_is_split_by_walking_headers(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_segment_bytes=1 << 20)
    try:
        for i in range(400):
            msg = Message.request("demo", "echo", {"i": i})
            journal.append(encode_message(msg), T0 + i)
        parts = plan_batch(str(tmp_path), 5000)
        assert len(parts) > 5 and numbers(parts) == list(range(400))
    finally:
        journal.close()


def test_torn_tail_is_skipped_and_damage_is_read_around(tmp_path: Path) -> None:
    write(tmp_path, 50)
    last = list_segments(tmp_path)[-1]
    with last.open("ab") as fh:
        fh.write(encode_record(b"torn", T0, 51)[:11])
    assert sorted(rows(tmp_path, 1000)) == list(range(50))
    offsets = [r.offset for r in read_segment(last)]
    data = bytearray(last.read_bytes())
    data[offsets[1] + 40] ^= 1
    data += bytes(300)  # and trailing zeros
    last.write_bytes(bytes(data))
    lost = next(r for r in read_segment(list_segments(tmp_path)[-1]) if r.offset == offsets[2])
    assert lost.seq is not None
    got = rows(tmp_path, 0)
    assert len(got) == 49 and sorted(got) == [i for i in range(50) if i != lost.seq - 2]


def test_time_and_sequence_bounds_skip_segments_and_blocks(tmp_path: Path) -> None:
    write(tmp_path, 2000, max_segment_bytes=60_000, index_interval=4_000)
    segments = list_segments(tmp_path)
    assert len(segments) > 4
    every = plan_batch(str(tmp_path), 0)
    one_percent = Bounds(since_us=round((T0 + 1000) * 1e6), until_us=round((T0 + 1020) * 1e6))
    parts = plan_batch(str(tmp_path), 0, one_percent)
    assert len(parts) == 1 and parts[0].stop - parts[0].start <= 8_000
    assert sum(p.stop - p.start for p in parts) < sum(p.stop - p.start for p in every) / 20
    assert numbers(parts) == list(range(1000, 1020))  # records outside dropped undecoded
    by_seq = plan_batch(str(tmp_path), 0, Bounds(since_seq=1990))
    assert len(by_seq) == 1 and numbers(by_seq) == list(range(1989, 2000))
    assert numbers(plan_batch(str(tmp_path), 0, Bounds(until_seq=3))) == [0, 1]
    assert plan_batch(str(tmp_path), 0, Bounds(since_us=round((T0 + 5000) * 1e6))) == []


def test_range_options() -> None:
    options = {"since": "1700000000.5", "UNTIL": "2023-11-14T22:13:30Z", "sinceSeq": "7"}
    assert bounds_from_options(options) == Bounds(
        since_us=1_700_000_000_500_000, until_us=1_700_000_010_000_000, since_seq=7
    )
    assert bounds_from_options({}) == Bounds() and not Bounds().any
    with pytest.raises(ValueError):
        bounds_from_options({"untilSeq": "ten"})


def test_report_command_refuses_a_bad_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--out", "x", "--since", "someday"]) == 2
    assert "bad time" in capsys.readouterr().err


def stream_rows(reader: _StreamReader, start: dict[str, int], end: dict[str, int]) -> list[int]:
    got = []
    for part in reader.partitions(start, end):
        assert isinstance(part, _Partition)
        for batch in reader.read(part):
            got += [int(dict(m)["i"]) for m in batch.column("payload_map").to_pylist()]
    return got


def test_stream_offsets_walk_whole_records_in_limited_steps(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    write(tmp_path, 300)
    reader = _StreamReader(str(tmp_path), {"maxRecordsPerTrigger": "70"})
    start = reader.initialOffset()
    assert start == {"segment": 1, "pos": 0}
    seen: list[int] = []
    for _ in range(20):
        end = reader.latestOffset(start, ReadMaxRows(70))
        if end == start:
            break
        got = stream_rows(reader, start, end)
        assert 0 < len(got) <= 70
        seen += got
        start = end
    assert seen == list(range(300))
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    latest = _StreamReader(str(tmp_path), {"startingOffsets": "latest"}).initialOffset()
    assert latest == start


def test_stream_waits_for_a_record_being_written_then_reads_past_damage(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    journal = Journal(tmp_path)
    try:
        for i in range(10):
            journal.append(encode_message(Message.request("d", "e", {"i": i})), T0 + i)
        live = journal.segment_path
        assert live is not None
        reader = _StreamReader(str(tmp_path), {})
        start = reader.initialOffset()
        whole = encode_record(encode_message(Message.request("d", "e", {"i": 10})), T0, 11)
        with live.open("ab") as fh:  # a record half written by the broker
            fh.write(whole[:30])
        end = reader.latestOffset(start, ReadAllAvailable())
        assert stream_rows(reader, start, end) == list(range(10))
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # waits, looks no further
        with live.open("ab") as fh:
            fh.write(whole[30:])
        later = reader.latestOffset(end, ReadAllAvailable())
        assert stream_rows(reader, end, later) == [10]
    finally:
        journal.close()
    # the old segment is done with once the writer moved on: damage in it is read around
    offsets = [r.offset for r in read_segment(live)]
    data = bytearray(live.read_bytes())
    data[offsets[3] + 5] ^= 0x80
    live.write_bytes(bytes(data))
    with Journal(tmp_path) as journal:
        journal.append(encode_message(Message.request("d", "e", {"i": 11})), T0 + 11)
    again = _StreamReader(str(tmp_path), {})
    first = again.initialOffset()
    last = again.latestOffset(first, ReadAllAvailable())
    assert stream_rows(again, first, last) == [i for i in range(12) if i != 3]
    assert again._where({"seq": 4, "pos": 99}) == (4, 99)  # offsets from before seq numbers
