"""Reading a journal back: records of a segment, of a directory, by time and by sequence number.

Readers never fail on damage and never return damaged bytes as data: they skip each damaged
span (resynchronising on the next record whose magic, length and CRC check out), note it as a
:class:`~bus.journal.segments.Damage` and go on. An incomplete last record with nothing valid
after it is a :class:`~bus.journal.segments.TornTail`. Records missing without bad bytes (cut
off the end of a closed segment) are found from the index file's size and from the gap in
sequence numbers, and reported the same way.

Time and sequence ranges skip whole segments (by their index files, and for sequence numbers by
the next segment's header) and whole blocks of records inside indexed segments, so
``read_from(seq)`` does not scan the journal.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bus.errors import JournalError
from bus.journal.format import DEFAULT_MAX_RECORD, Record
from bus.journal.index import Block, SegmentIndex
from bus.journal.segments import (
    Damage,
    SegmentInfo,
    TornTail,
    find_first_record,
    list_segments,
    scan_file,
    segment_info,
)

__all__ = ["JournalReader", "LiveIndex", "VerifyReport", "read_segment", "verify_journal"]

#: What a writer tells its own readers of the segment it is writing: the path and its blocks.
LiveIndex = Callable[[], "tuple[Path, SegmentIndex] | None"]

_SEQ_AT = 20  # a v2 record's sequence number (PROTOCOL.md section 8)


def _records_of(
    info: SegmentInfo, chunk_data: bytes, base: int, offsets: list[int], min_seq: int | None
) -> Iterator[Record]:
    """The chunk's records, built as they are taken (a reader that stops early builds no more);
    in a v2 segment those below ``min_seq`` are passed over unbuilt (sequence numbers grow
    along a segment, so they are the first ones)."""
    v2 = info.version >= 2
    header = 28 if v2 else 20
    name = str(info.path)
    new = tuple.__new__  # Record(...) without its argument handling
    first = 0
    if v2 and min_seq is not None and offsets:
        first = bisect.bisect_left(
            offsets,
            min_seq,
            key=lambda off: int.from_bytes(chunk_data[off + _SEQ_AT : off + 28], "big"),
        )
    for i in range(first, len(offsets)):
        off = offsets[i]
        length = int.from_bytes(chunk_data[off + 8 : off + 12], "big")
        ts_us = int.from_bytes(chunk_data[off + 12 : off + 20], "big", signed=True)
        seq = int.from_bytes(chunk_data[off + _SEQ_AT : off + 28], "big") if v2 else None
        body = chunk_data[off + header : off + header + length]
        yield new(Record, (ts_us / 1_000_000, body, base + off, name, seq))


def _missing(before: int | None, after: int | None) -> int | None:
    if before is None or after is None or after <= before:
        return None
    return after - before - 1


def _start_of(info: SegmentInfo, damage: list[Damage] | None, max_record: int) -> tuple[int, int]:
    """Where reading starts and the version, reporting a damaged header."""
    if info.header is not None:
        return info.header.size, info.header.version
    try:
        with info.path.open("rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise JournalError(str(info.path), 0, f"cannot read segment: {exc.strerror}") from exc
    start, version = find_first_record(data, max_record)
    stop = start if start >= 0 else len(data)
    if damage is not None and stop > 0:
        damage.append(Damage(str(info.path), 0, stop, info.header_error))
    return stop, version


def read_segment(
    path: str | os.PathLike[str],
    *,
    start: int | None = None,
    stop: int | None = None,
    torn: list[TornTail] | None = None,
    damage: list[Damage] | None = None,
    final: bool = True,
    max_record: int = DEFAULT_MAX_RECORD,
    next_first_seq: int | None = None,
    info: SegmentInfo | None = None,
    newest: bool = True,
    min_seq: int | None = None,
) -> Iterator[Record]:
    """Yield every intact record of one segment, skipping (and reporting) damaged spans.

    Args:
        path: the segment file.
        start: offset of the first record to read (a record boundary; default: the first).
        stop: records starting at or after this are not read.
        torn: if given, a torn tail at the end of the segment is appended to it.
        damage: if given, each damaged span skipped is appended to it.
        final: ``False`` when the segment may still be written (its newest records are then
            never looked past: an incomplete record is a record being written).
        max_record: the largest body accepted.
        next_first_seq: the next segment's first sequence number, to count the records lost in
            damage at the end of this one.
        info: the segment's :func:`segment_info`, when already read.
        newest: whether this is the journal's newest segment: an incomplete record at its end
            is a torn tail; in an older segment it is damage (the segment was cut).
        min_seq: records below this sequence number (v2) may be left out, unbuilt; damage
            among them is still reported.

    Yields:
        Records in file order.

    Raises:
        JournalError: the file cannot be read.
    """
    info = info or segment_info(path)
    first, version = _start_of(info, damage, max_record)
    if start is None or start < first:
        start = first
    header_first = info.first_seq if start == first else None
    before = header_first - 1 if header_first is not None else None
    pending: list[tuple[int, int, str, int | None]] = []  # damage waiting for the next seq
    name = str(info.path)
    for chunk in scan_file(
        info.path,
        start,
        stop,
        version=version,
        final=final,
        after_seq=before if before is not None else -1,
        max_record=max_record,
    ):
        spans = [(chunk.base + o, s, r) for o, s, r in chunk.result.damage]
        # damage is counted against the records around it: none is passed over near damage
        skip = min_seq if not spans and not pending else None
        records = _records_of(info, chunk.data, chunk.base, chunk.result.offsets, skip)
        for rec in records:
            while spans and spans[0][0] < rec.offset:
                off, size, reason = spans.pop(0)
                pending.append((off, size, reason, before))
            if pending and damage is not None:
                for off, size, reason, seq_before in pending:
                    damage.append(Damage(name, off, size, reason, _missing(seq_before, rec.seq)))
            pending.clear()
            before = rec.seq if rec.seq is not None else before
            yield rec
        for off, size, reason in spans:
            pending.append((off, size, reason, before))
        if chunk.result.partial:
            end = chunk.base + chunk.result.end
            if newest:
                if torn is not None:
                    torn.append(TornTail(name, end, chunk.result.partial))
            else:
                reason = "segment ends inside a record (cut?)"
                pending.append((end, chunk.result.partial, reason, before))
    if pending and damage is not None:
        for off, size, reason, seq_before in pending:
            damage.append(Damage(name, off, size, reason, _missing(seq_before, next_first_seq)))


@dataclass(frozen=True)
class _Plan:
    """Which byte ranges of one segment a reader reads."""

    position: int
    ranges: list[tuple[int, int | None]]
    whole: bool


def _blocks_wanted(
    blocks: list[tuple[Block, int]],
    since_us: int | None,
    until_us: int | None,
    since_seq: int | None,
    until_seq: int | None,
) -> list[tuple[int, int | None]]:
    ranges: list[tuple[int, int | None]] = []
    for i, (block, end) in enumerate(blocks):
        if since_us is not None and block.max_ts < since_us:
            continue
        if until_us is not None and block.min_ts >= until_us:
            continue
        if since_seq is not None and block.first_seq:
            following = blocks[i + 1][0].first_seq if i + 1 < len(blocks) else 0
            if following and following <= since_seq:
                continue
        if until_seq is not None and block.first_seq and block.first_seq >= until_seq:
            continue
        if ranges and ranges[-1][1] == block.offset:
            ranges[-1] = (ranges[-1][0], end)
        else:
            ranges.append((block.offset, end))
    return ranges


class JournalReader:
    """Read a journal directory back, oldest record first.

    Damage never raises: damaged spans are skipped and collected in :attr:`damage`; torn tails
    (incomplete records at the end of a segment) in :attr:`torn_tails`. Both lists are filled
    as the reader passes them, and reset by each call of :meth:`records`.

    Args:
        directory: the journal directory (or one segment file).
        max_record: the largest body accepted.
        live: treat the newest segment as being written (``tail --follow``, a broker's own
            reader): an incomplete record at its end is not looked past.
        live_index: where the writer says the blocks of the segment it writes are
            (:meth:`bus.journal.Journal.reader` passes it), so sequence and time ranges skip
            inside that segment too.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_record: int = DEFAULT_MAX_RECORD,
        live: bool = False,
        live_index: LiveIndex | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.max_record = max_record
        self.live = live
        self.live_index = live_index
        self.torn_tails: list[TornTail] = []
        self.damage: list[Damage] = []

    def segments(self) -> list[Path]:
        """The segment files, oldest first."""
        return list_segments(self.directory)

    def segment_infos(self) -> list[SegmentInfo]:
        """Each segment's header and index (no record is scanned)."""
        return [segment_info(p) for p in self.segments()]

    def _plan(
        self,
        infos: list[SegmentInfo],
        since: float | None,
        until: float | None,
        since_seq: int | None,
        until_seq: int | None,
        at: tuple[str, int] | None = None,
    ) -> list[_Plan]:
        since_us = None if since is None else round(since * 1_000_000)
        until_us = None if until is None else round(until * 1_000_000)
        plans = []
        for i, info in enumerate(infos):
            later = infos[i + 1].first_seq if i + 1 < len(infos) else None
            if since_seq is not None and later is not None and later <= since_seq:
                continue  # every record of this segment is below since_seq
            if until_seq is not None and info.first_seq is not None and info.first_seq >= until_seq:
                break
            if at is not None and str(info.path) == at[0]:
                plans.append(_Plan(i, [(at[1], None)], False))  # where the last read ended
                continue
            index, open_end = info.index, False
            if index is None and self.live_index is not None and i == len(infos) - 1:
                live = self.live_index()
                if live is not None and live[0] == info.path:
                    index, open_end = live[1], True  # records after it are in its last block
            if index is None or not index.blocks:
                plans.append(_Plan(i, [(info.first_record, None)], True))
                continue
            blocks = index.block_ranges()
            ranges = _blocks_wanted(blocks, since_us, until_us, since_seq, until_seq)
            if open_end and (not ranges or ranges[-1][1] != index.segment_size):
                ranges.append((index.segment_size, None))  # what was written after the snapshot
            if open_end:
                ranges = [(a, None if b == index.segment_size else b) for a, b in ranges]
            if ranges:
                whole = ranges[0][0] == index.blocks[0].offset and len(ranges) == 1
                whole = whole and ranges[0][1] in (index.segment_size, None)
                plans.append(_Plan(i, ranges, whole))
        return plans

    def records(
        self,
        since: float | None = None,
        until: float | None = None,
        *,
        since_seq: int | None = None,
        until_seq: int | None = None,
        at: tuple[str, int] | None = None,
    ) -> Iterator[Record]:
        """Yield the records with ``since <= ts < until`` and ``since_seq <= seq < until_seq``.

        Every bound is optional. Records without a sequence number (v1 segments) are left out
        when a sequence bound is given. Segments and index blocks that cannot hold a wanted
        record are not read.

        ``at``, with ``since_seq``: where an earlier read of this journal left off, ``(the
        segment's path, the end of the record before since_seq)`` (``Record.path``,
        ``Record.end``): reading starts there instead of at the index block holding it. A
        segment no longer in the journal is found the usual way.

        Raises:
            JournalError: a segment cannot be read (permissions, I/O error).
        """
        self.torn_tails = []
        self.damage = []
        infos = self.segment_infos()
        plans = self._plan(infos, since, until, since_seq, until_seq, at)
        by_seq = since_seq is not None or until_seq is not None
        previous: tuple[SegmentInfo, int | None, int] | None = None  # (info, last seq, end)
        for plan in plans:
            info = infos[plan.position]
            newest = plan.position == len(infos) - 1
            nxt = None if newest or info.cut else infos[plan.position + 1].first_seq
            if previous is not None and previous[0].number == info.number - 1 and plan.whole:
                self._check_gap(previous, info)
            last_seq: int | None = None
            count = 0
            end = info.first_record
            for start, stop in plan.ranges:
                for record in read_segment(
                    info.path,
                    start=start,
                    stop=stop,
                    torn=self.torn_tails,
                    damage=self.damage,
                    final=not (self.live and newest),
                    max_record=self.max_record,
                    next_first_seq=nxt if stop is None or stop >= info.size else None,
                    info=info,
                    newest=newest,
                    min_seq=None if plan.whole else since_seq,  # whole: counted for damage
                ):
                    last_seq, end = record.seq, record.end
                    count += 1
                    if since is not None and record.ts < since:
                        continue
                    if until is not None and record.ts >= until:
                        continue
                    if by_seq and (
                        record.seq is None
                        or (since_seq is not None and record.seq < since_seq)
                        or (until_seq is not None and record.seq >= until_seq)
                    ):
                        continue
                    yield record
            if info.cut and plan.whole:
                self._report_cut(info, last_seq, count)
            previous = (info, last_seq, end) if plan.whole else None

    def _check_gap(self, previous: tuple[SegmentInfo, int | None, int], info: SegmentInfo) -> None:
        """Records missing between two segments (no bytes damaged): a sequence number gap."""
        before, last_seq, end = previous
        if before.cut or last_seq is None or info.first_seq is None:
            return
        name = str(before.path)
        if any(d.path == name and d.offset >= end for d in self.damage):
            return  # the damage at the end of the segment already counts them
        lost = info.first_seq - last_seq - 1
        if lost > 0:
            reason = f"{lost} records missing before {info.path.name} (sequence gap)"
            self.damage.append(Damage(name, end, 0, reason, lost))

    def _report_cut(self, info: SegmentInfo, last_seq: int | None, count: int) -> None:
        index = info.cut_index
        assert index is not None
        if index.last_seq and last_seq is not None:
            lost: int | None = index.last_seq - last_seq
        else:
            lost = index.count - count if index.count > count else None
        reason = f"segment is {info.cut} bytes shorter than its index says (records cut off)"
        self.damage.append(Damage(str(info.path), info.size, 0, reason, lost))

    def read_from(self, seq: int) -> Iterator[Record]:
        """Yield every record whose sequence number is ``seq`` or more, in order.

        The segment holding ``seq`` is found from the segment headers and index files, and
        inside an indexed segment reading starts at the block holding it.
        """
        return self.records(since_seq=seq)

    def last_seq(self) -> int:
        """The sequence number of the newest intact record (0 when there is none)."""
        infos = self.segment_infos()
        for info in reversed(infos):
            if info.index is not None and info.index.last_seq:
                return info.index.last_seq
            found: int | None = None
            for record in read_segment(info.path, info=info, max_record=self.max_record):
                found = record.seq
            if found is not None:
                return found
            if info.first_seq is not None and info.first_seq > 1:
                return info.first_seq - 1
        return 0


