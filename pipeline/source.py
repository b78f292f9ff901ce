"""The ``busjournal`` Spark data source in Python, batch and streaming: the tested fallback.

When the JVM reader (``pipeline/jvm``, compiled at install) is on the session's class path,
``format("busjournal")`` is that reader and this one is ``format("busjournalpy")``; without it,
this one is both (see :mod:`pipeline.session`). Both give the same rows.

Batch::

    df = spark.read.format("busjournal").load("/var/lib/busgate/journal")

The partitions come from :func:`pipeline.plan.plan_batch`: indexed segments are cut at index
block starts into ranges of about ``splitBytes`` (default 32 MiB), others at record boundaries
found by walking the record headers. The options ``since``/``until`` (epoch seconds or ISO 8601)
and ``sinceSeq``/``untilSeq`` keep a time and a sequence range: segments and index blocks outside
it are not read, and inside what is read, records outside it are dropped from their headers
before any decoding. (Filters are not taken from Spark here: PySpark 4.3 keeps the first pushed
filters of a DataFrame for its later queries; the JVM reader takes them.)

Streaming::

    spark.readStream.format("busjournal").load(path)   # options: startingOffsets=earliest|latest,
                                                        # maxRecordsPerTrigger
An offset is ``{"segment": N, "pos": P}``: every record before byte ``P`` of segment ``N`` (and in
earlier segments) has been read. Offsets stop at a whole record and never look past an incomplete
record of the newest segment (it is being written); they travel as JSON and are stored in the
query's checkpoint, so a restarted query resumes exactly where it stopped.

Rows come from :func:`pipeline.decode.decode_at` as Arrow record batches of at most
``batchRecords`` rows (default 8192), columns in :data:`pipeline.decode.SPARK_SCHEMA`. Records
are found and verified by :func:`pipeline.decode.find_records` (in C when the accelerator was
built). Damage never fails a query: each damaged span is skipped (reading resumes at the next
intact record) and logged as a warning naming the segment, offset and bytes skipped;
``busgate journal verify`` lists them all. A torn tail is skipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from bus.errors import JournalError
from bus.journal import list_segments, scan_file, segment_info, segment_number
from pipeline.plan import (
    Bounds,
    JournalRange,
    bounds_from_options,
    complete_end,
    local_journal,
    plan_batch,
)

__all__ = ["BusJournalDataSource", "BusJournalPyDataSource", "JournalRange", "read_range"]

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
BATCH_RECORDS = 8192  # rows per Arrow batch: measured faster into Spark than 16k..64k

log = logging.getLogger("pipeline.source")


class _Partition(InputPartition):
    """A :class:`JournalRange` as Spark's ``InputPartition``."""

    def __init__(self, part: JournalRange) -> None:
        super().__init__(part)
        self.part = part


def _kept(data: bytes, offsets: np.ndarray, version: int, bounds: Bounds) -> np.ndarray:
    """The offsets of the records inside ``bounds``, from their headers (no body decoded)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    keep = np.ones(len(offsets), dtype=bool)
    if bounds.since_us is not None or bounds.until_us is not None:
        stamps = np.ndarray((len(raw) - 7,), dtype=">i8", buffer=raw, strides=(1,))[offsets + 12]
        if bounds.since_us is not None:
            keep &= stamps >= bounds.since_us
        if bounds.until_us is not None:
            keep &= stamps < bounds.until_us
    if bounds.by_seq:
        if version < 2:
            return offsets[:0]
        seqs = np.ndarray((len(raw) - 7,), dtype=">u8", buffer=raw, strides=(1,))[offsets + 20]
        if bounds.since_seq is not None:
            keep &= seqs >= bounds.since_seq
        if bounds.until_seq is not None:
            keep &= seqs < bounds.until_seq
    kept: np.ndarray = offsets[keep]
    return kept


def _read_compacted(part: JournalRange, batch_records: int) -> Iterator[Any]:
    """The rows of a compacted segment (pipeline.compact), within the range's bounds."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.decode import ARROW_SCHEMA

    bounds = part.bounds
    for batch in pq.ParquetFile(part.parquet).iter_batches(batch_size=batch_records):
        batch = batch.replace_schema_metadata(None)
        if bounds.any:
            keep = pc.is_valid(batch["ts"])
            ts = pc.cast(batch["ts"], "int64")
            if bounds.since_us is not None:
                keep = pc.and_(keep, pc.greater_equal(ts, bounds.since_us))
            if bounds.until_us is not None:
                keep = pc.and_(keep, pc.less(ts, bounds.until_us))
            if bounds.since_seq is not None:
                keep = pc.and_kleene(keep, pc.greater_equal(batch["seq"], bounds.since_seq))
            if bounds.until_seq is not None:
                keep = pc.and_kleene(keep, pc.less(batch["seq"], bounds.until_seq))
            batch = batch.filter(pc.fill_null(keep, False))
        if batch.num_rows:
            yield batch.cast(ARROW_SCHEMA)


