"""Segment index files (``journal-NNNNNNNN.idx``), sans I/O: encode, decode, track while writing.

A closed segment gets an index beside it, written by the writer when it leaves the segment
(rotation, close, or recovery at open). Readers use it to skip whole segments and blocks of
records by time and sequence number without scanning; without it (the segment being written, a
crash before the index was written, a damaged index) they scan. An index only speeds reading up:
records are always verified by their own CRCs. PROTOCOL.md section 8 gives the layout::

    magic "BGJIDX\\x00\\x01" (8)  segment_size (u64)  count (u64)  first_seq (u64)  last_seq (u64)
    min_ts (i64 us)  max_ts (i64 us)  blocks (u32)
    blocks x [offset (u64) first_seq (u64) count (u32) min_ts (i64) max_ts (i64)], 36 bytes each
    crc (u32): zlib CRC-32 of every byte before it

A *block* is the records that start in ``[offset, next block's offset)`` (the last one runs to
``segment_size``); the writer starts one every ``index_interval`` bytes (default 1 MiB).
Sequence numbers are 0 where there are none (v1 segments, empty segments).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_INDEX_INTERVAL",
    "INDEX_MAGIC",
    "Block",
    "BlockTracker",
    "SegmentIndex",
    "decode_index",
    "encode_index",
]

INDEX_MAGIC = b"BGJIDX\x00\x01"
_HEAD = struct.Struct(">8sQQQQqqI")
_BLOCK = struct.Struct(">QQIqq")
_CRC = struct.Struct(">I")

#: Bytes of records between two index blocks, by default.
DEFAULT_INDEX_INTERVAL = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Block:
    """A run of records in a segment.

    Attributes:
        offset: where its first record starts.
        first_seq: its first record's sequence number (0: none).
        count: how many records it holds.
        min_ts: the smallest timestamp in it, microseconds.
        max_ts: the largest timestamp in it, microseconds.
    """

    offset: int
    first_seq: int
    count: int
    min_ts: int
    max_ts: int


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """What an index file says about its segment.

    Attributes:
        segment_size: the segment's size in bytes when the index was written.
        count: records in the segment.
        first_seq: the first record's sequence number (0: none).
        last_seq: the last record's sequence number (0: none).
        min_ts: smallest timestamp, microseconds (0 when empty).
        max_ts: largest timestamp, microseconds (0 when empty).
        blocks: the blocks, in file order.
    """

    segment_size: int
    count: int
    first_seq: int
    last_seq: int
    min_ts: int
    max_ts: int
    blocks: tuple[Block, ...] = ()

    def block_ranges(self) -> list[tuple[Block, int]]:
        """Each block with the offset where it ends (the next block's start, or the size)."""
        ends = [b.offset for b in self.blocks[1:]] + [self.segment_size]
        return list(zip(self.blocks, ends, strict=True))


def encode_index(index: SegmentIndex) -> bytes:
    """The bytes of an index file.

    Args:
        index: what to write.

    Returns:
        The file's content, CRC included.
    """
    parts = [
        _HEAD.pack(
            INDEX_MAGIC,
            index.segment_size,
            index.count,
            index.first_seq,
            index.last_seq,
            index.min_ts,
            index.max_ts,
            len(index.blocks),
        )
    ]
    parts += [_BLOCK.pack(b.offset, b.first_seq, b.count, b.min_ts, b.max_ts) for b in index.blocks]
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode_index(data: bytes) -> SegmentIndex | None:
    """Read an index file's bytes; ``None`` when they are not a whole, intact index."""
    if len(data) < _HEAD.size + _CRC.size or data[:8] != INDEX_MAGIC:
        return None
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: len(data) - _CRC.size]) != crc:
        return None
    _, size, count, first, last, min_ts, max_ts, nblocks = _HEAD.unpack_from(data, 0)
    if len(data) != _HEAD.size + nblocks * _BLOCK.size + _CRC.size:
        return None
    blocks = tuple(
        Block(*_BLOCK.unpack_from(data, _HEAD.size + i * _BLOCK.size)) for i in range(nblocks)
    )
    return SegmentIndex(size, count, first, last, min_ts, max_ts, blocks)


@dataclass(slots=True)
class BlockTracker:
    """Builds a segment's index while its records are appended (or scanned).

    The writer calls :meth:`add` per record: two comparisons in the common case, a new block
    every ``interval`` bytes.

    Args:
        start: where the first record starts (the segment header's size).
        interval: bytes between block starts.
    """

    start: int
    interval: int = DEFAULT_INDEX_INTERVAL
    blocks: list[Block] = field(default_factory=list)
    _offset: int = -1
    _first_seq: int = 0
    _count: int = 0
    _min: int = 0
    _max: int = 0
    _next: int = 0

    def add(self, offset: int, size: int, ts_us: int, seq: int) -> None:
        """Account for one record of ``size`` bytes at ``offset``."""
        if self._count and offset < self._next:
            self._count += 1
            if ts_us < self._min:
                self._min = ts_us
            elif ts_us > self._max:
                self._max = ts_us
            return
        self._close()
        self._offset, self._first_seq, self._count = offset, seq, 1
        self._min = self._max = ts_us
        self._next = offset + self.interval

    def _close(self) -> None:
        if self._count:
            self.blocks.append(
                Block(self._offset, self._first_seq, self._count, self._min, self._max)
            )
            self._count = 0

    def snapshot(self) -> list[Block]:
        """Every block so far, the open one included."""
        if not self._count:
            return list(self.blocks)
        open_block = Block(self._offset, self._first_seq, self._count, self._min, self._max)
        return [*self.blocks, open_block]

    def index(self, segment_size: int, last_seq: int) -> SegmentIndex:
        """The index of the segment as it stands at ``segment_size`` bytes."""
        blocks = self.snapshot()
        if not blocks:
            return SegmentIndex(segment_size, 0, 0, 0, 0, 0, ())
        return SegmentIndex(
            segment_size,
            sum(b.count for b in blocks),
            blocks[0].first_seq,
            last_seq,
            min(b.min_ts for b in blocks),
            max(b.max_ts for b in blocks),
            tuple(blocks),
        )
