"""The journal's on-disk format, sans I/O: segment headers, records, and the record scanner.

Bytes in, records (or offsets and damaged spans) out: no files, no clock. PROTOCOL.md section 8
describes every byte; two versions exist and both are read:

    v1 segment header  "BGJRNL\\x00\\x01" (8)  created (i64 BE, us)                      16 bytes
    v1 record          "BJR1" crc (u32) length (u32) ts (i64 us) body                  20 + len
    v2 segment header  "BGJRNL\\x00\\x02" (8)  created (i64)  first_seq (u64)  crc (u32)  28 bytes
    v2 record          "BJR2" crc (u32) length (u32) ts (i64 us) seq (u64) body        28 + len

A record's CRC (zlib CRC-32) covers everything after it (length, ts, seq, body); a v2 segment
header's CRC covers ``created`` and ``first_seq``. Writers write v2 only.

:func:`scan_records` walks the records of a buffer by their lengths (the magic is never searched
for while the records chain). When a record is damaged (bad magic, CRC or length) it
*resynchronises*: it searches for the next offset whose magic, length and CRC check out (and, in
v2, whose sequence number is above the last good one), reports the bytes in between as a damaged
span, and goes on. An incomplete record after which no valid record can be found is a *tail*
(``partial``): a torn tail when the segment is no longer written, or a record being written.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

from bus.errors import DecodeError, EncodeError, JournalError

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_MAX_RECORD",
    "RECORD_HEADER_SIZE",
    "RECORD_HEADER_SIZE_V1",
    "RECORD_MAGIC",
    "RECORD_MAGIC_V1",
    "SEGMENT_HEADER_SIZE",
    "SEGMENT_HEADER_SIZE_V1",
    "SEGMENT_MAGIC",
    "SEGMENT_MAGIC_V1",
    "Record",
    "ScanResult",
    "SegmentHeader",
    "decode_record",
    "encode_record",
    "encode_segment_header",
    "parse_segment_header",
    "record_header_size",
    "record_magic",
    "scan_records",
]

SEGMENT_MAGIC_V1 = b"BGJRNL\x00\x01"
SEGMENT_MAGIC = b"BGJRNL\x00\x02"
RECORD_MAGIC_V1 = b"BJR1"
RECORD_MAGIC = b"BJR2"
CURRENT_VERSION = 2

_SEGMENT_V1 = struct.Struct(">8sq")
_SEGMENT_V2 = struct.Struct(">8sqQI")
SEGMENT_HEADER_SIZE_V1 = _SEGMENT_V1.size  # 16
SEGMENT_HEADER_SIZE = _SEGMENT_V2.size  # 28
_HEADER_CRC = struct.Struct(">qQ")

_RECORD_V1 = struct.Struct(">4sIIq")
_RECORD_V2 = struct.Struct(">4sIIqQ")
RECORD_HEADER_SIZE_V1 = _RECORD_V1.size  # 20
RECORD_HEADER_SIZE = _RECORD_V2.size  # 28
_CRC_START = 8  # a record's CRC covers it from its length field on
_MAGIC_CRC = struct.Struct(">4sI")
_FIELDS_V1 = struct.Struct(">Iq")
_FIELDS_V2 = struct.Struct(">IqQ")
_CHECK = struct.Struct(">4sII")
_SEQ = struct.Struct(">Q")

#: The largest record body accepted by default (a parameter of every reader and writer).
DEFAULT_MAX_RECORD = 16 * 1024 * 1024


def record_header_size(version: int) -> int:
    """The record header size of a segment version (20 for v1, 28 for v2)."""
    return RECORD_HEADER_SIZE if version >= 2 else RECORD_HEADER_SIZE_V1


def record_magic(version: int) -> bytes:
    """The record magic of a segment version (``BJR1``, ``BJR2``)."""
    return RECORD_MAGIC if version >= 2 else RECORD_MAGIC_V1


def _to_us(ts: float) -> int:
    return round(ts * 1_000_000)


class Record(NamedTuple):
    """One journal record (a named tuple: readers build one per record, so it must be cheap).

    Attributes:
        ts: when the broker routed the message, in seconds since the epoch (microsecond precision).
        raw: the message in its wire form, exactly as routed.
        offset: byte offset of the record in its segment.
        path: the segment file ("" when decoded from bytes).
        seq: the record's sequence number (``None`` in v1 segments, which have none).
    """

    ts: float
    raw: bytes
    offset: int = 0
    path: str = ""
    seq: int | None = None

    @property
    def ts_us(self) -> int:
        """The timestamp in whole microseconds since the epoch."""
        return round(self.ts * 1_000_000)

    @property
    def end(self) -> int:
        """The offset just past the record in its segment."""
        header = RECORD_HEADER_SIZE if self.seq is not None else RECORD_HEADER_SIZE_V1
        return self.offset + header + len(self.raw)


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """What a segment's header says.

    Attributes:
        version: 1 or 2.
        created: creation time, seconds since the epoch.
        first_seq: the sequence number the segment's first record gets (v2; ``None`` in v1).
        size: the header's size in bytes: where the first record starts.
    """

    version: int
    created: float
    first_seq: int | None
    size: int

    @property
    def record_header_size(self) -> int:
        """The size of this segment's record headers."""
        return record_header_size(self.version)


