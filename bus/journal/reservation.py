"""The sequence numbers a journal has handed out, kept on disk (PROTOCOL.md section 8).

Under the fsync policies ``none`` and ``interval`` the broker delivers an event, with its
``SEQ``, before its record is on disk, so a power loss can cut records whose numbers
subscribers have already seen. Were the writer to recover its next number from the last
intact record alone, it would hand those numbers out again, and a durable subscriber, whose
position is past them, would skip the new events that carry them.

So the writer *reserves* numbers before it hands them out: the file ``journal.hwm`` (the
high-water mark) holds, fsynced, a number at least as high as every sequence number handed
out. It is raised a block at a time (about :data:`BLOCK_SECONDS` of the recent rate, at least
:data:`MIN_BLOCK` numbers), the first block when the journal is opened, so it costs one small
fdatasync per block, not per record; reopened after a crash, the writer goes on above both the
mark and the last intact record (numbers are plenty: a crash skips at most a block). A clean
close lowers the mark to the last number used, so a journal closed cleanly goes on without a
skip.

The file (64 bytes): two slots of 32 bytes, written in turn, each ``BGJHWM 00 01`` (8 bytes),
a generation (u64), the mark (u64), a zlib CRC-32 of the 24 bytes before it (u32) and 4 zero
bytes, big-endian. The valid slot with the higher generation holds the mark: a write torn by a
crash leaves the other slot, whose mark was fsynced before any number above it was handed out.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import zlib
from pathlib import Path
from typing import Final

from bus.errors import JournalError

__all__ = ["HWM_NAME", "MAX_BLOCK", "MIN_BLOCK", "HighWaterMark", "read_mark"]

#: The file's name in the journal directory.
HWM_NAME: Final = "journal.hwm"
#: Numbers reserved at least / at most per fdatasync of the mark.
MIN_BLOCK: Final = 65536
MAX_BLOCK: Final = 1 << 28
#: A block covers about this many seconds of the rate at which the last one was used.
BLOCK_SECONDS: Final = 10.0

_MAGIC: Final = b"BGJHWM\x00\x01"
_SLOT: Final = struct.Struct(">8sQQI4x")
_BODY: Final = struct.Struct(">8sQQ")

log = logging.getLogger("bus.journal")


def _slot(generation: int, mark: int) -> bytes:
    body = _BODY.pack(_MAGIC, generation, mark)
    return _SLOT.pack(_MAGIC, generation, mark, zlib.crc32(body))


def _parse(data: bytes) -> tuple[int, int] | None:
    """``(generation, mark)`` of an intact slot, else None."""
    if len(data) < _SLOT.size:
        return None
    magic, generation, mark, crc = _SLOT.unpack_from(data)
    if magic != _MAGIC or zlib.crc32(data[: _BODY.size]) != crc:
        return None
    return generation, mark


def read_mark(directory: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(generation, mark)`` of a journal directory's ``journal.hwm``; None without one (or
    when neither slot is intact).

    Raises:
        JournalError: the file exists but cannot be read.
    """
    path = Path(directory) / HWM_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JournalError(str(path), 0, f"cannot read: {exc.strerror}") from exc
    slots = [_parse(data[at : at + _SLOT.size]) for at in (0, _SLOT.size)]
    intact = [slot for slot in slots if slot is not None]
    if not intact:
        log.error("journal: %s is damaged: sequence numbers go on from the last record", path)
        return None
    return max(intact)


class HighWaterMark:
    """The mark of one journal directory: what was read at open, raised before use.

    Args:
        directory: the journal directory.

    Raises:
        JournalError: the file cannot be read.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / HWM_NAME
        found = read_mark(directory)
        self._generation, self.mark = found if found is not None else (0, 0)
        #: the mark as it was at open (0: none): numbers up to it may have been handed out
        self.at_open = self.mark
        self.writes = 0  # fsynced writes of the mark
        self._fd: int | None = None
        self._block = MIN_BLOCK
        self._raised_seq = 0  # the sequence number that made the last raise, and when
        self._raised_at = -math.inf

    def reserve(self, seq: int, now: float | None) -> None:
        """Raise the mark so it covers ``seq`` and the next block, on disk before it returns.

        Args:
            seq: the number about to be handed out.
            now: seconds (any clock, the same for every call): sizes the block from the rate
                since the last raise; None (at open): a block of :data:`MIN_BLOCK`.

        Raises:
            JournalError: the file cannot be written or fsynced (``seq`` must not be used).
        """
        if now is not None and self._raised_seq:
            elapsed = max(now - self._raised_at, 1e-3)
            rate = (seq - self._raised_seq) / elapsed
            self._block = int(min(MAX_BLOCK, max(MIN_BLOCK, rate * BLOCK_SECONDS)))
        self._write(seq + self._block)
        if now is not None:
            self._raised_seq, self._raised_at = seq, now

    def settle(self, last_seq: int) -> None:
        """A clean close: the mark becomes the last number used (the next open skips none).

        Raises:
            JournalError: the file cannot be written.
        """
        if self._fd is not None or self.mark > last_seq:
            self._write(last_seq)
        self.close()

    def close(self) -> None:
        """Close the file (the mark stays as written)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _write(self, mark: int) -> None:
        try:
            fd = self._open()
            generation = self._generation + 1
            os.pwrite(fd, _slot(generation, mark), (generation % 2) * _SLOT.size)
            os.fdatasync(fd)
        except OSError as exc:
            raise JournalError(
                str(self.path), 0, f"cannot reserve sequence numbers: {exc}"
            ) from exc
        self._generation, self.mark = generation, mark
        self.writes += 1

    def _open(self) -> int:
        if self._fd is None:
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if created:  # both slots valid from the start, and the file's name on disk
                os.pwrite(self._fd, _slot(0, self.mark) * 2, 0)
                os.fdatasync(self._fd)
                _sync_directory(self.path.parent)
        return self._fd


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
