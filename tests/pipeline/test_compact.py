"""``busgate journal compact`` (pipeline/compact.py): closed segments as Parquet beside them,
checked against the segments, never replacing them; readers use them where they are valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pipeline.compact as compact_module
from bus.cli import main
from bus.errors import JournalError
from bus.journal import Journal, list_segments, read_segment
from bus.message.message import Message, encode_message
from pipeline.compact import compact, find_compacted
from pipeline.plan import Bounds, plan_batch
from pipeline.source import read_range

T0 = 1_700_000_000.0


def write(directory: Path, first: int, count: int) -> None:
    with Journal(directory, max_segment_bytes=30_000) as journal:
        for i in range(first, first + count):
            msg = Message.request("demo", "echo", {"i": i, "x": i / 3}, reply_to="inbox.t")
            journal.append(encode_message(msg), T0 + i)


def rows(directory: Path, *, use_compacted: bool, bounds: Bounds | None = None) -> list[Any]:
    found = []
    for part in plan_batch(str(directory), 0, bounds, use_compacted=use_compacted):
        for batch in read_range(part):
            found += batch.to_pylist()
    return found


def test_closed_segments_are_compacted_checked_and_read_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 0, 600)
    segments = list_segments(tmp_path)
    assert len(segments) > 3
    before = {s: s.read_bytes() for s in segments}
    assert main(["journal", "compact", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(segments) - 1 and all("written and checked" in x for x in out)
    assert {s: s.read_bytes() for s in segments} == before  # the segments are untouched
    assert find_compacted(segments[-1], segments[-1].stat().st_size) is None  # the newest: raw
    parts = plan_batch(str(tmp_path), 0)
    assert sum(1 for p in parts if p.parquet) == len(segments) - 1
    assert rows(tmp_path, use_compacted=True) == rows(tmp_path, use_compacted=False)
    window = Bounds(since_us=round((T0 + 100) * 1e6), until_us=round((T0 + 110) * 1e6))
    kept = rows(tmp_path, use_compacted=True, bounds=window)
    assert [r["seq"] for r in kept] == list(range(101, 111))
    assert main(["journal", "compact", str(tmp_path)]) == 0  # again: nothing to do
    assert all("already there" in x for x in capsys.readouterr().out.splitlines())


def test_a_compacted_file_whose_segment_changed_is_not_used(tmp_path: Path) -> None:
    write(tmp_path, 0, 300)
    compact(tmp_path)
    first = list_segments(tmp_path)[0]
    offsets = [r.offset for r in read_segment(first)]
    with first.open("r+b") as fh:  # records cut off the end of a closed segment
        fh.truncate(offsets[-2])
    assert find_compacted(first, first.stat().st_size) is None
    assert not any(p.parquet and p.path == str(first) for p in plan_batch(str(tmp_path), 0))
    assert len(rows(tmp_path, use_compacted=True)) == 298
    first.unlink()  # retention deleted the segment: its compacted file goes with it
    compact(tmp_path)
    assert not list(tmp_path.glob("journal-00000001.*.parquet"))


def test_a_file_that_does_not_match_its_segment_is_never_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, 0, 300)
    real = compact_module._header_columns

    def one_record_more(segment: Path, version: int, first: int) -> dict[str, np.ndarray]:
        columns = real(segment, version, first)
        return {name: np.append(values, values[-1:]) for name, values in columns.items()}

    monkeypatch.setattr(compact_module, "_header_columns", one_record_more)
    with pytest.raises(JournalError, match="compaction check failed"):
        compact(tmp_path)
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob(".*tmp"))


def test_a_file_compacted_before_clr_and_trc_is_not_read_and_is_written_again(
    tmp_path: Path,
) -> None:
    import pyarrow.parquet as pq

    with Journal(tmp_path, max_segment_bytes=30_000) as journal:
        for i in range(300):
            msg = Message.request("demo", "echo", {"i": i}, caller=f"key:k{i % 3}", trace="00-t")
            journal.append(encode_message(msg), T0 + i)
    compact(tmp_path)
    first = list_segments(tmp_path)[0]
    size = first.stat().st_size
    current = find_compacted(first, size)
    assert current is not None and current.name.endswith(f".{size}.v2.parquet")
    # as the compaction before version 2 wrote it: no CLR, no TRC, no version in the name
    old = first.with_name(f"{first.stem}.{size}.parquet")
    pq.write_table(pq.read_table(current).drop_columns(["CLR", "TRC"]), old)
    current.unlink()
    assert find_compacted(first, size) is None
    assert not any(p.parquet and p.path == str(first) for p in plan_batch(str(tmp_path), 0))
    got = rows(tmp_path, use_compacted=True)
    assert [r["CLR"] for r in got] == [f"key:k{i % 3}" for i in range(300)]
    assert {r["TRC"] for r in got} == {"00-t"}
    (done, *_) = compact(tmp_path)
    assert done.written and done.parquet == current and not old.exists()
    assert rows(tmp_path, use_compacted=True) == got