def read_range(part: JournalRange, batch_records: int = BATCH_RECORDS) -> Iterator[Any]:
    """Yield Arrow record batches for one partition, skipping (and logging) damaged spans.

    Args:
        part: the range to read.
        batch_records: at most this many rows per batch.

    Yields:
        ``pyarrow.RecordBatch`` with :data:`pipeline.decode.ARROW_SCHEMA`.

    Raises:
        JournalError: the segment cannot be read.
    """
    from pipeline.decode import decode_at, find_records

    if part.parquet:
        yield from _read_compacted(part, batch_records)
        return
    name = os.path.basename(part.path)
    for chunk in scan_file(
        part.path,
        part.start,
        part.stop,
        version=part.version,
        final=part.final,
        after_seq=part.after_seq,
        scan=find_records,
        limit=part.limit,
    ):
        for offset, size, reason in chunk.result.damage:
            log.warning(
                "busjournal: %s: %s at offset %d (%d bytes skipped)",
                part.path,
                reason,
                chunk.base + offset,
                size,
            )
        offsets = np.asarray(chunk.result.offsets, dtype=np.int64)
        if part.bounds.any and len(offsets):
            offsets = _kept(chunk.data, offsets, part.version, part.bounds)
        for first in range(0, len(offsets), batch_records):
            yield decode_at(
                chunk.data,
                offsets[first : first + batch_records],
                name,
                base_offset=chunk.base,
                version=part.version,
            )


