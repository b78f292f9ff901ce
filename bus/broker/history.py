"""History and last values read from the journal (PROTOCOL.md 5.15).

Sans-I/O apart from reading the journal it is given (a :class:`bus.journal.JournalReader`):

- :func:`coverage`: whether the journal's filter keeps the events of a pattern at all, some of
  them, or all of them (a type the journal does not keep is refused, not answered with an empty
  list that would look like "nothing happened");
- :func:`read_after` and :func:`read_before`: a page of a pattern's journaled events, oldest
  first, forward from a sequence number or a time, or the newest ones before a sequence number;
- :class:`LastValues`: the last journaled event of each type, kept up to date by reading on
  from where it stopped, so ``last`` costs the records journaled since it was last asked.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from bus.discovery.topics import matches, token_patterns, tokens_overlap
from bus.errors import BusError
from bus.journal.fields import JournalFilter
from bus.journal.format import Record
from bus.journal.reader import JournalReader, read_segment
from bus.message.message import MessageType, read_header

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LAST_TYPES",
    "MAX_LIMIT",
    "MAX_SCAN",
    "Coverage",
    "LastValues",
    "Page",
    "coverage",
    "filter_text",
    "read_after",
    "read_before",
]

#: Events a history page holds unless the caller asks for fewer or more.
DEFAULT_LIMIT: Final = 100
#: Events a history page holds at most.
MAX_LIMIT: Final = 1000
#: Records read for one page at most: a page of a rare type stops there, ``more`` set, and
#: the caller asks again from ``next``.
MAX_SCAN: Final = 500_000
#: Event types :class:`LastValues` remembers (those not published for longest go first).
MAX_LAST_TYPES: Final = 100_000

_EVT: Final = MessageType.EVT.value


class Coverage(enum.Enum):
    """How much of a pattern's events the journal keeps."""

    NONE = "none"
    SOME = "some"
    ALL = "all"


