"""The journal writer's unwritten records (PROTOCOL.md 8, the journal's records; 5.12, the
broker's input batch): :class:`PendingWrites`, a mixin of :class:`bus.journal.writer.Journal`.

With ``batch_writes`` an append keeps its record in memory, and :meth:`PendingWrites.write_pending`
hands every record appended since to the OS with one ``write()`` (a failed write loses them:
their numbers are reported by :meth:`PendingWrites.take_lost`, never acknowledged). The broker's
C confirm run (bus/native/_hotpath_confirm.c) appends to the same list itself, within the
:class:`AppendWindow` that :meth:`PendingWrites.append_window` hands out, and accounts for what
it appended with :meth:`PendingWrites.appended_run`. :func:`record_bytes` is one record's bytes
(the reference of the C accelerator's ``record``).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

from bus.accelerators import accelerator
from bus.errors import JournalError
from bus.journal.format import RECORD_MAGIC
from bus.journal.index import BlockTracker
from bus.journal.segments import segment_name

__all__ = ["AppendWindow", "PendingWrites", "record_bytes"]

_MAGIC_CRC = struct.Struct(">4sI")
_FIELDS = struct.Struct(">IqQ")


def record_bytes(raw: bytes, ts_us: int, seq: int) -> bytes:
    """One v2 record (:func:`bus.journal.format.encode_record`, without its checks: the
    writer's own numbers), the reference of the C accelerator's ``record``."""
    fields = _FIELDS.pack(len(raw), ts_us, seq)
    crc = zlib.crc32(raw, zlib.crc32(fields))
    return b"".join((_MAGIC_CRC.pack(RECORD_MAGIC, crc), fields, raw))


_record: Callable[[bytes, int, int], bytes] = (
    getattr(accelerator("bus.native._journalscan"), "record", None) or record_bytes
)


#: The reserved seq a run passes on when nothing is reserved (math.inf, as an integer).
_NO_RESERVATION: Final = 2**62


class AppendWindow(NamedTuple):
    """What :meth:`Journal.append_window` hands a run of appends: ``limits`` (the last seq, the
    highest seq reserved, the segment's size, the largest segment, where the index block
    ends, the largest record), the unwritten records to append to, the record builder
    (``record(raw, ts_us, seq)``) and the run's timestamp in microseconds."""

    limits: tuple[int, int, int, int, int, int]
    pending: list[bytes]
    record: Callable[[bytes, int, int], bytes]
    ts_us: int


class PendingWrites:
    """The records appended and not yet written, and the C confirm run's window onto them: a
    mixin of :class:`bus.journal.writer.Journal`, which sets these attributes up."""

    directory: Path
    max_segment_bytes: int
    max_record: int
    batch_writes: bool
    _closed: bool
    _everything: bool
    _fd: int | None
    _number: int
    _seq: int
    _size: int
    _deadline: float
    _next_sync: float
    _reserved: float
    _blocks: BlockTracker
    #: Records appended and not yet written (batch_writes): their bytes, the segment offset
    #: where the first goes, and the last sequence number handed to the OS.
    _pending: list[bytes]
    _pending_at: int
    _written: int
    #: (first, last) sequence numbers of records lost by failed writes, until taken
    _lost: list[tuple[int, int]]

    if TYPE_CHECKING:  # provided by Journal

        @property
        def segment_path(self) -> Path | None: ...

    def append_window(self, now: float) -> AppendWindow | None:
        """What a run of appends at ``now`` may do without :meth:`append`'s own path, for the
        broker's C confirm lane (bus/native/_hotpath_confirm.c), which appends the records to
        ``pending`` itself and then calls :meth:`appended_run`; None when the next append needs
        :meth:`append` (a filter, a new segment or index block, an fsync due, no batch writes)."""
        blocks = self._blocks
        if (
            self._closed
            or not self.batch_writes
            or not self._everything
            or self._fd is None
            or now >= self._deadline
            or now >= self._next_sync
            or not blocks._count
        ):
            return None
        limits = (
            self._seq,
            int(min(self._reserved, _NO_RESERVATION)),  # a record numbered past it: append()
            self._size,
            self.max_segment_bytes,  # a record ending past it: append() (a new segment)
            blocks._next,  # a record starting at it: append() (a new index block)
            self.max_record,
        )
        return AppendWindow(limits, self._pending, _record, round(now * 1_000_000))

    def appended_run(self, seq: int, size: int, ts_us: int) -> None:
        """Account for the records a run appended to :meth:`append_window`'s ``pending``: the
        last one numbered ``seq``, the segment now ``size`` bytes, each stamped ``ts_us``."""
        count = seq - self._seq
        if count <= 0:
            return
        if len(self._pending) == count:  # the run's records are the first pending
            self._pending_at = self._size
        self._seq, self._size = seq, size
        blocks = self._blocks  # BlockTracker.add, for records of one block
        blocks._count += count
        if ts_us > blocks._max:
            blocks._max = ts_us
        elif ts_us < blocks._min:
            blocks._min = ts_us

    def write_pending(self) -> None:
        """Write the records appended since the last call (``batch_writes``), with one
        ``write()``; nothing to do without ``batch_writes``.

        Raises:
            JournalError: the segment cannot be written (disk full, ...). The records are lost:
                their sequence numbers are not used again and are reported by
                :meth:`take_lost` (the caller must not acknowledge them); the partial bytes are
                cut off where possible, and the next append goes to a new segment.
        """
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        first, last = self._seq - len(pending) + 1, self._seq
        offset = self._pending_at
        pending.clear()
        try:
            written = os.write(self._fd, data)  # type: ignore[arg-type]
            if written != len(data):
                self._finish_write(data, written, offset)
        except (OSError, JournalError) as exc:
            self._lost.append((first, last))
            if self._fd is not None:  # cut back to the records written before, if it can
                try:
                    os.ftruncate(self._fd, offset)
                except OSError:
                    pass
            self._abandon()  # the next append starts a new segment (this one keeps no index)
            self._size = offset
            reason = exc.reason if isinstance(exc, JournalError) else f"write: {exc}"
            raise JournalError(
                str(self.directory / segment_name(self._number)),
                offset,
                f"{reason} (records {first}-{last} lost)",
            ) from exc
        self._written = last

    def take_lost(self) -> list[tuple[int, int]]:
        """The ``(first, last)`` sequence numbers of records lost by failed writes since the
        last call (``batch_writes``): nobody may be told they are journaled."""
        lost, self._lost = self._lost, []
        return lost

    def _finish_write(self, record: bytes, written: int, offset: int) -> None:
        """A short write (disk full...): write the rest, or take the partial record back."""
        try:
            while written < len(record):
                more = os.write(self._fd, record[written:])  # type: ignore[arg-type]
                if more <= 0:
                    raise OSError("no progress")
                written += more
        except OSError as exc:
            try:
                os.ftruncate(self._fd, offset)  # type: ignore[arg-type]
            except OSError:
                self._abandon()  # the partial record stays: readers report it; go on elsewhere
            raise JournalError(str(self.segment_path), offset, f"write: {exc}") from exc

    def _abandon(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
