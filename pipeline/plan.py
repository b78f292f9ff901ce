"""Which bytes of a journal a query reads: partitions planned from segment headers and indexes.

Pure planning (files' headers and index files in, byte ranges out; no Spark), shared by the
batch and streaming readers of the ``busjournal`` Python source:

- :class:`Bounds`: the time and sequence ranges a query keeps (from the source's options);
- :func:`plan_batch`: the :class:`JournalRange` partitions of a directory: whole segments and
  index blocks outside the bounds are never read; indexed segments are cut at block starts,
  others at record boundaries found by walking the record headers;
- :func:`complete_end`: where the complete records of a segment end (for stream offsets);
- :func:`local_journal`: the local path of a journal the Python source reads (plain or
  ``file:``), or the error that names it.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from bus.errors import JournalError
from bus.journal import (
    Block,
    SegmentInfo,
    list_segments,
    record_header_size,
    scan_file,
    segment_info,
)
from bus.journal.format import record_magic
from bus.journal.segments import find_first_record

__all__ = [
    "Bounds",
    "JournalRange",
    "bounds_from_options",
    "complete_end",
    "is_remote",
    "local_journal",
    "plan_batch",
]

_LENGTH = struct.Struct(">4sxxxxI")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def is_remote(path: str) -> bool:
    """Whether a journal path is on a file system other than the local one (``hdfs://`` ...)."""
    found = _SCHEME.match(path)
    return found is not None and len(found.group(1)) > 1 and found.group(1).lower() != "file"


def local_journal(path: str) -> str:
    """The local path of a journal (a directory or one segment) given as a path or ``file:`` URI.

    Raises:
        JournalError: nothing is there, or the path is on another file system (``hdfs://``,
            ``webhdfs://``, ``s3a://``, ...), which only the JVM reader reaches.
    """
    found = _SCHEME.match(path)
    local = path
    if found and found.group(1).lower() == "file":
        local = unquote(urlsplit(path).path)
    elif found and len(found.group(1)) > 1:  # "C:" would be a drive, not a scheme
        raise JournalError(
            path,
            -1,
            f"the Python busjournal source reads local journals only; {found.group(1)}:// is read"
            " through Hadoop's FileSystem API by the JVM reader (python -m pipeline.jvm.build,"
            " with javac)",
        )
    if not os.path.exists(local):
        raise JournalError(path, -1, "no such journal")
    return local


@dataclass(frozen=True)
class Bounds:
    """The records a query keeps: ``since_us <= ts < until_us``, ``since_seq <= seq < until_seq``.

    ``None`` leaves a side open. With a sequence bound, records without a sequence number (v1)
    are not kept (a comparison with null is not true).
    """

    since_us: int | None = None
    until_us: int | None = None
    since_seq: int | None = None
    until_seq: int | None = None

    @property
    def any(self) -> bool:
        """True when some bound is set."""
        return any(
            v is not None for v in (self.since_us, self.until_us, self.since_seq, self.until_seq)
        )

    @property
    def by_seq(self) -> bool:
        """True when a sequence bound is set."""
        return self.since_seq is not None or self.until_seq is not None

    def narrowed(self, **limits: int | None) -> Bounds:
        """These bounds and more (each new bound tightens the old one)."""
        values = {}
        for name, value in limits.items():
            if value is None:
                continue
            old = getattr(self, name)
            tighter = max if name.startswith("since") else min
            values[name] = value if old is None else tighter(old, value)
        return replace(self, **values)

    def keeps_block(self, block: Block, following_seq: int) -> bool:
        """Whether a block may hold a kept record (``following_seq``: the next block's first)."""
        if self.since_us is not None and block.max_ts < self.since_us:
            return False
        if self.until_us is not None and block.min_ts >= self.until_us:
            return False
        if self.since_seq is not None and following_seq and following_seq <= self.since_seq:
            return False
        return not (self.until_seq is not None and block.first_seq >= self.until_seq)


def _epoch_micros(text: str) -> int:
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return round(stamp.timestamp() * 1_000_000)


def bounds_from_options(options: Mapping[str, str]) -> Bounds:
    """The bounds the ``since``, ``until`` (epoch seconds or ISO 8601, UTC unless an offset is
    given), ``sinceSeq`` and ``untilSeq`` options give (either case).

    Raises:
        ValueError: a value is not a time or an integer.
    """
    named = {key.lower(): value for key, value in options.items()}
    bounds = Bounds()
    for key, field_name, parse in (
        ("since", "since_us", _epoch_micros),
        ("until", "until_us", _epoch_micros),
        ("sinceseq", "since_seq", int),
        ("untilseq", "until_seq", int),
    ):
        text = named.get(key)
        if text:
            bounds = bounds.narrowed(**{field_name: parse(text)})
    return bounds


@dataclass(frozen=True)
class JournalRange:
    """One partition: the records of ``path`` that start in ``[start, stop)``.

    Attributes:
        path: the segment file.
        start: first byte (a record boundary, or 0 for a segment with a damaged header).
        stop: records starting at or after this are left to the next range.
        limit: never read at or past this byte (the file size when the query was planned).
        version: the segment's version (1 or 2).
        after_seq: the sequence number before ``start`` when known (-1 otherwise).
        final: ``False`` when the segment may still be written (a stream's newest segment).
        bounds: the time and sequence ranges kept.
        parquet: the segment's compacted file, read instead of the segment ("" when none).
    """

    path: str
    start: int
    stop: int
    limit: int
    version: int = 2
    after_seq: int = -1
    final: bool = True
    bounds: Bounds = Bounds()
    parquet: str = ""


def _boundaries(path: Path, start: int, size: int, split_bytes: int, version: int) -> list[int]:
    """Record offsets from ``start`` about ``split_bytes`` apart and before ``size``, found by
    walking the record headers.

    The walk reads each header's magic and length only (the CRCs are the readers' job). It
    stops at anything odd (damage, a torn tail); the range after the last boundary found then
    reaches the end and its reader deals with what is wrong.
    """
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(size - start)
    unpack = _LENGTH.unpack_from
    magic, header = record_magic(version), record_header_size(version)
    points = [start]
    target = start + split_bytes
    pos, last = start, size - header
    while pos <= last:
        found, length = unpack(data, pos - start)
        if found != magic:
            break
        pos += header + length
        if pos >= target and pos < size:
            points.append(pos)
            target = pos + split_bytes
    return points


def _segment_ranges(
    info: SegmentInfo,
    later_seq: int | None,
    split_bytes: int,
    bounds: Bounds,
    compacted: Path | None = None,
) -> list[JournalRange]:
    """The partitions of one segment within ``bounds``."""
    size, path = info.size, str(info.path)
    if info.header is None:  # a damaged header: find the first intact record (rare)
        with open(path, "rb") as fh:
            first, version = find_first_record(fh.read())
        if first < 0:
            return [JournalRange(path, 0, size, size, 2, -1, True, bounds)]
        return [JournalRange(path, 0, size, size, version, -1, True, bounds)]
    version = info.version
    if bounds.by_seq and version < 2:
        return []  # v1 records have no sequence number: none is in a sequence range
    if bounds.since_seq is not None and later_seq is not None and later_seq <= bounds.since_seq:
        return []
    if bounds.until_seq is not None and info.first_seq is not None:
        if info.first_seq >= bounds.until_seq:
            return []
    first_seq = info.first_seq if info.first_seq is not None else 0
    index = info.index
    if (
        index is not None
        and index.blocks
        and not any(
            bounds.keeps_block(b, f.first_seq if f else 0)
            for b, f in zip(index.blocks, [*index.blocks[1:], None], strict=True)
        )
    ):
        return []
    if compacted is not None:
        return [JournalRange(path, 0, size, size, version, -1, True, bounds, str(compacted))]
    if index is not None and index.blocks:
        ranges: list[tuple[int, int, int]] = []  # (start, stop, after_seq)
        blocks = index.block_ranges()
        for i, (block, end) in enumerate(blocks):
            following = blocks[i + 1][0].first_seq if i + 1 < len(blocks) else 0
            if not bounds.keeps_block(block, following):
                continue
            after = block.first_seq - 1 if block.first_seq else -1
            if (
                ranges
                and ranges[-1][1] == block.offset
                and (split_bytes <= 0 or end - ranges[-1][0] <= split_bytes)
            ):
                ranges[-1] = (ranges[-1][0], end, ranges[-1][2])
            else:
                ranges.append((block.offset, end, after))
        out = []
        for a, b, after in ranges:
            if split_bytes <= 0 or b - a <= split_bytes * 3 // 2:
                out.append(JournalRange(path, a, b, size, version, after, True, bounds))
                continue
            points = _boundaries(info.path, a, b, split_bytes, version)  # a block is too big
            for n, (c, d) in enumerate(zip(points, [*points[1:], b], strict=True)):
                out.append(
                    JournalRange(path, c, d, size, version, after if n == 0 else -1, True, bounds)
                )
        return out
    if size <= info.first_record:
        return []
    if 0 < split_bytes < size - info.first_record:
        points = _boundaries(info.path, info.first_record, size, split_bytes, version)
    else:
        points = [info.first_record]
    after = first_seq - 1 if first_seq else -1
    out = []
    for n, (start, stop) in enumerate(zip(points, [*points[1:], size], strict=True)):
        out.append(
            JournalRange(path, start, stop, size, version, after if n == 0 else -1, True, bounds)
        )
    return out


#: The columns' version in a compacted file's name (``journal-NNNNNNNN.SIZE.vN.parquet``): files
#: of another version (2 added CLR and TRC; version 1 had no ``.vN``) are not read, and
#: :func:`pipeline.compact.compact` writes them again. The JVM reader's Planner has its twin.
COMPACTED_VERSION = 2


def compacted_path(segment: Path, size: int) -> Path:
    """The compacted Parquet file of ``segment`` at ``size`` bytes (:mod:`pipeline.compact`)."""
    return segment.with_name(f"{segment.stem}.{size}.v{COMPACTED_VERSION}.parquet")


def find_compacted(segment: Path, size: int) -> Path | None:
    """The valid compacted file of a segment (its name holds the segment's size and the columns'
    version), if any."""
    path = compacted_path(segment, size)
    return path if path.is_file() else None


def plan_batch(
    path: str, split_bytes: int, bounds: Bounds | None = None, *, use_compacted: bool = True
) -> list[JournalRange]:
    """The partitions of a journal directory (or one segment) for a batch query.

    Args:
        path: the journal directory, or one segment file.
        split_bytes: about how many bytes per partition (0: whole segments, or whole runs of
            the index blocks kept).
        bounds: time and sequence ranges: segments and blocks outside them are not read.
        use_compacted: read a closed segment's compacted Parquet file where it is valid
            (:mod:`pipeline.compact`); one range per such segment.

    Returns:
        The ranges, in file order.
    """
    bounds = bounds or Bounds()
    infos = [segment_info(p) for p in list_segments(path)]
    parts: list[JournalRange] = []
    for i, info in enumerate(infos):
        later = infos[i + 1].first_seq if i + 1 < len(infos) else None
        compacted = None
        if use_compacted and later is not None and info.index is not None:
            compacted = find_compacted(info.path, info.size)
        parts += _segment_ranges(info, later, split_bytes, bounds, compacted)
    return parts


def complete_end(
    path: str | os.PathLike[str],
    start: int,
    *,
    version: int,
    final: bool,
    max_records: int | None = None,
    scan: Any = None,
) -> tuple[int, int, bool]:
    """Where the complete records of a segment from ``start`` end (a stream's next offset).

    Args:
        path: the segment.
        start: a record boundary to scan from.
        version: the segment's version.
        final: ``False`` for the segment being written (an incomplete record at its end is
            waited for, never looked past).
        max_records: stop after this many records.
        scan: the scanner (default :func:`bus.journal.scan_records`).

    Returns:
        ``(end, records, whole)``: the offset after the last record (or damaged span) taken,
        how many records lie in ``[start, end)``, and whether nothing is left after ``end``
        but, at most, an incomplete record.
    """
    options: dict[str, Any] = {"version": version, "final": final}
    if scan is not None:
        options["scan"] = scan
    end, count = start, 0
    for chunk in scan_file(path, start, **options):
        found = chunk.result
        offsets = list(found.offsets)
        if max_records is not None and count + len(offsets) > max_records:
            return chunk.base + int(offsets[max_records - count]), max_records, False
        count += len(offsets)
        end = chunk.base + found.end
    return end, count, True