def encode_segment_header(created: float, first_seq: int | None = 1) -> bytes:
    """The header every segment starts with.

    Args:
        created: creation time in seconds since the epoch.
        first_seq: the sequence number of the segment's first record (v2, 28 bytes); ``None``
            writes a v1 header (16 bytes, no sequence numbers).

    Returns:
        The header bytes.
    """
    if first_seq is None:
        return _SEGMENT_V1.pack(SEGMENT_MAGIC_V1, _to_us(created))
    body = _HEADER_CRC.pack(_to_us(created), first_seq)
    return _SEGMENT_V2.pack(SEGMENT_MAGIC, _to_us(created), first_seq, zlib.crc32(body))


def parse_segment_header(data: bytes | memoryview, path: str = "") -> SegmentHeader:
    """Check a segment header (v1 or v2) and return what it says.

    Args:
        data: the first bytes of the segment (at least the header).
        path: the file, for the error.

    Returns:
        The header.

    Raises:
        JournalError: the header is short, its magic unknown or (v2) its CRC wrong.
    """
    magic = bytes(data[:8])
    if magic == SEGMENT_MAGIC:
        if len(data) < SEGMENT_HEADER_SIZE:
            raise JournalError(path, 0, "segment header is incomplete")
        _, created, first_seq, crc = _SEGMENT_V2.unpack_from(data, 0)
        if zlib.crc32(bytes(data[8:24])) != crc:
            raise JournalError(path, 0, "segment header checksum mismatch")
        return SegmentHeader(2, created / 1_000_000, first_seq, SEGMENT_HEADER_SIZE)
    if magic == SEGMENT_MAGIC_V1:
        if len(data) < SEGMENT_HEADER_SIZE_V1:
            raise JournalError(path, 0, "segment header is incomplete")
        _, created = _SEGMENT_V1.unpack_from(data, 0)
        return SegmentHeader(1, created / 1_000_000, None, SEGMENT_HEADER_SIZE_V1)
    if len(data) < 8 and (SEGMENT_MAGIC.startswith(magic) or SEGMENT_MAGIC_V1.startswith(magic)):
        raise JournalError(path, 0, "segment header is incomplete")
    raise JournalError(path, 0, "not a journal segment (bad magic)")


