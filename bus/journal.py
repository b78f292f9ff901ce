"""The journal: an append-only record of the messages the broker routes (PROTOCOL.md section 8).

A journal is a directory of *segment* files ``journal-00000001.seg``, ``journal-00000002.seg``, ...
Each segment starts with a 16-byte header and holds records; each record holds one message in its
binary wire form (the bytes the broker routed), the time it was routed and a CRC-32::

    segment header  "BGJRNL\\x00\\x01" (8 bytes)  created (i64 BE, microseconds since the epoch)
    record          magic "BJR1" (4)  crc (u32 BE)  length (u32 BE)  ts (i64 BE, us)  body (length)

The CRC (zlib CRC-32) covers ``length``, ``ts`` and ``body``, so a flipped bit anywhere but in the
magic is detected; a flipped bit in the magic is detected by the magic itself.

Layers:

- a sans-I/O record codec: :func:`encode_record`, :func:`decode_record` and :func:`index_records`
  (bytes in, records or an index out; no files, no clock);
- :class:`Journal`, the writer the broker calls from its routing path (``append(raw, now)``), with
  rotation by size and age and an fsync policy (:class:`FsyncPolicy`);
- :class:`JournalReader` and :func:`read_segment`, which read records back, verify each CRC and
  report a torn tail (an incomplete last record, left by a crash mid-write) instead of failing.

Damage other than a torn tail raises :class:`~bus.errors.JournalError` naming the file and offset.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import orjson

from bus.errors import ClosedError, ConfigError, DecodeError, EncodeError, JournalError

__all__ = [
    "RECORD_HEADER_SIZE",
    "RECORD_MAGIC",
    "SEGMENT_HEADER_SIZE",
    "SEGMENT_MAGIC",
    "FsyncPolicy",
    "Journal",
    "JournalFilter",
    "JournalReader",
    "Record",
    "RecordIndex",
    "TornTail",
    "decode_record",
    "encode_record",
    "encode_segment_header",
    "header_fields",
    "index_records",
    "list_segments",
    "read_segment",
    "scan_records",
    "segment_created",
]

SEGMENT_MAGIC = b"BGJRNL\x00\x01"
RECORD_MAGIC = b"BJR1"
_SEGMENT_HEADER = struct.Struct(">8sq")
_RECORD_HEADER = struct.Struct(">4sIIq")
SEGMENT_HEADER_SIZE = _SEGMENT_HEADER.size  # 16
RECORD_HEADER_SIZE = _RECORD_HEADER.size  # 20
_CRC_START = 8  # the CRC covers the record from its length field on
_LENGTH_TS = struct.Struct(">Iq")
_MAGIC_CRC = struct.Struct(">4sI")

#: Default limits (constructor parameters override them).
DEFAULT_MAX_RECORD = 16 * 1024 * 1024
DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_SEGMENT_AGE = 3600.0
DEFAULT_FSYNC_INTERVAL = 1.0

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^journal-(\d{8,})\.seg$")


# ---------------------------------------------------------------------------------------------
# Sans-I/O record codec
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One journal record.

    Attributes:
        ts: when the broker routed the message, in seconds since the epoch (microsecond precision).
        raw: the message in its wire form, exactly as routed.
        offset: byte offset of the record in its segment.
        path: the segment file ("" when decoded from bytes).
    """

    ts: float
    raw: bytes
    offset: int = 0
    path: str = ""

    @property
    def ts_us(self) -> int:
        """The timestamp in whole microseconds since the epoch."""
        return round(self.ts * 1_000_000)


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete record at the end of a segment, left by a crash mid-write.

    Attributes:
        path: the segment file.
        offset: where the incomplete record starts (every record before it is complete).
        size: how many bytes of it were found.
    """

    path: str
    offset: int
    size: int


def _to_us(ts: float) -> int:
    return round(ts * 1_000_000)


def encode_segment_header(created: float) -> bytes:
    """The 16-byte header every segment starts with.

    Args:
        created: creation time in seconds since the epoch.

    Returns:
        The header bytes.
    """
    return _SEGMENT_HEADER.pack(SEGMENT_MAGIC, _to_us(created))


def encode_record(raw: bytes, ts: float, *, max_record: int = DEFAULT_MAX_RECORD) -> bytes:
    """Encode one message as a journal record.

    Args:
        raw: the message in its wire form.
        ts: the routing time in seconds since the epoch.
        max_record: the largest body accepted (default 16 MiB).

    Returns:
        The record bytes (20-byte header + ``raw``).

    Raises:
        EncodeError: ``raw`` is larger than ``max_record``.
    """
    if len(raw) > max_record:
        raise EncodeError(f"journal record of {len(raw)} bytes exceeds max_record {max_record}")
    fields = _LENGTH_TS.pack(len(raw), _to_us(ts))
    crc = zlib.crc32(raw, zlib.crc32(fields))
    return b"".join((_MAGIC_CRC.pack(RECORD_MAGIC, crc), fields, raw))


def decode_record(
    data: bytes | memoryview, offset: int = 0, *, max_record: int = DEFAULT_MAX_RECORD
) -> tuple[Record, int] | None:
    """Decode the record that starts at ``offset`` in ``data``.

    Args:
        data: bytes holding one or more records.
        offset: where the record starts.
        max_record: the largest body accepted.

    Returns:
        ``(record, next_offset)``, or ``None`` when ``data`` ends before the record does (a partial
        record never consumes bytes).

    Raises:
        DecodeError: bad magic, a length over ``max_record`` or a CRC mismatch (``.offset`` is
            the record's offset).
    """
    end = len(data)
    if end - offset < RECORD_HEADER_SIZE:
        return None
    magic, crc, length, ts_us = _RECORD_HEADER.unpack_from(data, offset)
    if magic != RECORD_MAGIC:
        raise DecodeError("bad record magic", offset)
    if length > max_record:
        raise DecodeError(f"record length {length} exceeds max_record {max_record}", offset)
    stop = offset + RECORD_HEADER_SIZE + length
    if stop > end:
        return None
    if zlib.crc32(memoryview(data)[offset + _CRC_START : stop]) != crc:
        raise DecodeError("checksum mismatch", offset)
    raw = bytes(data[offset + RECORD_HEADER_SIZE : stop])
    return Record(ts_us / 1_000_000, raw, offset), stop


@dataclass(slots=True)
class RecordIndex:
    """Where the complete records of a byte range are: parallel lists, one entry per record.

    Attributes:
        starts: offset of each record's body (the message bytes) in the scanned buffer.
        lengths: length of each body.
        ts_us: each record's timestamp in microseconds.
        record_offsets: offset of each record (its header) in the scanned buffer.
        end: offset just past the last complete record.
        partial: bytes of an incomplete record found after ``end`` (0 if none).
    """

    starts: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    ts_us: list[int] = field(default_factory=list)
    record_offsets: list[int] = field(default_factory=list)
    end: int = 0
    partial: int = 0


def index_records(
    data: bytes | memoryview,
    start: int = 0,
    stop: int | None = None,
    *,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
) -> RecordIndex:
    """Find and verify every complete record in ``data[start:stop]`` without copying bodies.

    This is the fast path the Spark data source uses: one pass, one CRC per record, no objects
    per record besides four integers.

    Args:
        data: the buffer (usually a whole segment).
        start: offset of the first record.
        stop: scan no record that starts at or after ``stop`` (default: the end of ``data``).
        max_record: the largest body accepted.
        max_count: stop after this many records.

    Returns:
        The index; ``partial`` > 0 when the buffer ends inside a record.

    Raises:
        DecodeError: bad magic, oversized length or CRC mismatch (``.offset`` is the record's).
    """
    offsets, end, partial = scan_records(
        data, start, stop, max_record=max_record, max_count=max_count
    )
    index = RecordIndex(record_offsets=offsets, end=end, partial=partial)
    unpack = _RECORD_HEADER.unpack_from
    for pos in offsets:
        _, _, length, ts_us = unpack(data, pos)
        index.starts.append(pos + RECORD_HEADER_SIZE)
        index.lengths.append(length)
        index.ts_us.append(ts_us)
    return index


_CHECK = struct.Struct(">4sII")


def scan_records(
    data: bytes | memoryview,
    start: int = 0,
    stop: int | None = None,
    *,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
) -> tuple[list[int], int, int]:
    """Find and verify the complete records of ``data[start:stop]``: the hot loop of readers.

    One pass, one CRC per record; only each record's offset is kept (lengths and times can be
    read back from the headers in bulk, as the Spark source does with numpy).

    Args:
        data: the buffer (usually a whole segment).
        start: offset of the first record.
        stop: scan no record that starts at or after ``stop`` (default: the end of ``data``).
        max_record: the largest body accepted.
        max_count: stop after this many records.

    Returns:
        ``(offsets, end, partial)``: offset of each record, the offset after the last one, and
        the bytes of an incomplete record found at ``end`` (0 if none).

    Raises:
        DecodeError: bad magic, oversized length or CRC mismatch (``.offset`` is the record's).
    """
    view = memoryview(data)
    size = len(view)
    limit = size if stop is None else min(stop, size)
    last_header = size - RECORD_HEADER_SIZE
    unpack = _CHECK.unpack_from
    crc32 = zlib.crc32
    offsets: list[int] = []
    append = offsets.append
    left = -1 if max_count is None else max_count
    pos, partial = start, 0
    while pos < limit and left:
        if pos > last_header:
            partial = size - pos
            break
        magic, crc, length = unpack(view, pos)
        nxt = pos + RECORD_HEADER_SIZE + length
        if magic != RECORD_MAGIC:
            raise DecodeError("bad record magic", pos)
        if length > max_record:
            raise DecodeError(f"record length {length} exceeds max_record {max_record}", pos)
        if nxt > size:
            partial = size - pos
            break
        if crc32(view[pos + _CRC_START : nxt]) != crc:
            raise DecodeError("checksum mismatch", pos)
        append(pos)
        pos = nxt
        left -= 1
    return offsets, pos, partial


# ---------------------------------------------------------------------------------------------
# Header fields without a full decode (for filters and the pipeline's fallback)
# ---------------------------------------------------------------------------------------------

_FIXED_SIZES = {
    1: 0,  # UDEF
    4: 1,  # S8
    5: 1,  # U8
    6: 2,  # S16
    7: 2,  # U16
    8: 4,  # S32
    9: 4,  # U32
    10: 8,  # S64
    11: 8,  # U64
    12: 4,  # FLOAT
    13: 8,  # DOUBLE
    14: 1,  # BOOLEAN
    15: 8,  # DATE
}
_VARIABLE = frozenset({0, 2, 3, 16, 17})  # FRAME BYTEARRAY STRING URI ARRAY
_INT_FORMATS = {4: ">b", 5: ">B", 6: ">h", 7: ">H", 8: ">i", 9: ">I", 10: ">q", 11: ">Q"}


def _frame_fields(raw: bytes, wanted: frozenset[str]) -> dict[str, object] | None:
    """Top-level string/int fields of a binary data frame named in ``wanted`` (first wins).

    Returns ``None`` when ``raw`` is not a well-formed binary frame.
    """
    found: dict[str, object] = {}
    pos, size = 0, len(raw)
    while pos < size:
        namelen = raw[pos]
        pos += 1
        if pos + namelen + 1 > size:
            return None
        name = raw[pos : pos + namelen].decode("latin-1")
        ftype = raw[pos + namelen]
        pos += namelen + 1
        if ftype in _VARIABLE:
            if pos + 4 > size:
                return None
            (length,) = struct.unpack_from(">I", raw, pos)
            pos += 4
        elif ftype in _FIXED_SIZES:
            length = _FIXED_SIZES[ftype]
        else:
            return None
        if pos + length > size:
            return None
        if name in wanted and name not in found:
            if ftype in (3, 16):
                found[name] = raw[pos : pos + length].decode("latin-1")
            elif ftype in _INT_FORMATS:
                (found[name],) = struct.unpack_from(_INT_FORMATS[ftype], raw, pos)
        pos += length
    return found


def header_fields(raw: bytes, names: Iterable[str]) -> dict[str, object]:
    """Read the named top-level header fields of a message without decoding its payload.

    Binary frames (ENC=FRAM) are scanned field by field; anything else is tried as Latin-1 JSON
    (ENC=JSON), as Kestrel's decoder does. Only text and integer values are returned.

    Args:
        raw: the message's wire form.
        names: the header fields wanted (``"GRP"``, ``"TYP"``, ...).

    Returns:
        The fields found, by name (missing names are left out).
    """
    wanted = frozenset(names)
    found = _frame_fields(raw, wanted)
    if found is not None:
        return found
    try:
        value = orjson.loads(raw.decode("latin-1"))
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in wanted and isinstance(v, str | int)}


# ---------------------------------------------------------------------------------------------
# Segment files
# ---------------------------------------------------------------------------------------------


def _segment_name(seq: int) -> str:
    return f"journal-{seq:08d}.seg"


def list_segments(directory: str | os.PathLike[str]) -> list[Path]:
    """The segment files of a journal directory, oldest first (a single file is returned as is).

    Args:
        directory: the journal directory, or one segment file.

    Returns:
        Segment paths in sequence order (empty if the directory does not exist).
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


def segment_created(header: bytes, path: str = "") -> float:
    """Check a segment header and return its creation time (seconds since the epoch).

    Args:
        header: the first 16 bytes of the segment.
        path: the file, for the error.

    Returns:
        The creation time.

    Raises:
        JournalError: the header is short or its magic is wrong.
    """
    if len(header) < SEGMENT_HEADER_SIZE:
        raise JournalError(path, 0, "segment header is incomplete")
    magic, created = _SEGMENT_HEADER.unpack_from(header, 0)
    if magic != SEGMENT_MAGIC:
        raise JournalError(path, 0, "not a journal segment (bad magic)")
    return float(created) / 1_000_000


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise JournalError(str(path), 0, f"cannot read segment: {exc.strerror}") from exc


def read_segment(
    path: str | os.PathLike[str],
    *,
    start: int = SEGMENT_HEADER_SIZE,
    torn: list[TornTail] | None = None,
    max_record: int = DEFAULT_MAX_RECORD,
) -> Iterator[Record]:
    """Yield every complete record of one segment, verifying each CRC.

    Args:
        path: the segment file.
        start: offset of the first record to read (must be a record boundary).
        torn: if given, a torn tail found at the end of the segment is appended to it.
        max_record: the largest body accepted.

    Yields:
        Records in file order.

    Raises:
        JournalError: the segment is damaged (bad header, bad magic, CRC mismatch, bad length);
            ``.path`` and ``.offset`` say where.
    """
    seg = Path(path)
    data = _read_file(seg)
    segment_created(data[:SEGMENT_HEADER_SIZE], str(seg))
    try:
        index = index_records(data, max(start, SEGMENT_HEADER_SIZE), max_record=max_record)
    except DecodeError as exc:
        raise JournalError(str(seg), exc.offset or 0, exc.reason) from exc
    name = str(seg)
    for off, body, length, ts_us in zip(
        index.record_offsets, index.starts, index.lengths, index.ts_us, strict=True
    ):
        yield Record(ts_us / 1_000_000, data[body : body + length], off, name)
    if index.partial and torn is not None:
        torn.append(TornTail(name, index.end, index.partial))


class JournalReader:
    """Read a journal directory back, oldest record first.

    Torn tails (incomplete records at the end of a segment) are never read as data and never
    raise: they are collected in :attr:`torn_tails` as the reader passes them.

    Args:
        directory: the journal directory (or one segment file).
        max_record: the largest body accepted.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_record: int = DEFAULT_MAX_RECORD
    ) -> None:
        self.directory = Path(directory)
        self.max_record = max_record
        self.torn_tails: list[TornTail] = []

    def segments(self) -> list[Path]:
        """The segment files, oldest first."""
        return list_segments(self.directory)

    def records(self, since: float | None = None, until: float | None = None) -> Iterator[Record]:
        """Yield the records with ``since <= ts < until`` (either bound optional).

        Raises:
            JournalError: a segment is damaged.
        """
        self.torn_tails = []
        for seg in self.segments():
            for record in read_segment(seg, torn=self.torn_tails, max_record=self.max_record):
                if since is not None and record.ts < since:
                    continue
                if until is not None and record.ts >= until:
                    continue
                yield record


# ---------------------------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------------------------


class FsyncPolicy(StrEnum):
    """When the writer asks the OS to put journal bytes on disk (``os.fsync``).

    Every append is handed to the OS at once (one ``write``), so records survive a crash of the
    process (kill -9) whatever the policy; the policy decides what survives a crash of the machine.

    - ``none``: never fsync while running (only at rotation and close): fastest; a power loss
      may lose the last seconds the OS had not yet flushed.
    - ``interval``: fsync at the first append ``fsync_interval`` seconds after the previous
      fsync (default 1 s), at rotation and at close: at most about that much is lost.
    - ``always``: fsync after every append: nothing acknowledged is lost; slowest.
    """

    NONE = "none"
    INTERVAL = "interval"
    ALWAYS = "always"


def _pattern_matches(pattern: str, group: str) -> bool:
    """The bus's subscription rule (PROTOCOL.md section 5): ``*`` one token, ``>`` the rest."""
    tokens, names = pattern.split("."), group.split(".")
    for index, token in enumerate(tokens):
        if token == ">":
            return len(names) > index
        if index >= len(names) or (token != "*" and token != names[index]):
            return False
    return len(names) == len(tokens)


@dataclass(frozen=True)
class JournalFilter:
    """Which messages the journal records.

    Attributes:
        groups: patterns on GRP, with the bus's subscription rules (``demo`` exact, ``sensor.*``
            one token, ``sensor.>`` one or more tokens, ``>`` everything); ``None``: every group.
        types: TYP values recorded (``{"RQS", "ACK"}``); ``None`` records every type.
    """

    groups: tuple[str, ...] | None = None
    types: frozenset[str] | None = None

    @property
    def everything(self) -> bool:
        """True when the filter lets every message through (no header scan needed)."""
        return self.groups is None and self.types is None

    def accepts(self, raw: bytes) -> bool:
        """Whether a message (in wire form) is to be recorded.

        Args:
            raw: the message bytes.

        Returns:
            True to record it.
        """
        if self.everything:
            return True
        fields = header_fields(raw, ("GRP", "TYP"))
        if self.types is not None and fields.get("TYP") not in self.types:
            return False
        if self.groups is not None:
            grp = fields.get("GRP")
            if not isinstance(grp, str):
                return False
            return any(_pattern_matches(pattern, grp) for pattern in self.groups)
        return True


class Journal:
    """The append-only journal writer the broker calls from its routing path.

    Opening a directory that already holds segments checks the last one: a torn tail (crash in
    the middle of a write) is cut off, reported in :attr:`recovered`, and every complete record
    before it kept. Other damage is reported in :attr:`damage` and left in place (readers name
    it); the journal keeps working. Appends always go to a new segment.

    Args:
        directory: where the segments live (created if missing).
        max_segment_bytes: rotate when a segment would grow past this (default 64 MiB).
        max_segment_age: rotate at the first append this many seconds after the segment was
            created (default 3600 s).
        fsync: the :class:`FsyncPolicy` (default ``interval``).
        fsync_interval: seconds between fsyncs under the ``interval`` policy (default 1 s).
        filter: which messages to record (default: all).
        max_record: the largest message recorded (default 16 MiB); larger ones are skipped.

    Raises:
        ConfigError: a limit is invalid.
        JournalError: the directory cannot be created or read.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        max_segment_age: float = DEFAULT_MAX_SEGMENT_AGE,
        fsync: FsyncPolicy | str = FsyncPolicy.INTERVAL,
        fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
        filter: JournalFilter | None = None,
        max_record: int = DEFAULT_MAX_RECORD,
    ) -> None:
        if max_segment_bytes < SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE:
            raise ConfigError(f"max_segment_bytes too small: {max_segment_bytes}")
        if max_segment_age <= 0 or fsync_interval < 0:
            raise ConfigError("max_segment_age must be > 0 and fsync_interval >= 0")
        try:
            self.fsync = FsyncPolicy(fsync)
        except ValueError as exc:
            raise ConfigError(f"unknown fsync policy {fsync!r} (none|interval|always)") from exc
        self.directory = Path(directory)
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age = max_segment_age
        self.fsync_interval = fsync_interval
        self.filter = filter or JournalFilter()
        self._everything = self.filter.everything
        self._sync_always = self.fsync is FsyncPolicy.ALWAYS
        self._sync_interval = self.fsync is FsyncPolicy.INTERVAL
        self.max_record = max_record
        self.recovered: TornTail | None = None
        self.damage: JournalError | None = None
        self.appended = 0
        self.skipped = 0
        self.fsyncs = 0  # os.fsync calls that succeeded (the broker's /metrics)
        self._fd: int | None = None
        self._size = 0
        self._created = 0.0
        self._last_sync = 0.0
        self._closed = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(str(self.directory), 0, f"cannot create: {exc.strerror}") from exc
        existing = list_segments(self.directory)
        self._seq = 0
        if existing:
            self._seq = int(_SEGMENT_NAME.match(existing[-1].name).group(1))  # type: ignore[union-attr]
            self.recovered = self._recover(existing[-1])
            if self.recovered is not None:
                log.warning(
                    "journal: torn tail cut in %s at offset %d (%d bytes of an incomplete record)",
                    self.recovered.path,
                    self.recovered.offset,
                    self.recovered.size,
                )
            if self.damage is not None:
                log.error(
                    "journal: %s (left in place; new records go to a new segment)", self.damage
                )

    @property
    def segment_path(self) -> Path | None:
        """The segment being written (``None`` before the first append)."""
        return self.directory / _segment_name(self._seq) if self._fd is not None else None

    def _recover(self, path: Path) -> TornTail | None:
        data = _read_file(path)
        if len(data) < SEGMENT_HEADER_SIZE:
            # Crashed while writing the header: nothing in it can be a record.
            path.unlink()
            return TornTail(str(path), 0, len(data)) if data else None
        try:
            segment_created(data, str(path))
            _, end, partial = scan_records(data, SEGMENT_HEADER_SIZE, max_record=self.max_record)
        except JournalError as exc:
            self.damage = exc
            return None
        except DecodeError as exc:
            # Damage is left as it is, for readers to report; the bus keeps journaling.
            self.damage = JournalError(str(path), exc.offset or 0, exc.reason)
            return None
        if not partial:
            return None
        try:
            os.truncate(path, end)
        except OSError as exc:
            raise JournalError(str(path), end, f"cannot cut torn tail: {exc}") from exc
        return TornTail(str(path), end, partial)

    def append(self, raw: bytes, now: float) -> bool:
        """Record one routed message.

        Args:
            raw: the message in its wire form.
            now: the routing time, seconds since the epoch (the caller's clock).

        Returns:
            True if recorded, False if the filter or ``max_record`` left it out.

        Raises:
            ClosedError: the journal was closed.
            JournalError: the segment cannot be written (disk full, ...).
        """
        if self._closed:
            raise ClosedError("journal is closed")
        if len(raw) > self.max_record or not (self._everything or self.filter.accepts(raw)):
            self.skipped += 1
            return False
        fields = _LENGTH_TS.pack(len(raw), round(now * 1_000_000))
        record = b"".join(
            (_MAGIC_CRC.pack(RECORD_MAGIC, zlib.crc32(raw, zlib.crc32(fields))), fields, raw)
        )
        if self._fd is None or self._must_rotate(len(record), now):
            self._rotate(now)
        try:
            os.write(self._fd, record)  # type: ignore[arg-type]
        except OSError as exc:
            raise JournalError(str(self.segment_path), self._size, f"write: {exc}") from exc
        self._size += len(record)
        self.appended += 1
        if self._sync_always or (
            self._sync_interval and now - self._last_sync >= self.fsync_interval
        ):
            self._sync(now)
        return True

    def _must_rotate(self, size: int, now: float) -> bool:
        if self._size + size > self.max_segment_bytes and self._size > SEGMENT_HEADER_SIZE:
            return True
        return now - self._created >= self.max_segment_age

    def _sync(self, now: float) -> None:
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise JournalError(str(self.segment_path), self._size, f"fsync: {exc}") from exc
            self.fsyncs += 1
        self._last_sync = now

    def _close_segment(self) -> None:
        if self._fd is not None:
            self._sync(self._last_sync)
            os.close(self._fd)
            self._fd = None

    def _rotate(self, now: float) -> None:
        self._close_segment()
        self._seq += 1
        path = self.directory / _segment_name(self._seq)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            os.write(fd, encode_segment_header(now))
        except OSError as exc:
            raise JournalError(str(path), 0, f"cannot create segment: {exc}") from exc
        self._fd = fd
        self._size = SEGMENT_HEADER_SIZE
        self._created = now
        self._last_sync = now

    def flush(self) -> None:
        """fsync the current segment now, whatever the policy."""
        self._sync(self._last_sync)

    def close(self) -> None:
        """fsync and close the current segment. Closing twice is allowed."""
        if not self._closed:
            self._closed = True
            self._close_segment()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
