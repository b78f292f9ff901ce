"""Journal records to Arrow, column-wise: the decoder behind the ``busjournal`` data source.

Pure code (bytes in, ``pyarrow.RecordBatch`` out; no Spark, no files). The fast path
(:mod:`pipeline.decode_numpy`) decodes many records at once with numpy, column-wise; no Python
object is made per record. Records the fast path cannot take (JSON-encoded messages, nested
payload values, text that needs escaping, ...) go through :func:`bus.message.message.decode_message`
one
by one and are merged back in order, so both paths give the same rows.

Columns (:data:`ARROW_SCHEMA`, :data:`SPARK_SCHEMA`, defined in :mod:`pipeline.schema`):

- ``ts`` timestamp (UTC, microseconds), ``seq`` (the record's sequence number; null in v1
  segments), ``segment`` (file name), ``offset`` (record offset);
- header text ``MID RID GRP RPY TYP CMD ENC MSG SRC TGT CLR TRC`` (CMD falls back to the
  payload's CMD; ENC is how the message was read: FRAM for binary frames; CLR is the caller and
  TRC the W3C traceparent, PROTOCOL.md 5.11);
- header numbers ``RCD FLG XPY PRI`` (long), ``size`` (message bytes);
- ``payload``: the PLD frame as Kestrel JSON text (``bus.frame.jsonmap.to_json``);
- ``payload_map``: PLD's top-level fields, name -> text (strings as they are, anything else as
  JSON text).

When the optional C accelerator ``bus.native._journalscan`` was built at install time (like
``bus.native._speedups``; glue in :mod:`pipeline.decode_c`), it does both jobs of a reader instead:
:func:`find_records` (verify records) and the column-wise decode, filling Arrow buffers directly;
records it does not take go to the full decoder as above. ``BUSGATE_PURE_PYTHON=1`` selects the
numpy path even when it was built; :func:`accelerated` says which one runs. Both give the same
rows (tests run against both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from bus.errors import DecodeError
from bus.journal import DEFAULT_MAX_RECORD, ScanResult, scan_records
from bus.journal.segments import scan_fast
from pipeline import decode_c, decode_numpy
from pipeline.rows import HEADER_INTS, HEADER_TEXT
from pipeline.rows import slow_row as _slow_row
from pipeline.schema import ARROW_SCHEMA, SPARK_SCHEMA

__all__ = [
    "ARROW_SCHEMA",
    "HEADER_INTS",
    "HEADER_TEXT",
    "SPARK_SCHEMA",
    "accelerated",
    "decode_at",
    "decode_records",
    "find_records",
]

_accel: Any = decode_c.load_accelerator()


def accelerated() -> bool:
    """True when the C accelerator decodes (built at install, ``BUSGATE_PURE_PYTHON`` unset)."""
    return _accel is not None


def find_records(
    data: bytes | memoryview,
    start: int = 0,
    stop: int | None = None,
    *,
    version: int = 2,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
    final: bool = True,
    after_seq: int = -1,
) -> ScanResult:
    """:func:`bus.journal.scan_records`, in C when the accelerator was built.

    Args:
        data: the buffer (usually a whole segment or a range of one).
        start: offset of the first record.
        stop: scan no record that starts at or after ``stop`` (default: the end of ``data``).
        version: the segment version (2, or 1).
        max_record: the largest body accepted.
        max_count: stop after this many records.
        final: ``False`` when the buffer may still grow (see :func:`bus.journal.scan_records`).
        after_seq: the sequence number before ``start``, if known.

    Returns:
        The scan, as :func:`bus.journal.scan_records` gives it, with ``offsets`` an int64 array.
    """
    options: dict[str, Any] = {"max_count": max_count, "final": final, "after_seq": after_seq}
    if _accel is None or max_record < 0:  # the reference (no accelerator, or turned off)
        found = scan_records(data, start, stop, version=version, max_record=max_record, **options)
        found.offsets = np.asarray(found.offsets, dtype=np.int64)  # type: ignore[assignment]
        return found
    return scan_fast(
        data, start, stop, version=version, max_record=max_record, as_offsets=_int64s, **options
    )


def _int64s(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.int64)


def decode_records(
    data: bytes | memoryview,
    starts: Sequence[int] | np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    ts_us: Sequence[int] | np.ndarray,
    record_offsets: Sequence[int] | np.ndarray,
    segment: str,
    *,
    base_offset: int = 0,
    seqs: Sequence[int] | np.ndarray | None = None,
) -> pa.RecordBatch:
    """Decode the messages ``data[starts[i]:starts[i]+lengths[i]]`` into one Arrow batch.

    Args:
        data: the buffer holding the records (a segment or part of one).
        starts: offset of each message body in ``data``.
        lengths: length of each body.
        ts_us: each record's timestamp, microseconds since the epoch.
        record_offsets: offset of each record in ``data`` (reported plus ``base_offset``).
        segment: the segment's file name, for the ``segment`` column.
        base_offset: where ``data`` starts in the segment file.
        seqs: each record's sequence number (``None``: v1 records, a null column).

    Returns:
        A batch with :data:`ARROW_SCHEMA`, one row per record, in order.

    Raises:
        DecodeError: a body does not lie inside ``data`` (a caller's mistake).
    """
    start_arr = np.ascontiguousarray(starts, dtype=np.int64)
    len_arr = np.ascontiguousarray(lengths, dtype=np.int64)
    n = len(start_arr)
    outside = (start_arr < 0) | (len_arr < 0) | (start_arr + len_arr > memoryview(data).nbytes)
    if outside.any():
        at = int(np.argmax(outside))
        raise DecodeError("record body outside the buffer", int(start_arr[at]))
    found = None
    if n and _accel is not None:
        found = decode_c.decode_columns(_accel, data, start_arr, len_arr)
    if found is not None:
        columns, bad = found
    elif n:
        # only the bytes of these records, plus zero padding for fixed-width reads
        lo, hi = int(start_arr[0]), int(start_arr[-1] + len_arr[-1])
        buf = np.zeros(hi - lo + decode_numpy.PAD, dtype=np.uint8)
        buf[: hi - lo] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
        columns, bad = decode_numpy.decode_columns(buf, start_arr - lo, len_arr)
    else:
        columns, bad = {}, np.zeros(0, dtype=bool)
    fixed = {
        "ts": pa.array(np.asarray(ts_us, dtype=np.int64), pa.timestamp("us", tz="UTC")),
        "seq": (
            pa.nulls(n, pa.int64())
            if seqs is None
            else pa.array(np.asarray(seqs, dtype=np.int64), pa.int64())
        ),
        "segment": pa.repeat(pa.scalar(segment, pa.string()), n),
        "offset": pa.array(np.asarray(record_offsets, dtype=np.int64) + base_offset, pa.int64()),
        "size": pa.array(len_arr.astype(np.int32), pa.int32()),
    }
    if not n:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    columns.update(fixed)
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
    if not bad.any():
        return batch
    return _patch(batch, bytes(data), start_arr, len_arr, bad)


def _patch(
    batch: pa.RecordBatch, data: bytes, starts: np.ndarray, lengths: np.ndarray, bad: np.ndarray
) -> pa.RecordBatch:
    """Replace the rows in ``bad`` with rows from the full decoder, keeping the order."""
    slow_index = np.nonzero(bad)[0]
    good_index = np.nonzero(~bad)[0]
    rows = []
    fixed = batch.select(["ts", "seq", "segment", "offset", "size"])
    fixed = fixed.take(pa.array(slow_index)).to_pylist()
    for i, extra in zip(slow_index, fixed, strict=True):
        row = _slow_row(data[starts[i] : starts[i] + lengths[i]])
        row.update(extra)
        rows.append(row)
    slow = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    good = pa.Table.from_batches([batch]).take(pa.array(good_index))
    merged = pa.concat_tables([good, slow])
    order = np.argsort(np.concatenate([good_index, slow_index]), kind="stable")
    return merged.take(pa.array(order)).combine_chunks().to_batches()[0]


def decode_at(
    data: bytes | memoryview,
    offsets: Sequence[int] | np.ndarray,
    segment: str,
    *,
    base_offset: int = 0,
    version: int = 2,
) -> pa.RecordBatch:
    """Decode the (already verified) records that start at ``offsets`` in ``data``.

    Lengths, timestamps and sequence numbers are read from the record headers in bulk
    (PROTOCOL.md section 8: length at +8, ts at +12, seq at +20 in v2), then
    :func:`decode_records` does the rest.

    Args:
        data: the buffer holding the records.
        offsets: each record's offset in ``data`` (from :func:`find_records`).
        segment: the segment's file name.
        base_offset: where ``data`` starts in the segment file.
        version: the segment version (v1 records have no sequence number).

    Returns:
        A batch with :data:`ARROW_SCHEMA`.
    """
    at = np.asarray(offsets, dtype=np.int64)
    raw = np.frombuffer(data, dtype=np.uint8)
    lengths = np.ndarray((len(raw) - 3,), dtype=">u4", buffer=raw, strides=(1,))[at + 8]
    stamps = np.ndarray((len(raw) - 7,), dtype=">i8", buffer=raw, strides=(1,))[at + 12]
    seqs = None
    if version >= 2:
        seqs = np.ndarray((len(raw) - 7,), dtype=">i8", buffer=raw, strides=(1,))[at + 20]
    return decode_records(
        data,
        at + (28 if version >= 2 else 20),
        lengths.astype(np.int64),
        stamps.astype(np.int64),
        at,
        segment,
        base_offset=base_offset,
        seqs=seqs,
    )
