"""The broker's side of durable subscriptions (PROTOCOL.md 5.14), mixed into its driver.

:func:`bus.broker.replay.replay_batch` reads a batch from the journal with no I/O of its own;
this mixin of :class:`bus.broker.server.Broker` answers ``manage.subscribe`` with ``since``,
``sinceTime`` or ``fromEnd``: it writes the batch to the link and registers the live
subscription with the batch that reaches the journal's end. Where nothing can be resumed (no
journal, or a filter that keeps none of the pattern's events) it refuses with ``NAK`` 409.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bus.broker.link import Link
from bus.broker.replay import Batch, replay_batch
from bus.broker.routing import Router
from bus.errors import ConfigError, JournalError
from bus.link import wire
from bus.message.message import Message

__all__ = ["DurableSubscriptions"]

#: Catch-ups whose place in the journal the broker keeps between batches.
_MAX_CURSORS = 1024
#: Bytes of batches read ahead, over all catch-ups, at most (then read when asked).
_MAX_READ_AHEAD_BYTES = 64 * 1024 * 1024


@dataclass
class _Cursor:
    """Where a catch-up is: the ``since`` its next ask will carry, where the records after it
    begin in the journal, and the next batch when it has been read ahead."""

    since: int
    at: tuple[str, int]
    ready: Batch | None = None
    size: int = 0


class DurableSubscriptions:
    """Resuming subscriptions: what :class:`bus.broker.server.Broker` does with a
    ``manage.subscribe`` that says where to start."""

    journal: Any
    router: Router
    stats: dict[str, int]
    #: ``(link, pattern)`` -> where that catch-up is: the next batch reads on from where the one
    #: before ended instead of from the index block holding it, or was read ahead.
    _replay_cursors: dict[tuple[int, str], _Cursor]
    _read_ahead_bytes: int

    if TYPE_CHECKING:  # the broker's (HistoryCommands): a NAK 409 when nothing is kept

        def _refusal(self, message: Message, pattern: str) -> tuple[Message | None, Any]: ...

    def _resume(self, link: Link, message: Message, pattern: str, args: Any) -> Message:
        """``manage.subscribe`` with ``since`` (a sequence number) or ``sinceTime`` (epoch
        seconds): the next batch of the pattern's journaled events, then, with the batch that
        reaches the journal's end, the live subscription, in this same step (PROTOCOL.md 5.14).
        """
        since = args.get("since", 0)
        since_time = args.get("sinceTime")
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ConfigError("since must be a sequence number (an integer >= 0)")
        if since_time is not None and (
            isinstance(since_time, bool) or not isinstance(since_time, int | float)
        ):
            raise ConfigError("sinceTime must be epoch seconds")
        # Nothing to resume from (no journal, or its filter keeps none of the pattern): a NAK
        # 409, never a live subscription that would miss events without a word (issue 30).
        refused, _ = self._refusal(message, pattern)
        if refused is not None:
            return refused
        journal = self.journal
        end = journal.last_seq
        if args.get("fromEnd"):  # a new durable subscription: live, its position the end
            self.router.subscribe(link.number, pattern)
            return message.ack({"pattern": pattern, "seq": end, "replayed": 0})
        key = (link.number, pattern)
        cursor = self._take_cursor(key)
        from_time = None if since_time is None or since else float(since_time)
        at = (
            cursor.at
            if cursor is not None and cursor.since == since and from_time is None
            else None
        )
        batch = cursor.ready if cursor is not None and at is not None else None  # read ahead
        if batch is None:
            batch = _next_batch(journal, pattern, since, end, at, from_time)
        if batch.more and batch.resume_at is not None:
            self._replay_cursors[key] = _Cursor(batch.last_seq, batch.resume_at)
            if len(self._replay_cursors) > _MAX_CURSORS:  # catch-ups abandoned midway
                self._take_cursor(next(iter(self._replay_cursors)))
            asyncio.get_running_loop().call_soon(self._read_ahead, link, key)
        for event in batch.events:
            link.write(wire.encode_message(event))
        if not batch.more:
            self.router.subscribe(link.number, pattern)
        self.stats["replayed"] += len(batch.events)
        return message.ack(
            {"pattern": pattern, "seq": batch.last_seq, "replayed": len(batch.events),
             "more": batch.more}
        )  # fmt: skip

    def _forget_catch_ups(self, number: int) -> None:
        """A link is gone: its catch-ups' places, and what was read ahead for them, go too."""
        for key in [key for key in self._replay_cursors if key[0] == number]:
            self._take_cursor(key)

    def _take_cursor(self, key: tuple[int, str]) -> _Cursor | None:
        cursor = self._replay_cursors.pop(key, None)
        if cursor is not None:
            self._read_ahead_bytes -= cursor.size
        return cursor

    def _read_ahead(self, link: Link, key: tuple[int, str]) -> None:
        """The next batch of a catch-up, read once the one before has been written (after
        this loop iteration's writes) and kept for when the client asks: the broker reads
        while the client takes the batch before. The batch that reaches the journal's end is
        not kept: it is read when asked for, with the live subscription in the same step."""
        cursor = self._replay_cursors.get(key)
        journal = self.journal
        if cursor is None or cursor.ready is not None or journal is None or link.closing:
            return
        if self._read_ahead_bytes >= _MAX_READ_AHEAD_BYTES:
            return
        try:
            batch = _next_batch(journal, key[1], cursor.since, journal.last_seq, cursor.at)
        except (JournalError, OSError):
            return  # read again when asked: the error is then answered to the client
        if batch.more:
            cursor.ready = batch
            cursor.size = sum(len(event) for event in batch.events)
            self._read_ahead_bytes += cursor.size


def _next_batch(
    journal: Any,
    pattern: str,
    since: int,
    end: int,
    at: tuple[str, int] | None,
    since_time: float | None = None,
) -> Batch:
    """The batch of ``pattern`` after ``since`` (or from ``since_time``), read from ``at``."""
    reader = journal.reader()
    if since_time is not None:
        records = reader.records(since=since_time)
    else:
        records = reader.records(since_seq=since + 1, at=at)
    return replay_batch(records, pattern, since, end_seq=end)