class _BatchReader(DataSourceReader):
    def __init__(
        self,
        path: str,
        split_bytes: int,
        batch_records: int = BATCH_RECORDS,
        bounds: Bounds | None = None,
    ) -> None:
        self.path = path
        self.split_bytes = split_bytes
        self.batch_records = batch_records
        self.bounds = bounds or Bounds()

    def partitions(self) -> list[InputPartition]:
        parts = plan_batch(self.path, self.split_bytes, self.bounds)
        return [_Partition(p) for p in parts] or [_Partition(JournalRange(self.path, 0, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Partition)
        if partition.part.stop <= partition.part.start:
            return iter(())
        return read_range(partition.part, self.batch_records)


class _StreamReader(DataSourceStreamReader):
    """Tails the journal directory; offsets are ``{"segment": N, "pos": P}``."""

    def __init__(self, path: str, options: dict[str, str]) -> None:
        self.path = path
        # Spark hands options over with their names lower-cased: look them up that way.
        named = {key.lower(): value for key, value in options.items()}
        self.starting = named.get("startingoffsets", "earliest")
        limit = named.get("maxrecordspertrigger")
        self.max_records = int(limit) if limit else None

    def _segments(self) -> list[tuple[int, Path]]:
        return [(segment_number(p), p) for p in list_segments(self.path)]

    @staticmethod
    def _where(offset: dict[str, Any]) -> tuple[int, int]:
        # "seq" held the segment number in offsets written before sequence numbers existed
        return int(offset.get("segment", offset.get("seq", 0))), int(offset["pos"])

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
        segments = self._segments()
        if not segments:
            return {"segment": 0, "pos": 0}
        if self.starting == "latest":
            number, path = segments[-1]
            info = segment_info(path)
            end, _, _ = complete_end(path, info.first_record, version=info.version, final=False)
            return {"segment": number, "pos": end}
        return {"segment": segments[0][0], "pos": 0}

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - Spark's name
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadAllAvailable() if self.max_records is None else ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, int]:  # noqa: N802
        from pyspark.sql.streaming.datasource import ReadMaxRows

        from pipeline.decode import find_records

        # the engine's limit rules (ReadAllAvailable: everything, whatever the options say);
        # maxRecordsPerTrigger comes in through getDefaultReadLimit
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        number0, pos0 = self._where(start)
        end = {"segment": number0, "pos": pos0}
        segments = self._segments()
        for position, (number, path) in enumerate(segments):
            if number < number0:
                continue
            newest = position == len(segments) - 1
            info = segment_info(path)
            begin = max(pos0 if number == number0 else 0, info.first_record)
            stop, count, whole = complete_end(
                path,
                begin,
                version=info.version,
                final=not newest,
                max_records=budget,
                scan=find_records,
            )
            # an older segment is done with: the next offset is past all of it
            end = {"segment": number, "pos": info.size if whole and not newest else stop}
            if budget is not None:
                budget -= count
                if budget <= 0:
                    break
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        number0, pos0 = self._where(start)
        number1, pos1 = self._where(end)
        parts: list[InputPartition] = []
        for number, path in self._segments():
            if number < number0 or number > number1:
                continue
            info = segment_info(path)
            begin = max(pos0 if number == number0 else 0, info.first_record)
            stop = pos1 if number == number1 else info.size
            if stop > begin:
                part = JournalRange(str(path), begin, stop, stop, info.version)
                parts.append(_Partition(part))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Partition)
        return read_range(partition.part)

    def commit(self, end: dict[str, Any]) -> None:
        return None


class BusJournalPyDataSource(DataSource):
    """``format("busjournalpy")``: the journal directory (or one segment) given to ``load()``.

    Options: ``path``, ``splitBytes`` (batch; default 32 MiB, 0 = one partition per segment),
    ``batchRecords`` (batch; rows per Arrow batch, default 8192), ``since``, ``until``,
    ``sinceSeq``, ``untilSeq`` (batch: the records kept), ``startingOffsets`` (stream:
    ``earliest`` or ``latest``), ``maxRecordsPerTrigger`` (stream).
    """

    @classmethod
    def name(cls) -> str:
        return "busjournalpy"

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise JournalError("", 0, "busjournal needs a path: .load('/path/to/journal')")
        return local_journal(str(path))

    def schema(self) -> str:
        from pipeline.decode import SPARK_SCHEMA

        self._path()  # at load(): a path that is not there is an error, not an empty journal
        return SPARK_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        split = int(self.options.get("splitBytes", DEFAULT_SPLIT_BYTES))
        batch = int(self.options.get("batchRecords", BATCH_RECORDS))
        if batch < 1:
            raise JournalError(self._path(), 0, f"batchRecords must be at least 1, not {batch}")
        try:
            bounds = bounds_from_options(self.options)
        except ValueError as exc:
            raise JournalError(self._path(), 0, f"bad range option: {exc}") from exc
        return _BatchReader(self._path(), split, batch, bounds)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        return _StreamReader(self._path(), dict(self.options))


class BusJournalDataSource(BusJournalPyDataSource):
    """The same source as ``format("busjournal")``, for sessions without the JVM reader."""

    @classmethod
    def name(cls) -> str:
        return "busjournal"