def _contains(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
    """Whether every type that matches ``inner`` matches ``outer``."""
    if not outer or not inner:
        return not outer and not inner
    if outer[0] == ">":
        return True
    if inner[0] == ">":
        return False
    if outer[0] == "*" or outer[0] == inner[0]:
        return _contains(outer[1:], inner[1:])
    return False


def coverage(journal_filter: JournalFilter | None, pattern: str) -> Coverage:
    """How much of ``pattern``'s events a journal with this filter keeps.

    Args:
        journal_filter: the journal's filter (None: there is no journal).
        pattern: a subscription pattern (``sensor.*``).

    Raises:
        ConfigError: a malformed pattern.
    """
    wanted = token_patterns(pattern)
    if journal_filter is None:
        return Coverage.NONE
    if journal_filter.types is not None and _EVT not in journal_filter.types:
        return Coverage.NONE
    if journal_filter.groups is None:
        return Coverage.ALL
    kept = [tuple(g.split(".")) for g in journal_filter.groups]
    if all(any(_contains(k, w) for k in kept) for w in wanted):
        return Coverage.ALL
    if any(tokens_overlap(k, w) for k in kept for w in wanted):
        return Coverage.SOME
    return Coverage.NONE


def filter_text(journal_filter: JournalFilter | None) -> str:
    """The journal filter as its flags say it, for the messages that name it."""
    if journal_filter is None:
        return "no journal"
    parts = []
    if journal_filter.groups is not None:
        parts.append(f"--journal-filter {','.join(journal_filter.groups)}")
    if journal_filter.types is not None:
        parts.append(f"--journal-types {','.join(sorted(journal_filter.types))}")
    return " ".join(parts) or "every message"


@dataclass
class Page:
    """One page of history.

    Attributes:
        events: the journal records of the events, oldest first.
        more: there may be more in the direction read (later for :func:`read_after`, earlier
            for :func:`read_before`); ask again from ``next``.
        next: where the next page starts: ``{"since": seq}`` or ``{"before": seq}``.
    """

    events: list[Record] = field(default_factory=list)
    more: bool = False
    next: dict[str, int] | None = None
    #: forward: where the records after ``next["since"]`` begin, ``(segment, offset)``
    resume_at: tuple[str, int] | None = None


def _is_event(record: Record, pattern: str) -> bool:
    try:
        head, _ = read_header(record.raw)
    except BusError:
        return False  # journaled, but not a message we can read: not an event
    return head.typ == _EVT and matches(pattern, head.grp or "")


def read_after(
    records: Iterable[Record],
    pattern: str,
    *,
    end_seq: int,
    limit: int = DEFAULT_LIMIT,
    max_bytes: int,
    until_seq: int | None = None,
    max_scan: int = MAX_SCAN,
) -> Page:
    """The first ``limit`` events of ``pattern`` among ``records`` (oldest first).

    Args:
        records: journal records in order, from where the page starts (a reader's
            ``records(since_seq=...)`` or ``records(since=time)``).
        end_seq: the journal's last sequence number when asked: nothing after it is read.
        limit, max_bytes: the page's limits (events; bytes of their bodies, about).
        until_seq: only events before this sequence number.
        max_scan: records read at most.
    """
    page = Page()
    if limit <= 0:
        return page
    size = scanned = 0
    last = 0
    for record in records:
        seq = record.seq
        if seq is None:
            continue
        if seq > end_seq or (until_seq is not None and seq >= until_seq):
            break
        scanned += 1
        last = seq
        if _is_event(record, pattern):
            if len(page.events) >= limit or size + len(record.raw) > max_bytes and page.events:
                page.more = True
                page.next = {"since": page.events[-1].seq or 0}
                return page
            page.events.append(record)
            page.resume_at = (record.path, record.end)
            size += len(record.raw)
        if scanned >= max_scan and seq < end_seq:
            page.more = True
            page.next = {"since": last}
            page.resume_at = (record.path, record.end)
            return page
    return page


def read_before(
    reader: JournalReader,
    pattern: str,
    *,
    before_seq: int,
    limit: int = DEFAULT_LIMIT,
    max_bytes: int,
    max_scan: int = MAX_SCAN,
) -> Page:
    """The newest ``limit`` events of ``pattern`` before ``before_seq``, oldest first.

    Reads windows of sequence numbers backwards from ``before_seq``, each four times the one
    before (the index skips to each window's start), until ``limit`` events are found, the
    journal's first record is passed or ``max_scan`` records were read.
    """
    first = _first_seq(reader)
    found: list[Record] = []
    high = before_seq
    window = max(4 * limit, 1024)
    scanned = 0
    while high > first and len(found) < limit and scanned < max_scan:
        low = max(first, high - window)
        chunk = []
        for record in reader.records(since_seq=low, until_seq=high):
            scanned += 1
            if _is_event(record, pattern):
                chunk.append(record)
        found = chunk + found
        high = low
        window *= 4
    page = Page(events=found[-limit:] if limit else [])
    size = sum(len(record.raw) for record in page.events)
    while page.events and size > max_bytes:
        size -= len(page.events.pop(0).raw)
    oldest = page.events[0].seq if page.events else high
    if len(page.events) < len(found) or high > first:
        page.more = True
        page.next = {"before": oldest or high}
    return page


def _first_seq(reader: JournalReader) -> int:
    for info in reader.segment_infos():
        if info.first_seq is not None:
            return info.first_seq
    return 1


@dataclass
class LastValues:
    """The last journaled event of each type: its sequence number and where it is.

    Kept up to date by :meth:`scan` (reading on from :attr:`position`) and :meth:`merge`, so
    that a first scan of a long journal can run off the broker's loop and the rest in it.

    Attributes:
        types: event type -> ``(seq, segment path, offset)``, the least recently published
            first.
        position: the sequence number read up to.
        at: where the records after ``position`` begin, ``(segment path, offset)``.
        max_types: types remembered at most.
    """

    types: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    position: int = 0
    at: tuple[str, int] | None = None
    max_types: int = MAX_LAST_TYPES

    def scan(
        self, reader: JournalReader, end_seq: int
    ) -> tuple[dict[str, tuple[int, str, int]], int, tuple[str, int] | None]:
        """Read the records after :attr:`position` up to ``end_seq``; what :meth:`merge`
        takes. Changes nothing (it may run in another thread)."""
        found: dict[str, tuple[int, str, int]] = {}
        position, at = self.position, self.at
        if end_seq <= position:
            return found, position, at
        for record in reader.records(since_seq=position + 1, at=at):
            seq = record.seq
            if seq is None:
                continue
            if seq > end_seq:
                break
            position, at = seq, (record.path, record.end)
            try:
                head, _ = read_header(record.raw)
            except BusError:
                continue
            if head.typ == _EVT and head.grp:
                found.pop(head.grp, None)
                found[head.grp] = (seq, record.path, record.offset)
        return found, position, at

    def merge(
        self, found: dict[str, tuple[int, str, int]], position: int, at: tuple[str, int] | None
    ) -> None:
        """Take what :meth:`scan` read (when it read on from this position)."""
        if position <= self.position:
            return
        types = self.types
        for name, where in found.items():
            types.pop(name, None)
            types[name] = where
        while len(types) > self.max_types:
            del types[next(iter(types))]
        self.position, self.at = position, at

    def update(self, reader: JournalReader, end_seq: int) -> None:
        """Read on to ``end_seq`` (:meth:`scan` then :meth:`merge`)."""
        self.merge(*self.scan(reader, end_seq))

    def records(self, pattern: str) -> Iterator[Record]:
        """The last event of each type matching ``pattern``, oldest first; an event whose
        segment retention has deleted is left out (and forgotten)."""
        chosen = sorted(
            (where, name) for name, where in self.types.items() if matches(pattern, name)
        )
        for (seq, path, offset), name in chosen:
            record = _record_at(path, offset, seq)
            if record is None:
                self.types.pop(name, None)
                continue
            yield record


def _record_at(path: str, offset: int, seq: int) -> Record | None:
    try:
        for record in read_segment(path, start=offset, stop=offset + 1, final=False):
            return record if record.seq == seq else None
    except (BusError, OSError):
        return None
    return None


def answer_of(page: Page, end_seq: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``manage.history`` answer's payload for a page (PROTOCOL.md 5.15)."""
    answer: dict[str, Any] = {
        "events": [record.raw for record in page.events],
        "seqs": [record.seq or 0 for record in page.events],
        "times": [record.ts for record in page.events],
        "seq": end_seq,
        "more": page.more,
    }
    if page.next is not None:
        answer["next"] = dict(page.next)
    answer.update(extra or {})
    return answer