def encode_record(
    raw: bytes,
    ts: float,
    seq: int = 0,
    *,
    version: int = CURRENT_VERSION,
    max_record: int = DEFAULT_MAX_RECORD,
) -> bytes:
    """Encode one message as a journal record.

    Args:
        raw: the message in its wire form.
        ts: the routing time in seconds since the epoch.
        seq: the record's sequence number (v2).
        version: 2 (the default, what writers write) or 1 (no sequence number).
        max_record: the largest body accepted (default 16 MiB).

    Returns:
        The record bytes (a 28-byte header, 20 in v1, then ``raw``).

    Raises:
        EncodeError: ``raw`` is larger than ``max_record``, or ``seq`` is out of range.
    """
    if len(raw) > max_record:
        raise EncodeError(f"journal record of {len(raw)} bytes exceeds max_record {max_record}")
    if version < 2:
        fields = _FIELDS_V1.pack(len(raw), _to_us(ts))
        magic = RECORD_MAGIC_V1
    else:
        if not 0 <= seq < 2**64:
            raise EncodeError(f"journal sequence number out of range: {seq}")
        fields = _FIELDS_V2.pack(len(raw), _to_us(ts), seq)
        magic = RECORD_MAGIC
    crc = zlib.crc32(raw, zlib.crc32(fields))
    return b"".join((_MAGIC_CRC.pack(magic, crc), fields, raw))


def decode_record(
    data: bytes | memoryview,
    offset: int = 0,
    *,
    version: int = CURRENT_VERSION,
    max_record: int = DEFAULT_MAX_RECORD,
) -> tuple[Record, int] | None:
    """Decode the record that starts at ``offset`` in ``data``.

    Args:
        data: bytes holding one or more records.
        offset: where the record starts.
        version: the segment version (2, or 1 for ``BJR1`` records).
        max_record: the largest body accepted.

    Returns:
        ``(record, next_offset)``, or ``None`` when ``data`` ends before the record does (a partial
        record never consumes bytes).

    Raises:
        DecodeError: bad magic, a length over ``max_record`` or a CRC mismatch (``.offset`` is
            the record's offset).
    """
    header = record_header_size(version)
    end = len(data)
    if end - offset < header:
        return None
    magic, crc, length = _CHECK.unpack_from(data, offset)
    if magic != record_magic(version):
        raise DecodeError("bad record magic", offset)
    if length > max_record:
        raise DecodeError(f"record length {length} exceeds max_record {max_record}", offset)
    stop = offset + header + length
    if stop > end:
        return None
    if zlib.crc32(memoryview(data)[offset + _CRC_START : stop]) != crc:
        raise DecodeError("checksum mismatch", offset)
    (ts_us,) = struct.unpack_from(">q", data, offset + 12)
    seq = _SEQ.unpack_from(data, offset + 20)[0] if version >= 2 else None
    raw = bytes(data[offset + header : stop])
    return Record(ts_us / 1_000_000, raw, offset, seq=seq), stop


@dataclass(slots=True)
class ScanResult:
    """What :func:`scan_records` found in a buffer.

    Attributes:
        offsets: the offset of each complete, verified record, in order.
        end: where the scan stopped: after the last record (or damaged span) it consumed.
        partial: bytes at ``end`` that start an incomplete record after which no valid record
            was found (0 if none): a torn tail, or a record still being written.
        damage: the damaged spans skipped, as ``(offset, size, reason)``.
        last_seq: the sequence number of the last record found (v2), else what was passed in.
    """

    offsets: list[int] = field(default_factory=list)
    end: int = 0
    partial: int = 0
    damage: list[tuple[int, int, str]] = field(default_factory=list)
    last_seq: int = -1


def _valid_at(
    view: memoryview, pos: int, header: int, max_record: int, after_seq: int, v2: bool
) -> bool:
    """Whether a whole record whose magic, length and CRC check out starts at ``pos``."""
    size = len(view)
    if size - pos < header:
        return False
    _, crc, length = _CHECK.unpack_from(view, pos)
    if length > max_record or pos + header + length > size:
        return False
    if zlib.crc32(view[pos + _CRC_START : pos + header + length]) != crc:
        return False
    return not v2 or _SEQ.unpack_from(view, pos + 20)[0] > after_seq


def _whole_but_length(view: memoryview, pos: int, header: int) -> bool:
    """Whether the bytes from ``pos`` to the end are a whole record whose length field alone is
    wrong: its CRC matches when the length is what is actually there (then the record is not
    torn: a flipped bit made it look longer)."""
    rest = len(view) - pos
    if rest < header:
        return False
    crc = int.from_bytes(view[pos + 4 : pos + 8], "big")
    actual = struct.pack(">I", rest - header)
    return zlib.crc32(view[pos + 12 : pos + rest], zlib.crc32(actual)) == crc


