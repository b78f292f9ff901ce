"""Reopening a journal for writing: what a crash left behind (PROTOCOL.md section 8).

:func:`recover` is what :class:`bus.journal.writer.Journal` does with an existing directory
before it appends: it recovers the last sequence number from the last intact record, cuts a
*torn tail* of the newest segment (an incomplete record at its end after which no intact one
can be found: a crash mid-write; the only bytes a writer ever removes), writes the index of the
segments that lack one, and reports any other damage, which stays exactly as it is for readers
to read around. (The numbers handed out before a crash may be above the last intact record:
the writer goes on above its reserved mark too, :mod:`bus.journal.reservation`.)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from bus.errors import JournalError
from bus.journal.format import SEGMENT_HEADER_SIZE, SEGMENT_MAGIC, SEGMENT_MAGIC_V1
from bus.journal.index import BlockTracker, SegmentIndex, encode_index
from bus.journal.reader import read_segment
from bus.journal.segments import Damage, SegmentInfo, TornTail, index_path, segment_info

__all__ = ["Recovered", "recover", "write_index"]

log = logging.getLogger("bus.journal")


@dataclass
class Recovered:
    """What reopening found.

    Attributes:
        last_seq: the sequence number of the last intact record (0: none).
        cut: the torn tail cut off the newest segment, if any.
        damage: every other damaged span (left in place, logged).
    """

    last_seq: int = 0
    cut: TornTail | None = None
    damage: list[Damage] = field(default_factory=list)


def write_index(path: Path, index: SegmentIndex) -> None:
    """Write a segment's index file beside it (atomically: a reader sees all of it or none)."""
    target = index_path(path)
    temp = target.with_name(target.name + ".tmp")
    try:
        temp.write_bytes(encode_index(index))
        os.replace(temp, target)
    except OSError as exc:  # an index only speeds reading up: readers scan without it
        log.warning("journal: cannot write index %s: %s", target, exc)


def recover(existing: list[Path], *, index_interval: int, max_record: int) -> Recovered:
    """Recover a journal's segments (oldest first, at least one) before appending to it.

    Args:
        existing: the segment files.
        index_interval: bytes of records between two index blocks (the indexes written here).
        max_record: the largest record a reader accepts.

    Raises:
        JournalError: a segment cannot be read, or its torn tail cannot be cut.
    """
    found = Recovered()
    newest = existing[-1]
    try:
        head = newest.read_bytes()[:SEGMENT_HEADER_SIZE]
    except OSError as exc:
        raise JournalError(str(newest), 0, f"cannot read segment: {exc.strerror}") from exc
    if len(head) < SEGMENT_HEADER_SIZE and _torn_header(head):
        # crashed while writing the header: nothing in it can be a record
        newest.unlink()
        index_path(newest).unlink(missing_ok=True)
        if head:
            found.cut = TornTail(str(newest), 0, len(head))
        existing = existing[:-1]
    for position in range(len(existing) - 1, -1, -1):
        is_newest = position == len(existing) - 1
        seq = _recover_segment(existing[position], is_newest, found, index_interval, max_record)
        if seq is not None:
            found.last_seq = seq
            break
    for damage in found.damage:
        log.error("journal: %s (left as it is; new records go to a new segment)", damage)
    return found


def _recover_segment(
    path: Path, newest: bool, found: Recovered, index_interval: int, max_record: int
) -> int | None:
    """Scan one segment (index it, cut a torn tail if newest); its last sequence number.

    The newest segment is always scanned (verified), index or not, as it was the one being
    written; an older one is scanned only when it has no index.
    """
    info = segment_info(path)
    if info.index is not None and not newest:
        if info.index.last_seq:
            return info.index.last_seq
        return _seq_before(info)
    torn: list[TornTail] = []
    tracker = BlockTracker(info.first_record, index_interval)
    last: int | None = None
    for record in read_segment(
        path, torn=torn, damage=found.damage, max_record=max_record, info=info
    ):
        size = record.end - record.offset
        tracker.add(record.offset, size, record.ts_us, record.seq or 0)
        last = record.seq
    size = info.size
    if torn and newest:
        tail = torn[-1]
        try:
            os.truncate(path, tail.offset)
        except OSError as exc:
            raise JournalError(str(path), tail.offset, f"cannot cut torn tail: {exc}") from exc
        found.cut = tail
        size = tail.offset
        log.warning(
            "journal: torn tail cut in %s at offset %d (%d bytes of an incomplete record)",
            tail.path,
            tail.offset,
            tail.size,
        )
    elif torn:
        tail = torn[-1]
        reason = "segment ends inside a record"
        found.damage.append(Damage(str(path), tail.offset, tail.size, reason))
    if info.header is not None and (info.index is None or size != info.size):
        write_index(path, tracker.index(size, last or 0))
    if last is not None:
        return last
    return _seq_before(info)


def _seq_before(info: SegmentInfo) -> int | None:
    """What a segment without records says of the sequence: its first_seq - 1 (v2)."""
    if info.header is None:
        return None
    if info.first_seq is None:
        return 0  # a v1 segment: sequence numbers start with the first v2 segment
    return info.first_seq - 1


def _torn_header(data: bytes) -> bool:
    """Whether a file shorter than a header is the start of one (a crash mid-header)."""
    head = data[:8]
    return SEGMENT_MAGIC.startswith(head) or SEGMENT_MAGIC_V1.startswith(head)
