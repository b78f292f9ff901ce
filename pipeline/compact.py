"""``busgate journal compact``: closed segments written as Parquet beside them, checked, kept apart.

A closed segment (one the writer left: it has an index and a newer segment exists) is decoded
once, with the ``busjournal`` columns (:data:`pipeline.decode.ARROW_SCHEMA`), into
``journal-NNNNNNNN.SIZE.vN.parquet`` beside it, where ``SIZE`` is the segment's size in bytes
and ``N`` the columns' version (:data:`pipeline.plan.COMPACTED_VERSION`): a compacted file is
used only while its segment still has that size and its columns are the readers'. Before it is
renamed into
place, the file is read back and its ``offset``, ``seq``, ``ts`` and ``size`` columns compared
with a fresh scan of the segment's record headers; any difference and it is deleted. The
segment itself is never touched: compaction only adds files (and removes compacted files whose
segment changed or is gone). Readers use the compacted form where it is valid and read the
segments raw elsewhere (the newest segment, which is still written, always).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bus.errors import JournalError
from bus.journal import list_segments, scan_file, segment_info
from pipeline.plan import compacted_path, find_compacted, plan_batch

__all__ = ["ROW_GROUP", "Compacted", "compact", "compacted_path", "find_compacted"]

#: Rows per Parquet row group (each has its own ts and seq statistics for pushdown).
ROW_GROUP = 65536
_NAME = re.compile(r"^journal-(\d{8,})\.(\d+)(\.v\d+)?\.parquet$")  # any version


@dataclass(frozen=True)
class Compacted:
    """What :func:`compact` did with one segment.

    Attributes:
        segment: the segment file.
        parquet: its compacted file.
        records: rows written (the segment's intact records).
        written: False when a valid compacted file was already there.
    """

    segment: Path
    parquet: Path
    records: int
    written: bool


def _header_columns(segment: Path, version: int, first: int) -> dict[str, np.ndarray]:
    """offset, seq, ts and size of every intact record, from a scan of the record headers."""
    from pipeline.decode import find_records

    columns: dict[str, list[np.ndarray]] = {"offset": [], "seq": [], "ts": [], "size": []}
    for chunk in scan_file(segment, first, version=version, scan=find_records):
        at = np.asarray(chunk.result.offsets, dtype=np.int64)
        raw = np.frombuffer(chunk.data, dtype=np.uint8)
        words = np.ndarray((len(raw) - 7,), dtype=">i8", buffer=raw, strides=(1,))
        lengths = np.ndarray((len(raw) - 3,), dtype=">u4", buffer=raw, strides=(1,))
        columns["offset"].append(at + chunk.base)
        columns["seq"].append(words[at + 20] if version >= 2 else np.full(len(at), -1))
        columns["ts"].append(words[at + 12])
        columns["size"].append(lengths[at + 8].astype(np.int64))
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in columns.items()}


def _check(path: Path, segment: Path, version: int, first: int) -> int:
    """Compare a written file with the segment's headers; the rows, or JournalError."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["offset", "seq", "ts", "size"])
    expected = _header_columns(segment, version, first)
    got = {
        "offset": table["offset"].to_numpy(),
        "seq": pc.fill_null(table["seq"], -1).to_numpy(),
        "ts": pc.cast(table["ts"], "int64").to_numpy(),
        "size": pc.cast(table["size"], "int64").to_numpy(),
    }
    for name, values in expected.items():
        if not np.array_equal(got[name], values):
            raise JournalError(str(segment), 0, f"compaction check failed: {name} differs")
    return int(table.num_rows)


def _write(segment: Path, target: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.decode import ARROW_SCHEMA
    from pipeline.source import read_range

    temp = target.with_name(f".{target.name}.tmp")
    meta = {b"busgate.segment": segment.name.encode(), b"busgate.segment_size": b""}
    meta[b"busgate.segment_size"] = str(segment.stat().st_size).encode()
    schema = ARROW_SCHEMA.with_metadata(meta)
    try:
        with pq.ParquetWriter(temp, schema) as writer:
            pending: list[Any] = []
            rows = 0
            for part in plan_batch(str(segment), 0, use_compacted=False):
                for batch in read_range(part):
                    pending.append(batch)
                    rows += batch.num_rows
                    if rows >= ROW_GROUP:
                        writer.write_table(pa.Table.from_batches(pending, schema), ROW_GROUP)
                        pending, rows = [], 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending, schema), ROW_GROUP)
        info = segment_info(segment)
        count = _check(temp, segment, info.version, info.first_record)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return count


def compact(directory: str | os.PathLike[str]) -> list[Compacted]:
    """Write the compacted form of every closed segment that lacks a valid one.

    Args:
        directory: the journal directory.

    Returns:
        One entry per closed segment, oldest first.

    Raises:
        JournalError: a segment cannot be read, or a written file did not match its segment.
    """
    import pyarrow.parquet as pq

    segments = list_segments(directory)
    done = []
    for segment in segments[:-1]:  # the newest may still be written
        info = segment_info(segment)
        if info.index is None or info.header is None:
            continue  # not left by a writer (or damaged at its start): read raw
        target = compacted_path(segment, info.size)
        if target.is_file():
            done.append(Compacted(segment, target, pq.read_metadata(target).num_rows, False))
            continue
        for stale in segment.parent.glob(f"{segment.stem}.*.parquet"):
            stale.unlink()
        done.append(Compacted(segment, target, _write(segment, target), True))
    known = {s.stem for s in segments}
    for path in Path(directory).glob("journal-*.parquet"):
        match = _NAME.match(path.name)
        if match and f"journal-{match.group(1)}" not in known:
            path.unlink()  # its segment was deleted (retention)
    return done
