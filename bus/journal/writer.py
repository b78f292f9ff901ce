"""The journal writer the broker calls from its routing path: ``Journal.append(raw, now) -> seq``.

Appends are one ``write()`` each to the newest segment (or, with ``batch_writes``, one for all
the records appended before :meth:`Journal.write_pending`: the broker's input batch, PROTOCOL.md
8 and 5.12); segments rotate by size and age; an
fsync policy decides what survives a machine crash; every record gets the next sequence number
of the directory, never used twice: recovered at open from the last intact record and from the
numbers reserved on disk before they were handed out (:mod:`bus.journal.reservation`), so a
power loss that cuts records whose numbers were already delivered does not make them reused.

Opening a directory never rewrites what is there, with one exception: a *torn tail* (an
incomplete record at the end of the newest segment, after which no valid record can be found:
a crash mid-write) is cut off. Any other damage (a bad CRC, magic or length, trailing zeros, a
damaged header) is reported in :attr:`Journal.damage` and logged with the file and offset, and
the segment is left exactly as it is, for readers to read around. Appends always go to a new
segment, so a damaged segment is never written to again.

The records appended and not yet written (``batch_writes``), their one ``write()`` and the
window the broker's C confirm run appends within are :mod:`bus.journal.pending`'s
(:class:`bus.journal.pending.PendingWrites`, a mixin of :class:`Journal`; ``AppendWindow`` and
``record_bytes`` are still importable from here).
"""

from __future__ import annotations

import logging
import math
import os
from enum import StrEnum
from pathlib import Path

from bus.errors import ClosedError, ConfigError, JournalError
from bus.journal.fields import JournalFilter
from bus.journal.format import (
    DEFAULT_MAX_RECORD,
    RECORD_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    encode_segment_header,
)
from bus.journal.index import DEFAULT_INDEX_INTERVAL, BlockTracker, SegmentIndex
from bus.journal.pending import AppendWindow, PendingWrites, _record, record_bytes
from bus.journal.reader import JournalReader
from bus.journal.recovery import recover, write_index
from bus.journal.reservation import HighWaterMark
from bus.journal.retention import apply_retention
from bus.journal.segments import (
    Damage,
    TornTail,
    list_segments,
    segment_name,
    segment_number,
)

__all__ = [
    "DEFAULT_FSYNC_INTERVAL",
    "DEFAULT_MAX_SEGMENT_AGE",
    "DEFAULT_MAX_SEGMENT_BYTES",
    "AppendWindow",
    "FsyncPolicy",
    "Journal",
    "record_bytes",
]

#: Default limits (constructor parameters override them).
DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_SEGMENT_AGE = 3600.0
DEFAULT_FSYNC_INTERVAL = 1.0

log = logging.getLogger("bus.journal")


class FsyncPolicy(StrEnum):
    """When the writer asks the OS to put journal bytes on disk (``os.fsync``).

    Every append is handed to the OS at once (one ``write``), so records survive a crash of the
    process (kill -9) whatever the policy; the policy decides what survives a crash of the machine.

    - ``none``: never fsync while running (only at rotation and close): fastest; a power loss
      may lose the last seconds the OS had not yet flushed.
    - ``interval``: fsync at the first append ``fsync_interval`` seconds after the previous
      fsync (default 1 s), at :meth:`Journal.tick`, at rotation and at close: at most about
      that much is lost.
    - ``always``: fsync after every append: nothing acknowledged is lost; slowest. A writer
      opened with ``group_commit`` leaves that fsync to :meth:`Journal.commit`, which its owner
      calls before it tells anyone of the records (the broker: once per input batch, before any
      of the batch's output leaves), so a burst costs one fsync, not one per record.
    """

    NONE = "none"
    INTERVAL = "interval"
    ALWAYS = "always"


