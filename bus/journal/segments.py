"""Segment files on disk: names, headers, index files, and scanning a file in chunks.

The file-level layer under :mod:`bus.journal.reader` and the ``busjournal`` Spark source:

- :func:`list_segments` and :func:`segment_number`: ``journal-NNNNNNNN.seg`` in order;
- :func:`segment_info`: a segment's header and (when present and matching) its index file,
  read without scanning the records;
- :func:`closed_segments`: the segments no writer appends to again (what may be copied away);
- :func:`scan_file`: the records of a byte range of a segment, read in chunks and verified, with
  damaged spans skipped (the whole rest of the file is read only when damage needs a search);
- :class:`Damage` and :class:`TornTail`: what readers report instead of failing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.accelerators import accelerator
from bus.errors import JournalError
from bus.journal.format import (
    DEFAULT_MAX_RECORD,
    RECORD_MAGIC,
    RECORD_MAGIC_V1,
    SEGMENT_HEADER_SIZE,
    ScanResult,
    SegmentHeader,
    parse_segment_header,
    record_header_size,
    scan_records,
)
from bus.journal.index import SegmentIndex, decode_index

__all__ = [
    "Chunk",
    "Damage",
    "SegmentInfo",
    "TornTail",
    "closed_segments",
    "index_path",
    "list_segments",
    "read_index",
    "scan_fast",
    "scan_file",
    "segment_info",
    "segment_name",
    "segment_number",
]

_SEGMENT_NAME = re.compile(r"^journal-(\d{8,})\.seg$")
#: Bytes read at a time when scanning a segment, at most (a larger record grows the read).
DEFAULT_CHUNK = 8 * 1024 * 1024
#: The first read of a scan: small, so the first records come soon; each next read doubles.
FIRST_CHUNK = 256 * 1024


#: The C record scanner, built with the package (its module lives beside the journal's Spark
#: reader, which shares it); None without a C compiler or with ``BUSGATE_PURE_PYTHON``.
_FAST_SCAN: Any = accelerator("bus.native._journalscan")


def scan_fast(
    data: bytes | memoryview,
    start: int = 0,
    stop: int | None = None,
    *,
    version: int = 2,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
    final: bool = True,
    after_seq: int = -1,
    as_offsets: Callable[[bytes], Any] | None = None,
) -> ScanResult:
    """:func:`bus.journal.format.scan_records` (the reference, which it falls back to), in C.

    ``as_offsets``: how the C scan's offsets (native int64s, as bytes) are handed over (default:
    a list, as the reference gives them; the Spark reader takes a numpy array).
    """
    if _FAST_SCAN is None or max_record < 0:
        return scan_records(data, start, stop, version=version, max_record=max_record,
                            max_count=max_count, final=final, after_seq=after_seq)  # fmt: skip
    raw, end, partial, damage, last_seq = _FAST_SCAN.scan(
        data,
        start,
        -1 if stop is None else max(stop, 0),
        max_record,
        -1 if max_count is None or max_count < 0 else max_count,  # negative: no limit
        version,
        final,
        after_seq,
    )
    offsets = memoryview(raw).cast("q").tolist() if as_offsets is None else as_offsets(raw)
    return ScanResult(offsets, end, partial, damage, last_seq)


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete record at the end of a segment after which no valid record follows: left by
    a crash mid-write, or a record the writer is still writing.

    Attributes:
        path: the segment file.
        offset: where the incomplete record starts (every record before it is complete).
        size: how many bytes of it were found.
    """

    path: str
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Damage:
    """A damaged span of a segment that readers skipped (they go on after it).

    Attributes:
        path: the segment file.
        offset: where the damaged bytes start.
        size: how many bytes were skipped (0 when records are missing but no bytes are bad).
        reason: what was wrong (``checksum mismatch``, ``bad record magic``, ...).
        missing: how many records were lost, when sequence numbers tell (v2), else ``None``.
    """

    path: str
    offset: int
    size: int
    reason: str
    missing: int | None = None

    def __str__(self) -> str:
        plural = "" if self.missing == 1 else "s"
        lost = "" if self.missing is None else f", {self.missing} record{plural} lost"
        return (
            f"{self.path}: {self.reason} at offset {self.offset} ({self.size} bytes skipped{lost})"
        )


def segment_name(number: int) -> str:
    """The file name of segment ``number``: ``journal-00000001.seg``."""
    return f"journal-{number:08d}.seg"


