"""The broker's side of history and last values (PROTOCOL.md 5.15), mixed into its driver.

``manage.history {pattern, limit, since | sinceTime | before}`` is read off the broker's loop (a
page of a rare type may read many records): a reader of its own in a worker thread, the answer
written when it is ready. ``manage.subscribe {pattern, last: true}`` gives the last journaled
event of each type of the pattern, then registers the live subscription in the same step, so
nothing published meanwhile is missed or sent twice (as a durable subscription's last batch,
5.14). A pattern the journal keeps none of is refused with ``NAK`` 409 naming the filter.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bus.broker.history import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Coverage,
    LastValues,
    Page,
    answer_of,
    coverage,
    filter_text,
    read_after,
    read_before,
)
from bus.broker.link import Link
from bus.broker.replay import with_seq
from bus.broker.routing import Router
from bus.errors import BusError, ConfigError
from bus.journal.index import SegmentIndex
from bus.journal.reader import JournalReader
from bus.link import wire
from bus.message.message import Message, read_header

__all__ = ["RCD_NOT_JOURNALED", "HistoryCommands"]

log = logging.getLogger("bus.broker")

#: RCD of the NAK for a pattern whose events the journal does not keep.
RCD_NOT_JOURNALED: Final = 409
#: Records behind after which a last-value update is read in a worker thread first.
_THREAD_AFTER: Final = 20_000
#: Pages read forward whose end the broker keeps, so that the next one reads on from there.
_MAX_CURSORS: Final = 1024


class HistoryCommands:
    """``manage.history`` and ``manage.subscribe {last}`` of
    :class:`bus.broker.server.Broker`."""

    config: Any
    journal: Any
    router: Router
    stats: dict[str, int]
    _last_values: LastValues | None
    _last_lock: asyncio.Lock | None
    _history_tasks: set[asyncio.Task[None]]
    #: (pattern, since) -> where the records after ``since`` begin (the page before's end)
    _history_cursors: dict[tuple[str, int], tuple[str, int]]

    def _flush_dirty(self) -> None:
        raise NotImplementedError  # the broker's

    _relays: set[tuple[int, str]]

    if TYPE_CHECKING:  # PresenceLinks's, after this mixin in the broker's bases

        def _presence_changed(self, link: Link, pattern: str, relay: bool) -> None: ...

    # -- what the journal keeps ----------------------------------------------------------------

    def _refusal(self, message: Message, pattern: str) -> tuple[Message | None, Coverage]:
        """A NAK 409 when the journal keeps none of the pattern's events, and the coverage."""
        journal = self.journal
        journal_filter = getattr(journal, "filter", None) if journal is not None else None
        kept = coverage(journal_filter, pattern) if journal is not None else Coverage.NONE
        if kept is not Coverage.NONE:
            return None, kept
        if journal is None:
            why = "the broker keeps no journal (start it with --journal DIR)"
        else:
            why = f"the broker's journal does not keep {pattern!r} ({filter_text(journal_filter)})"
        return message.nak(why, RCD_NOT_JOURNALED), kept

    # -- manage.history --------------------------------------------------------------------------

    def _history(self, link: Link, message: Message, args: Any) -> Message | None:
        """Answer ``manage.history`` (the reply follows from a worker thread: None here)."""
        if args.get("last") is True:
            return self._history_last(link, message, args)
        pattern, limit, since, since_time, before = _history_args(args)
        refused, kept = self._refusal(message, pattern)
        if refused is not None:
            return refused
        journal = self.journal
        end = journal.last_seq
        extra = {} if kept is Coverage.ALL else {"filter": filter_text(journal.filter)}
        max_bytes = max(1024, self.config.max_message_size // 2)
        # Where the writer's current segment keeps its records (taken here, on the loop: the
        # reader in the thread skips inside that segment too), and where the page before left
        # off when this one goes on from it.
        live = journal.reader().live_index
        where = _Where(
            os.fspath(journal.directory),
            live() if live is not None else None,
            self._history_cursors.pop((pattern, since), None) if since is not None else None,
        )
        task = asyncio.get_running_loop().create_task(
            self._history_reply(
                link, message, where, (pattern, limit, since, since_time, before),
                end, max_bytes, extra,
            )
        )  # fmt: skip
        self._history_tasks.add(task)
        task.add_done_callback(self._history_tasks.discard)
        return None

    async def _history_reply(
        self,
        link: Link,
        message: Message,
        where: _Where,
        query: tuple[str, int, int | None, float | None, int | None],
        end: int,
        max_bytes: int,
        extra: dict[str, Any],
    ) -> None:
        try:
            page = await asyncio.to_thread(_read_page, where, query, end, max_bytes)
            reply = message.ack(answer_of(page, end, extra))
            if page.next is not None and "since" in page.next and page.resume_at is not None:
                cursors = self._history_cursors
                cursors[(query[0], page.next["since"])] = page.resume_at
                while len(cursors) > _MAX_CURSORS:
                    del cursors[next(iter(cursors))]
        except (BusError, OSError) as exc:  # a segment deleted or unreadable meanwhile
            log.warning("history of %r not read: %s", query[0], exc)
            reply = message.nak(f"the journal could not be read: {exc}", 503)
        self._answer_later(link, message, reply)

    def _answer_later(self, link: Link, message: Message, reply: Message) -> None:
        conn = link.conn
        if conn is None or link.closing:
            return
        reply.frame["CMD"] = message.cmd or ""
        reply.src = "central"
        conn.send_message(reply)
        link.flush()
        self._flush_dirty()

    # -- manage.subscribe {last: true} ---------------------------------------------------------

    def _last(self, link: Link, message: Message, pattern: str) -> Message | None:
        """The last journaled event of each type of ``pattern``, then the live subscription."""
        return self._with_last_values(
            link, message, pattern, lambda values: self._give_last(link, message, pattern, values)
        )

    def _history_last(self, link: Link, message: Message, args: Any) -> Message | None:
        """``manage.history {pattern, last: true}``: the last event of each type, a page."""
        pattern, limit, _, _, _ = _history_args(args)
        return self._with_last_values(
            link, message, pattern, lambda values: self._last_page(message, pattern, limit, values)
        )

    def _with_last_values(
        self, link: Link, message: Message, pattern: str, then: Callable[[LastValues], Message]
    ) -> Message | None:
        """``then(values)`` once the last values are read up to the journal's end (in a worker
        thread first when they are far behind: then the answer follows, None here)."""
        refused, _ = self._refusal(message, pattern)
        if refused is not None:
            return refused
        values = self._last_values
        if values is None:
            values = self._last_values = LastValues()
        if self.journal.last_seq - values.position <= _THREAD_AFTER:
            return then(values)
        task = asyncio.get_running_loop().create_task(
            self._last_after_scan(link, message, values, then)
        )
        self._history_tasks.add(task)
        task.add_done_callback(self._history_tasks.discard)
        return None

    def _last_page(self, message: Message, pattern: str, limit: int, values: LastValues) -> Message:
        journal = self.journal
        end = journal.last_seq
        try:
            values.update(journal.reader(), end)
            records = list(values.records(pattern))
        except (BusError, OSError) as exc:
            return message.nak(f"the journal could not be read: {exc}", 503)
        page = Page(events=records[-limit:] if limit else [], more=len(records) > limit)
        return message.ack(answer_of(page, end))

    async def _last_after_scan(
        self,
        link: Link,
        message: Message,
        values: LastValues,
        then: Callable[[LastValues], Message],
    ) -> None:
        if self._last_lock is None:
            self._last_lock = asyncio.Lock()
        async with self._last_lock:  # one long scan at a time; the others read on from it
            end = self.journal.last_seq
            if end - values.position > _THREAD_AFTER:
                reader = JournalReader(self.journal.directory, live=True)
                try:
                    values.merge(*await asyncio.to_thread(values.scan, reader, end))
                except (BusError, OSError) as exc:
                    log.warning("last values not read: %s", exc)
                    self._answer_later(link, message, message.nak(f"journal: {exc}", 503))
                    return
        if link.conn is None or link.closing:
            return
        self._answer_later(link, message, then(values))

    def _give_last(self, link: Link, message: Message, pattern: str, values: LastValues) -> Message:
        journal = self.journal
        end = journal.last_seq
        try:
            values.update(journal.reader(), end)  # what came since: read in this step
            given = 0
            for record in values.records(pattern):
                head, _ = read_header(record.raw)
                seq = record.seq or 0
                link.write(wire.encode_message(with_seq(record.raw, head.enc, seq, pattern)))
                given += 1
        except (BusError, OSError) as exc:
            return message.nak(f"the journal could not be read: {exc}", 503)
        self.router.subscribe(link.number, pattern)
        self._presence_changed(link, pattern, (link.number, pattern) in self._relays)
        self.stats["replayed"] += given
        return message.ack(
            {"pattern": pattern, "seq": end, "replayed": given, "more": False, "last": True}
        )


@dataclass(frozen=True)
class _Where:
    """What a history read in a worker thread needs to find its records fast."""

    directory: str
    live: tuple[Path, SegmentIndex] | None  # the writer's current segment and its blocks
    at: tuple[str, int] | None  # where the page before ended


def _read_page(
    where: _Where,
    query: tuple[str, int, int | None, float | None, int | None],
    end: int,
    max_bytes: int,
) -> Page:
    pattern, limit, since, since_time, before = query
    snapshot = where.live
    reader = JournalReader(where.directory, live=True, live_index=lambda: snapshot)
    if since is None and since_time is None:
        upto = end + 1 if before is None else min(before, end + 1)
        return read_before(reader, pattern, before_seq=upto, limit=limit, max_bytes=max_bytes)
    records = (
        reader.records(since=since_time)
        if since_time is not None
        else reader.records(since_seq=(since or 0) + 1, at=where.at)
    )
    return read_after(
        records, pattern, end_seq=end, limit=limit, max_bytes=max_bytes, until_seq=before
    )


def _history_args(args: Any) -> tuple[str, int, int | None, float | None, int | None]:
    """``(pattern, limit, since, sinceTime, before)`` of ``manage.history``.

    Raises:
        ConfigError: a missing pattern or a bad number (NAK 400).
    """
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError("missing argument 'pattern'")
    coverage(None, pattern)  # checks the pattern
    limit = args.get("limit", DEFAULT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT:
        raise ConfigError(f"limit must be an integer in 0..{MAX_LIMIT}")
    since = _seq_arg(args, "since")
    before = _seq_arg(args, "before")
    since_time = args.get("sinceTime")
    if since_time is not None:
        if isinstance(since_time, bool) or not isinstance(since_time, int | float):
            raise ConfigError("sinceTime must be epoch seconds")
        if not math.isfinite(since_time) or since_time < 0 or since_time > time.time() + 1e9:
            raise ConfigError("sinceTime must be epoch seconds >= 0")
        since_time = float(since_time)
    return pattern, limit, since, since_time, before


def _seq_arg(args: Any, name: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a sequence number (an integer >= 0)")
    return int(value)