class Journal(PendingWrites):
    """The append-only journal writer the broker calls from its routing path.

    Opening a directory that already holds segments recovers the last sequence number from the
    last intact record, cuts a torn tail of the newest segment (reported in :attr:`recovered`),
    and reports any other damage in :attr:`damage` (logged, left in place). New records always
    go to a new segment.

    Args:
        directory: where the segments live (created if missing).
        max_segment_bytes: rotate when a segment would grow past this (default 64 MiB).
        max_segment_age: rotate at the first append this many seconds after the segment was
            created (default 3600 s).
        fsync: the :class:`FsyncPolicy` (default ``interval``).
        fsync_interval: seconds between fsyncs under the ``interval`` policy (default 1 s).
        filter: which messages to record (default: all).
        max_record: the largest message recorded (default 16 MiB); larger ones are skipped.
        index_interval: bytes of records between two blocks of a segment's index (default
            1 MiB): the granularity at which readers skip by time and sequence number.
        group_commit: under ``always``, appends are not fsynced one by one: :meth:`commit`
            fsyncs everything appended since the last fsync, and the caller must call it
            before it acknowledges or hands on any of those records (default False).
        retain_bytes: delete the oldest segments once all of them hold more than this
            (0, the default: keep everything); checked whenever a segment is started.
        retain_age: delete a segment once the one after it was created longer ago than
            this, in seconds (0: keep everything); :mod:`bus.journal.retention`.
        batch_writes: an append is kept in memory, and the records appended since are written
            with one ``write()`` by :meth:`write_pending`, which the caller must call before it
            tells anyone of them (the broker: once per input batch, before any of its output
            leaves); anything that reads, fsyncs, rotates or closes writes them first
            (default False: one ``write()`` per append).

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
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        group_commit: bool = False,
        retain_bytes: int = 0,
        retain_age: float = 0.0,
        batch_writes: bool = False,
    ) -> None:
        if retain_bytes < 0 or retain_age < 0:
            raise ConfigError("retain_bytes and retain_age must be >= 0 (0: keep everything)")
        self.retain_bytes = retain_bytes
        self.retain_age = retain_age
        if max_segment_bytes < SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE:
            raise ConfigError(f"max_segment_bytes too small: {max_segment_bytes}")
        if max_segment_age <= 0 or fsync_interval < 0 or index_interval < 1:
            raise ConfigError(
                "max_segment_age must be > 0, fsync_interval >= 0 and index_interval >= 1"
            )
        try:
            self.fsync = FsyncPolicy(fsync)
        except ValueError as exc:
            raise ConfigError(f"unknown fsync policy {fsync!r} (none|interval|always)") from exc
        self.directory = Path(directory)
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age = max_segment_age
        self.fsync_interval = fsync_interval
        self.filter = filter or JournalFilter()
        self.index_interval = index_interval
        self._everything = self.filter.everything
        self._sync_interval = self.fsync is FsyncPolicy.INTERVAL
        self.max_record = max_record
        self.recovered: TornTail | None = None
        self.damage: list[Damage] = []
        self.skipped = 0
        self.fsyncs = 0  # os.fsync calls that succeeded (the broker's /metrics)
        self._fd: int | None = None
        self._size = 0
        self._created = 0.0
        self._deadline = 0.0
        self._last_sync = 0.0
        self.group_commit = group_commit and self.fsync is FsyncPolicy.ALWAYS
        # when the next append must fsync: at once (always), never (none, or always with a
        # group commit: commit() does it), or after the interval
        self._next_sync = {
            FsyncPolicy.ALWAYS: math.inf if self.group_commit else -math.inf,
            FsyncPolicy.NONE: math.inf,
            FsyncPolicy.INTERVAL: 0.0,
        }[self.fsync]
        self._closed = False
        self.batch_writes = batch_writes
        # Records appended and not yet written (batch_writes): their bytes, the segment offset
        # where the first goes, and the last sequence number handed to the OS.
        self._pending: list[bytes] = []
        self._pending_at = 0
        self._written = 0
        #: (first, last) sequence numbers of records lost by failed writes, until taken
        self._lost: list[tuple[int, int]] = []
        self._number = 0
        self._seq = 0
        self._synced = 0
        self._blocks = BlockTracker(SEGMENT_HEADER_SIZE, index_interval)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(str(self.directory), 0, f"cannot create: {exc.strerror}") from exc
        existing = list_segments(self.directory)
        if existing:
            self._number = segment_number(existing[-1])
            found = recover(existing, index_interval=index_interval, max_record=max_record)
            self._seq, self.recovered, self.damage = found.last_seq, found.cut, found.damage
        self._hwm = HighWaterMark(self.directory)
        self._floor = 0  # the first_seq of the next segment's header, when below its first record
        self._skip_reserved()
        # Under ``always`` no number leaves before its record is on disk: nothing to reserve.
        self._reserved: float = math.inf
        if self.fsync is not FsyncPolicy.ALWAYS:  # the first block now, not on the data path
            self._hwm.reserve(self._seq + 1, None)
            self._reserved = self._hwm.mark
        self._synced = self._written = self._seq
        self._opened_at = self._seq

    # -- recovery at open --------------------------------------------------------------------

    def _skip_reserved(self) -> None:
        """Go on above every number handed out before: the mark may be above the last intact
        record after a crash (records cut by a power loss, or numbers reserved and unused)."""
        mark = self._hwm.at_open
        if mark <= self._seq:
            return
        log.warning(
            "journal: %s: sequence numbers up to %d were reserved before a crash and the last "
            "intact record is %d: new records start at %d, so none is numbered twice",
            self.directory, mark, self._seq, mark + 1,
        )  # fmt: skip
        self._floor = self._seq + 1  # readers see no gap: the numbers were never records
        self._seq = mark

    # -- writing -------------------------------------------------------------------------------

    @property
    def segment_path(self) -> Path | None:
        """The segment being written (``None`` before the first append)."""
        return self.directory / segment_name(self._number) if self._fd is not None else None

    @property
    def appended(self) -> int:
        """Records appended since the journal was opened."""
        return self._seq - self._opened_at

    @property
    def last_seq(self) -> int:
        """The sequence number of the last record appended (0: none). At open, the highest
        number handed out before: the last intact record's, or, after a crash, the reserved
        high-water mark above it (:mod:`bus.journal.reservation`)."""
        return self._seq

    @property
    def written_seq(self) -> int:
        """The last sequence number whose record was handed to the OS (``write()``): it survives
        a crash of the process. Behind :attr:`last_seq` only with ``batch_writes``, until
        :meth:`write_pending`."""
        return self._written

    @property
    def synced_seq(self) -> int:
        """The last sequence number known to be on disk (fsynced), whatever the policy."""
        return self._synced

    def append(self, raw: bytes, now: float) -> int | None:
        """Record one routed message.

        Args:
            raw: the message in its wire form.
            now: the routing time, seconds since the epoch (the caller's clock).

        Returns:
            The record's sequence number, or ``None`` when the filter or ``max_record`` left the
            message out.

        Raises:
            ClosedError: the journal was closed.
            JournalError: the segment cannot be written (disk full, ...); the sequence number
                is not used, and the next append goes to a new segment.
        """
        if self._closed:
            raise ClosedError("journal is closed")
        if len(raw) > self.max_record or not (self._everything or self.filter.accepts(raw)):
            self.skipped += 1
            return None
        seq = self._seq + 1
        if seq > self._reserved:  # on disk before the number is handed out (reservation.py)
            self._hwm.reserve(seq, now)
            self._reserved = self._hwm.mark
        ts = round(now * 1_000_000)
        record = _record(raw, ts, seq)
        size = len(record)
        offset = self._size
        if self._fd is None or offset + size > self.max_segment_bytes or now >= self._deadline:
            self._rotate(now, seq)  # writes what is pending to the segment it closes
            offset = self._size
        if self.batch_writes:
            pending = self._pending
            if not pending:
                self._pending_at = offset
            pending.append(record)
        else:
            try:
                written = os.write(self._fd, record)  # type: ignore[arg-type]
            except OSError as exc:
                raise JournalError(str(self.segment_path), offset, f"write: {exc}") from exc
            if written != size:
                self._finish_write(record, written, offset)
            self._written = seq
        self._seq = seq
        self._size = offset + size
        # the index block (bus.journal.index.BlockTracker.add, inlined: this is the hot path)
        blocks = self._blocks
        if offset < blocks._next and blocks._count:
            blocks._count += 1
            if ts > blocks._max:
                blocks._max = ts
            elif ts < blocks._min:
                blocks._min = ts
        else:
            blocks.add(offset, size, ts, seq)
        if now >= self._next_sync:
            self._sync(now)
        return seq

    def _sync(self, now: float) -> None:
        self.write_pending()
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise JournalError(str(self.segment_path), self._size, f"fsync: {exc}") from exc
            self.fsyncs += 1
        self._last_sync = now
        self._synced = self._seq
        if self._sync_interval:
            self._next_sync = now + self.fsync_interval

    def sync_handle(self) -> tuple[int, int] | None:
        """What an fsync made on another thread needs, so the caller's loop goes on meanwhile.

        Returns:
            ``(fd, seq)``: a duplicate of the current segment's file descriptor (the caller
            fsyncs and closes it; the journal may rotate or close meanwhile) and the last
            sequence number that fsync covers, to hand to :meth:`mark_synced`. None when there
            is nothing to fsync (everything appended is synced, or no segment is open: then
            it counts as synced, as :meth:`flush` does).

        Raises:
            JournalError: the descriptor could not be duplicated.
        """
        if self._synced >= self._seq:
            return None
        self.write_pending()
        if self._fd is None:
            self._sync(self._last_sync)
            return None
        try:
            fd = os.dup(self._fd)
        except OSError as exc:
            raise JournalError(str(self.segment_path), self._size, f"fsync: {exc}") from exc
        return fd, self._seq

    def mark_synced(self, seq: int, now: float) -> None:
        """Record an fsync made through :meth:`sync_handle`: every record up to ``seq`` is on
        disk (``now``: when it ended, seconds since the epoch)."""
        if seq > self._synced:
            self._synced = seq
            self.fsyncs += 1
            self._last_sync = now
            if self._sync_interval:
                self._next_sync = now + self.fsync_interval

    def tick(self, now: float) -> None:
        """Under the ``interval`` policy, fsync what was appended if the interval has passed.

        Call it from a timer so the last records of a burst are not left unsynced until the
        next append.
        """
        due = now - self._last_sync >= self.fsync_interval
        if self._sync_interval and self._synced < self._seq and due:
            self._sync(now)

    def _close_segment(self) -> None:
        if self._fd is not None:
            self._sync(self._last_sync)
            os.close(self._fd)
            self._fd = None
            path = self.directory / segment_name(self._number)
            write_index(path, self._blocks.index(self._size, self._seq))

    def _rotate(self, now: float, first_seq: int) -> None:
        self._close_segment()
        self._number += 1
        path = self.directory / segment_name(self._number)
        if self._floor:  # the first segment after numbers were skipped: see _skip_reserved
            first_seq, self._floor = min(first_seq, self._floor), 0
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            os.write(fd, encode_segment_header(now, first_seq))
        except OSError as exc:
            raise JournalError(str(path), 0, f"cannot create segment: {exc}") from exc
        self._fd = fd
        self._size = SEGMENT_HEADER_SIZE
        self._created = now
        self._deadline = now + self.max_segment_age
        self._last_sync = now
        if self._sync_interval:
            self._next_sync = now + self.fsync_interval
        self._blocks = BlockTracker(SEGMENT_HEADER_SIZE, self.index_interval)
        if self.retain_bytes or self.retain_age:
            apply_retention(self.directory, self.retain_bytes, self.retain_age, now)

    def _live_index(self) -> tuple[Path, SegmentIndex] | None:
        self.write_pending()  # a reader reads the file: the records are in it first
        if self._fd is None:
            return None
        path = self.directory / segment_name(self._number)
        return path, self._blocks.index(self._size, self._seq)

    def reader(self) -> JournalReader:
        """A reader of this journal that knows where the records of the segment being written
        are (from the writer's memory), so ``read_from(seq)`` skips to them there too."""
        self.write_pending()
        return JournalReader(
            self.directory, max_record=self.max_record, live=True, live_index=self._live_index
        )

    def flush(self) -> None:
        """fsync the current segment now, whatever the policy."""
        self._sync(self._last_sync)

    def commit(self, now: float) -> None:
        """fsync what was appended since the last fsync, if anything (``now``: seconds since
        the epoch). A writer with ``group_commit`` calls it where another would have fsynced
        each record: before anyone hears of them.

        Raises:
            JournalError: the fsync failed; :attr:`synced_seq` stays where it was.
        """
        if self._synced < self._seq:
            self._sync(now)

    def close(self) -> None:
        """fsync and close the current segment (writing its index). Closing twice is allowed."""
        if not self._closed:
            self._closed = True
            self._close_segment()
            try:
                self._hwm.settle(self._seq)
            except JournalError as exc:  # the next open skips the numbers reserved: harmless
                log.warning("journal: %s", exc)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