def segment_number(path: str | os.PathLike[str]) -> int:
    """The number in a segment's file name (0 when the name is not a segment's)."""
    match = _SEGMENT_NAME.match(Path(path).name)
    return int(match.group(1)) if match else 0


def index_path(segment: str | os.PathLike[str]) -> Path:
    """Where a segment's index file lives: beside it, ``.idx`` for ``.seg``."""
    return Path(segment).with_suffix(".idx")


def list_segments(directory: str | os.PathLike[str]) -> list[Path]:
    """The segment files of a journal directory, oldest first (a single file is returned as is).

    Args:
        directory: the journal directory, or one segment file.

    Returns:
        Segment paths in number order (empty if the directory does not exist).
    """
    path = Path(directory)
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    found = []
    for child in path.iterdir():
        match = _SEGMENT_NAME.match(child.name)
        if match:
            found.append((int(match.group(1)), child))
    return [p for _, p in sorted(found)]


def read_index(segment: str | os.PathLike[str]) -> SegmentIndex | None:
    """A segment's index file, decoded; ``None`` when missing, unreadable or damaged."""
    try:
        data = index_path(segment).read_bytes()
    except OSError:
        return None
    return decode_index(data)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What is known of a segment without scanning its records.

    Attributes:
        path: the segment file.
        number: its number.
        size: its size in bytes now.
        header: its header, or ``None`` when the header is damaged.
        header_error: why the header could not be read ("" when it could).
        index: its index file when present, intact and describing this very size.
        cut: bytes the index says the segment had beyond its size now (0 normally): records
            were cut off the end of a closed segment.
    """

    path: Path
    number: int
    size: int
    header: SegmentHeader | None
    header_error: str = ""
    index: SegmentIndex | None = None
    cut: int = 0
    cut_index: SegmentIndex | None = None

    @property
    def version(self) -> int:
        """The segment version (2 when the header is unreadable: what writers write)."""
        return self.header.version if self.header is not None else 2

    @property
    def first_record(self) -> int:
        """Where the first record starts."""
        return self.header.size if self.header is not None else 0

    @property
    def first_seq(self) -> int | None:
        """The sequence number the header gives its first record (``None`` in v1)."""
        return self.header.first_seq if self.header is not None else None


def segment_info(path: str | os.PathLike[str]) -> SegmentInfo:
    """Read a segment's header and index file (not its records).

    Args:
        path: the segment file.

    Returns:
        The :class:`SegmentInfo`.

    Raises:
        JournalError: the file cannot be read.
    """
    seg = Path(path)
    try:
        with seg.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(SEGMENT_HEADER_SIZE)
    except OSError as exc:
        raise JournalError(str(seg), 0, f"cannot read segment: {exc.strerror}") from exc
    header: SegmentHeader | None
    error = ""
    try:
        header = parse_segment_header(head, str(seg))
    except JournalError as exc:
        header, error = None, exc.reason
    index = read_index(seg)
    if index is None or index.segment_size == size:
        return SegmentInfo(seg, segment_number(seg), size, header, error, index)
    if index.segment_size > size:
        return SegmentInfo(
            seg, segment_number(seg), size, header, error, None, index.segment_size - size, index
        )
    return SegmentInfo(seg, segment_number(seg), size, header, error, None)


def closed_segments(directory: str | os.PathLike[str]) -> list[SegmentInfo]:
    """The segments of a journal directory that no writer will append to again, oldest first.

    A writer appends only to the segment it created last and never reopens one (PROTOCOL.md
    section 8: a reopened journal appends to a new segment). So every segment but the newest is
    closed, and the newest is closed once the writer that left it wrote its index (on a clean
    close, or at recovery when the journal is opened again): an intact index that describes
    the segment's size now. The newest segment without one may still be written.

    Args:
        directory: the journal directory.

    Returns:
        The closed segments' :class:`SegmentInfo` (empty when there is no such directory).

    Raises:
        JournalError: a segment cannot be read.
    """
    segments = list_segments(directory)
    infos = [segment_info(p) for p in segments[:-1]]
    if segments:
        newest = segment_info(segments[-1])
        if newest.index is not None:
            infos.append(newest)
    return infos


@dataclass(slots=True)
class Chunk:
    """Bytes of a segment and what was found in them.

    Attributes:
        data: the bytes read.
        base: their offset in the segment.
        result: the scan, with offsets relative to ``data``.
    """

    data: bytes
    base: int
    result: ScanResult


Scanner = Callable[..., ScanResult]


def _read(fh: Any, path: str, start: int, stop: int) -> bytes:
    try:
        fh.seek(start)
        data: bytes = fh.read(max(0, stop - start))
    except OSError as exc:
        raise JournalError(path, start, f"cannot read segment: {exc.strerror}") from exc
    return data


def find_first_record(data: bytes, max_record: int = DEFAULT_MAX_RECORD) -> tuple[int, int]:
    """Where the first valid record of a segment with a damaged header starts, and its version.

    Returns:
        ``(offset, version)``; ``(-1, 2)`` when no valid record is found.
    """
    for version, magic in ((2, RECORD_MAGIC), (1, RECORD_MAGIC_V1)):
        at = data.find(magic)
        if at < 0:
            continue
        found = scan_records(data, at, at + 1, version=version, max_record=max_record, max_count=1)
        if found.offsets:
            return found.offsets[0], version
        if found.damage and found.end < len(data):
            return found.end, version
    return -1, 2


def scan_file(
    path: str | os.PathLike[str],
    start: int,
    stop: int | None = None,
    *,
    version: int = 2,
    final: bool = True,
    after_seq: int = -1,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
    scan: Scanner = scan_fast,
    chunk: int = DEFAULT_CHUNK,
    limit: int | None = None,
) -> Iterator[Chunk]:
    """Scan the records that start in ``[start, stop)`` of a segment, a chunk at a time.

    Chunks are read ``chunk`` bytes at a time (more for a larger record). Damage found inside a
    chunk that is not the file's end is looked at again with the rest of the file read, so the
    search for the next valid record is never cut short by the chunking.

    Args:
        path: the segment file.
        start: a record boundary (or the start of a damaged span) to read from.
        stop: records starting at or after this are not read (default: the end).
        version: the segment's version.
        final: ``False`` for a segment that may still grow (see :func:`scan_records`).
        after_seq: the sequence number before ``start``, if known.
        max_record: the largest body accepted.
        max_count: at most this many records per chunk.
        scan: the scanner (:func:`scan_fast`, C when built; :func:`scan_records`, the
            reference).
        chunk: bytes per read, at most (the first read is :data:`FIRST_CHUNK`; reads double).
        limit: never read at or past this byte (default: the file's size when opened).

    Yields:
        :class:`Chunk` objects, in file order; the last one's ``result.partial`` is a tail.

    Raises:
        JournalError: the file cannot be read.
    """
    name = os.fspath(path)
    header = record_header_size(version)
    try:
        fh = open(name, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as exc:
        raise JournalError(name, start, f"cannot read segment: {exc.strerror}") from exc
    try:
        size = os.fstat(fh.fileno()).st_size
        if limit is not None:
            size = min(size, limit)
        end_at = size if stop is None else min(stop, size)
        pos, seq, want = start, after_seq, min(chunk, FIRST_CHUNK)
        while pos < end_at:
            whole = pos + want >= size
            data = _read(fh, name, pos, size if whole else pos + want)
            found = scan(
                data,
                0,
                end_at - pos,
                version=version,
                max_record=max_record,
                max_count=max_count,
                final=final and whole,
                after_seq=seq,
            )
            if found.damage and not whole:
                # the search for the next valid record needs the rest of the file: keep the
                # records before the damage, then read on from it to the end
                cut = found.damage[0][0]
                keep = [o for o in found.offsets if o < cut]
                if keep:
                    if version >= 2:
                        seq = int.from_bytes(data[keep[-1] + 20 : keep[-1] + 28], "big")
                    yield Chunk(data, pos, ScanResult(keep, cut, 0, [], seq))
                pos += cut
                want = size - pos
                continue
            if not whole:
                found.partial = 0  # a record the chunk cut: read whole with the next chunk
            if len(found.offsets) or found.damage or (whole and found.partial):
                yield Chunk(data, pos, found)
            seq = found.last_seq
            if found.end >= end_at - pos or (whole and (found.partial or found.end >= len(data))):
                return
            if found.end == 0:  # a record larger than the chunk: read it whole
                length = int.from_bytes(data[8:12], "big") if len(data) >= 12 else 0
                want = max(want * 2, header + length)
                continue
            pos += found.end
            want = min(chunk, max(want * 2, FIRST_CHUNK))
    finally:
        fh.close()
