"""The Spark data source ``busjournal``: journal segments as a DataFrame, batch and streaming.

Batch::

    spark.dataSource.register(BusJournalDataSource)          # pipeline.session does it
    df = spark.read.format("busjournal").load("/var/lib/busgate/journal")

Each segment is cut into byte ranges of about ``splitBytes`` (default 32 MiB) and each range is
one Spark partition, so a cluster reads in parallel even a single large segment. The driver finds
the cut points by walking the record headers (magic and length only, no body is decoded), so
every range starts on a record boundary and the ranges read every record exactly once, even when
a message body happens to hold the magic or a whole journal record. A segment smaller than
``splitBytes`` is not walked. Set ``splitBytes`` to ``0`` to read each segment as one partition.

Streaming::

    spark.readStream.format("busjournal").load(path)   # options: startingOffsets=earliest|latest,
                                                        # maxRecordsPerTrigger
An offset is ``{"seq": N, "pos": P}``: every record before byte ``P`` of segment ``N`` (and in
earlier segments) has been read. Offsets always stop at a whole record, travel as JSON and are
stored in the query's checkpoint, so a restarted query resumes exactly where it stopped.

Rows come from :func:`pipeline.decode.decode_records` as Arrow record batches of at most
``batchRecords`` rows (default 8192; smaller batches measured faster into Spark than 16k..64k),
columns in :data:`pipeline.decode.SPARK_SCHEMA`. Records are found and verified by
:func:`pipeline.decode.find_records` (in C when the accelerator was built). Damage raises
:class:`bus.errors.JournalError` naming the segment and offset; a torn tail (incomplete last
record) is skipped.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from bus.errors import DecodeError, JournalError
from bus.journal import (
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    SEGMENT_HEADER_SIZE,
    list_segments,
    segment_created,
)

__all__ = ["BusJournalDataSource", "JournalRange", "read_range"]

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
BATCH_RECORDS = 8192  # rows per Arrow batch: measured faster into Spark than 16k..64k
_SLACK = 1024 * 1024
_SEQ = re.compile(r"journal-(\d+)\.seg$")


@dataclass(frozen=True)
class JournalRange(InputPartition):
    """One partition: the records of ``path`` that start in ``[start, stop)``.

    Attributes:
        path: the segment file.
        start: first byte (a record boundary).
        stop: records starting at or after this are left to the next range.
        limit: never read at or past this byte (the file size when the query was planned).
    """

    path: str
    start: int
    stop: int
    limit: int


def _journal_error(path: str, base: int, exc: DecodeError) -> JournalError:
    return JournalError(path, base + (exc.offset or 0), exc.reason)


def _read_bytes(path: str, start: int, stop: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            if start == 0:
                segment_created(fh.read(SEGMENT_HEADER_SIZE), path)
            fh.seek(start)
            return fh.read(max(0, stop - start))
    except OSError as exc:
        raise JournalError(path, start, f"cannot read segment: {exc.strerror}") from exc


def read_range(part: JournalRange, batch_records: int = BATCH_RECORDS) -> Iterator[Any]:
    """Yield Arrow record batches for one partition.

    Args:
        part: the range to read.
        batch_records: at most this many rows per batch.

    Yields:
        ``pyarrow.RecordBatch`` with :data:`pipeline.decode.ARROW_SCHEMA`.

    Raises:
        JournalError: the segment is damaged (names the file and the record's offset).
    """
    from pipeline.decode import decode_at, find_records

    # Read the range plus a little more, in case the last record runs past ``stop``.
    base = 0 if part.start < SEGMENT_HEADER_SIZE else part.start
    data = _read_bytes(part.path, base, min(part.stop + _SLACK, part.limit))
    pos = max(part.start, SEGMENT_HEADER_SIZE) - base
    stop = part.stop - base
    name = os.path.basename(part.path)
    while pos < stop:
        try:
            offsets, end, partial = find_records(data, pos, stop, max_count=batch_records)
        except DecodeError as exc:
            raise _journal_error(part.path, base, exc) from exc
        if len(offsets):
            yield decode_at(data, offsets, name, base_offset=base)
        pos = end
        if partial and pos < stop:
            if base + len(data) >= part.limit:
                return  # a torn tail
            data = _read_bytes(part.path, base, part.limit)  # a record longer than the slack
        elif not len(offsets):
            return


def _segment_seq(path: Path) -> int:
    match = _SEQ.search(path.name)
    return int(match.group(1)) if match else 0


_LENGTH = struct.Struct(">4sxxxxI")


def _boundaries(path: Path, size: int, split_bytes: int) -> list[int]:
    """Record offsets about ``split_bytes`` apart, found by walking the record headers.

    The walk reads each header's magic and length only (the CRCs are the readers' job). It
    stops at anything odd (damage, a torn tail); the range after the last boundary found then
    reaches the end and its reader reports what is wrong.
    """
    data = _read_bytes(str(path), 0, size)
    unpack = _LENGTH.unpack_from
    points = [SEGMENT_HEADER_SIZE]
    target = SEGMENT_HEADER_SIZE + split_bytes
    pos, last = SEGMENT_HEADER_SIZE, size - RECORD_HEADER_SIZE
    while pos <= last:
        magic, length = unpack(data, pos)
        if magic != RECORD_MAGIC:
            break
        pos += RECORD_HEADER_SIZE + length
        if pos >= target and pos < size:
            points.append(pos)
            target = pos + split_bytes
    return points


def _plan_batch(path: str, split_bytes: int) -> list[JournalRange]:
    parts: list[JournalRange] = []
    for seg in list_segments(path):
        size = seg.stat().st_size
        if size <= SEGMENT_HEADER_SIZE:
            continue
        if 0 < split_bytes < size - SEGMENT_HEADER_SIZE:
            points = _boundaries(seg, size, split_bytes)
        else:
            points = [SEGMENT_HEADER_SIZE]
        for start, stop in zip(points, [*points[1:], size], strict=True):
            parts.append(JournalRange(str(seg), start, stop, size))
    return parts


class _BatchReader(DataSourceReader):
    def __init__(self, path: str, split_bytes: int, batch_records: int = BATCH_RECORDS) -> None:
        self.path = path
        self.split_bytes = split_bytes
        self.batch_records = batch_records

    def partitions(self) -> list[JournalRange]:
        parts = _plan_batch(self.path, self.split_bytes)
        return parts or [JournalRange(self.path, 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, JournalRange)
        if partition.stop <= partition.start:
            return iter(())
        return read_range(partition, self.batch_records)


def _complete_end(path: Path, start: int, max_records: int | None) -> tuple[int, int]:
    """(offset after the last complete record from ``start``, records passed).

    Only the bytes from ``start`` on are read: a tailing stream does not re-read its segment.
    """
    start = max(start, SEGMENT_HEADER_SIZE)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return start, 0
    if size <= start:
        return start, 0
    data = _read_bytes(str(path), start if start > SEGMENT_HEADER_SIZE else 0, size)
    base = start if start > SEGMENT_HEADER_SIZE else 0
    from pipeline.decode import find_records

    try:
        offsets, end, _ = find_records(data, start - base, max_count=max_records)
    except DecodeError as exc:
        raise _journal_error(str(path), base, exc) from exc
    return base + end, len(offsets)


class _StreamReader(DataSourceStreamReader):
    """Tails the journal directory; offsets are ``{"seq": N, "pos": P}``."""

    def __init__(self, path: str, options: dict[str, str]) -> None:
        self.path = path
        # Spark hands options over with their names lower-cased: look them up that way.
        named = {key.lower(): value for key, value in options.items()}
        self.starting = named.get("startingoffsets", "earliest")
        limit = named.get("maxrecordspertrigger")
        self.max_records = int(limit) if limit else None

    def _segments(self) -> list[tuple[int, Path]]:
        return [(_segment_seq(p), p) for p in list_segments(self.path)]

    def initialOffset(self) -> dict[str, int]:
        segments = self._segments()
        if not segments:
            return {"seq": 0, "pos": SEGMENT_HEADER_SIZE}
        if self.starting == "latest":
            seq, path = segments[-1]
            return {"seq": seq, "pos": _complete_end(path, SEGMENT_HEADER_SIZE, None)[0]}
        return {"seq": segments[0][0], "pos": SEGMENT_HEADER_SIZE}

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, int]:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        budget = self.max_records
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        seq, pos = int(start["seq"]), int(start["pos"])
        end = {"seq": seq, "pos": pos}
        for num, path in self._segments():
            if num < seq:
                continue
            begin = pos if num == seq else SEGMENT_HEADER_SIZE
            stop, count = _complete_end(path, begin, budget)
            end = {"seq": num, "pos": max(stop, begin)}
            if budget is not None:
                budget -= count
                if budget <= 0:
                    break
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[JournalRange]:
        seq0, pos0 = int(start["seq"]), int(start["pos"])
        seq1, pos1 = int(end["seq"]), int(end["pos"])
        parts = []
        for num, path in self._segments():
            if num < seq0 or num > seq1:
                continue
            begin = pos0 if num == seq0 else SEGMENT_HEADER_SIZE
            stop = pos1 if num == seq1 else _complete_end(path, begin, None)[0]
            if stop > begin:
                parts.append(JournalRange(str(path), begin, stop, stop))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, JournalRange)
        return read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        return None


class BusJournalDataSource(DataSource):
    """``format("busjournal")``: the journal directory (or one segment) given to ``load()``.

    Options: ``path``, ``splitBytes`` (batch; default 32 MiB, 0 = one partition per segment),
    ``batchRecords`` (batch; rows per Arrow batch, default 8192), ``startingOffsets`` (stream:
    ``earliest`` or ``latest``), ``maxRecordsPerTrigger`` (stream).
    """

    @classmethod
    def name(cls) -> str:
        return "busjournal"

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise JournalError("", 0, "busjournal needs a path: .load('/path/to/journal')")
        return str(path)

    def schema(self) -> str:
        from pipeline.decode import SPARK_SCHEMA

        return SPARK_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        split = int(self.options.get("splitBytes", DEFAULT_SPLIT_BYTES))
        batch = int(self.options.get("batchRecords", BATCH_RECORDS))
        if batch < 1:
            raise JournalError(self._path(), 0, f"batchRecords must be at least 1, not {batch}")
        return _BatchReader(self._path(), split, batch)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(self._path(), dict(self.options))