def _resync(
    data: bytes | memoryview,
    start: int,
    magic: bytes,
    header: int,
    max_record: int,
    after_seq: int,
    v2: bool,
) -> int:
    """The first offset from ``start`` where a valid record starts, or -1."""
    blob = data if isinstance(data, bytes) else bytes(data)
    view = memoryview(blob)
    at = blob.find(magic, start)
    while at >= 0:
        if _valid_at(view, at, header, max_record, after_seq, v2):
            return at
        at = blob.find(magic, at + 1)
    return -1


def scan_records(
    data: bytes | memoryview,
    start: int = 0,
    stop: int | None = None,
    *,
    version: int = CURRENT_VERSION,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
    final: bool = True,
    after_seq: int = -1,
) -> ScanResult:
    """Find and verify the records of ``data[start:stop]``, resynchronising over damage.

    The hot loop of every reader: one pass, one CRC per record; only each record's offset is
    kept (lengths, times and sequence numbers are read back from the headers in bulk).

    Args:
        data: the buffer (usually a whole segment).
        start: offset of the first record.
        stop: scan no record that starts at or after ``stop`` (default: the end of ``data``); a
            damaged span that starts before it is followed to the next valid record.
        version: the segment version (2, or 1).
        max_record: the largest body accepted.
        max_count: stop after this many records.
        final: ``False`` when the buffer may still grow (the segment being written): an
            incomplete record at its end is then left as ``partial`` without looking past it.
            ``True``: records after an incomplete one are looked for, and when one is found, the
            incomplete record is damage (a flipped length bit), not a torn tail.
        after_seq: (v2) the sequence number of the record before ``start``, if known: a record
            found by resynchronisation must have a larger one.

    Returns:
        The :class:`ScanResult`.
    """
    view = memoryview(data)
    size = len(view)
    limit = size if stop is None else min(stop, size)
    v2 = version >= 2
    header = RECORD_HEADER_SIZE if v2 else RECORD_HEADER_SIZE_V1
    magic = RECORD_MAGIC if v2 else RECORD_MAGIC_V1
    last_header = size - header
    unpack = _CHECK.unpack_from
    crc32 = zlib.crc32
    result = ScanResult(last_seq=after_seq)
    offsets = result.offsets
    append = offsets.append
    left = -1 if max_count is None else max_count
    last_seq = after_seq
    pos = start
    while pos < limit and left:
        reason = ""
        if pos > last_header:
            tail = bytes(view[pos : pos + 4])
            if not magic.startswith(tail):
                reason = "bad record magic"
        else:
            found, crc, length = unpack(view, pos)
            nxt = pos + header + length
            if found != magic:
                reason = "bad record magic"
            elif length > max_record:
                reason = f"record length {length} exceeds max_record {max_record}"
            elif nxt <= size:
                if crc32(view[pos + _CRC_START : nxt]) == crc:
                    append(pos)
                    if v2:
                        last_seq = _SEQ.unpack_from(view, pos + 20)[0]
                    pos = nxt
                    left -= 1
                    continue
                reason = "checksum mismatch"
        if not reason:  # an incomplete record: a torn tail unless a valid record follows
            again = _resync(data, pos + 1, magic, header, max_record, last_seq, v2) if final else -1
            if again < 0 and final and _whole_but_length(view, pos, header):
                result.damage.append((pos, size - pos, "record length field damaged"))
                pos = size
                break
            if again < 0:
                result.partial = size - pos
                break
            result.damage.append((pos, again - pos, "record runs past the next record"))
            pos = again
            continue
        again = _resync(data, pos + 1, magic, header, max_record, last_seq, v2)
        if again < 0:
            result.damage.append((pos, size - pos, reason))
            pos = size
            break
        result.damage.append((pos, again - pos, reason))
        pos = again
    result.end = pos
    result.last_seq = last_seq
    return result