@dataclass
class VerifyReport:
    """What :func:`verify_journal` found.

    Attributes:
        segments: segment files checked.
        records: intact records.
        damage: every damaged span (records lost, bytes skipped).
        torn_tails: incomplete last records (a crash mid-write, or a write in progress).
        first_seq: the first record's sequence number (``None`` when there is none).
        last_seq: the last record's sequence number.
    """

    segments: int = 0
    records: int = 0
    damage: list[Damage] = field(default_factory=list)
    torn_tails: list[TornTail] = field(default_factory=list)
    first_seq: int | None = None
    last_seq: int | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is damaged (a torn tail is not damage)."""
        return not self.damage


def verify_journal(
    directory: str | os.PathLike[str], *, max_record: int = DEFAULT_MAX_RECORD
) -> VerifyReport:
    """Read every record of a journal and report every damaged span.

    Args:
        directory: the journal directory (or one segment).
        max_record: the largest body accepted.

    Returns:
        The :class:`VerifyReport`.

    Raises:
        JournalError: a segment cannot be read.
    """
    reader = JournalReader(directory, max_record=max_record)
    report = VerifyReport(segments=len(reader.segments()))
    for record in reader.records():
        report.records += 1
        if record.seq is not None:
            if report.first_seq is None:
                report.first_seq = record.seq
            report.last_seq = record.seq
    report.damage = list(reader.damage)
    report.torn_tails = list(reader.torn_tails)
    return report
