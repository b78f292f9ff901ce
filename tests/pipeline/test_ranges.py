"""Byte-range partitions of pipeline/source.py without Spark: every record read exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.cli import main
from bus.errors import JournalError
from bus.journal import Journal, encode_record, list_segments
from bus.message import Message, encode_message
from pipeline.source import _plan_batch, read_range

T0 = 1_700_000_000.0


def write(directory: Path, count: int) -> None:
    with Journal(directory, max_segment_bytes=40_000) as journal:
        for i in range(count):
            # bodies that hold the record magic, and even a whole record, must not fool a split
            text = "BJR1" * (i % 3) if i % 7 else encode_record(b"fake", T0).decode("latin-1")
            msg = Message.request("demo", "echo", {"i": i, "t": text})
            journal.append(encode_message(msg), T0 + i)


def rows(directory: Path, split: int) -> list[int]:
    found = []
    for part in _plan_batch(str(directory), split):
        for batch in read_range(part):
            found += [int(dict(m)["i"]) for m in batch.column("payload_map").to_pylist()]
    return found


@pytest.mark.parametrize("split", [0, 997, 4096, 10_000])
def test_every_split_size_reads_each_record_once(tmp_path: Path, split: int) -> None:
    write(tmp_path, 600)
    assert len(list_segments(tmp_path)) > 2
    assert sorted(rows(tmp_path, split)) == list(range(600))


def test_torn_tail_is_skipped_and_damage_raises(tmp_path: Path) -> None:
    write(tmp_path, 50)
    last = list_segments(tmp_path)[-1]
    with last.open("ab") as fh:
        fh.write(encode_record(b"torn", T0)[:11])
    assert sorted(rows(tmp_path, 1000)) == list(range(50))
    data = bytearray(last.read_bytes())
    data[40] ^= 1
    last.write_bytes(bytes(data))
    with pytest.raises(JournalError) as info:
        rows(tmp_path, 0)
    assert info.value.path == str(last) and info.value.offset == 16


def test_report_command_refuses_a_bad_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--out", "x", "--since", "someday"]) == 2
    assert "bad time" in capsys.readouterr().err


def test_stream_offsets_walk_whole_records_in_limited_steps(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from pipeline.source import _StreamReader

    write(tmp_path, 300)
    reader = _StreamReader(str(tmp_path), {"maxRecordsPerTrigger": "70"})
    start = reader.initialOffset()
    assert start == {"seq": 1, "pos": 16}
    seen: list[int] = []
    for _ in range(20):
        end = reader.latestOffset(start, ReadMaxRows(70))
        if end == start:
            break
        got = []
        for part in reader.partitions(start, end):
            for batch in reader.read(part):
                got += [int(dict(m)["i"]) for m in batch.column("payload_map").to_pylist()]
        assert 0 < len(got) <= 70
        seen += got
        start = end
    assert seen == list(range(300))
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    latest = _StreamReader(str(tmp_path), {"startingOffsets": "latest"}).initialOffset()
    assert latest == start
