"""The broker's side of durable subscriptions (PROTOCOL.md 5.14), mixed into its driver.

:func:`bus.broker.replay.replay_batch` reads a batch from the journal with no I/O of its own;
this mixin of :class:`bus.broker.server.Broker` answers ``manage.subscribe`` with ``since``,
``sinceTime`` or ``fromEnd``: it writes the batch to the link and registers the live
subscription with the batch that reaches the journal's end.
"""

from __future__ import annotations

from typing import Any

from bus import wire
from bus.broker.link import Link
from bus.broker.replay import replay_batch
from bus.broker.routing import Router
from bus.errors import ConfigError
from bus.message import Message

__all__ = ["DurableSubscriptions"]

#: Catch-ups whose place in the journal the broker keeps between batches.
_MAX_CURSORS = 1024


class DurableSubscriptions:
    """Resuming subscriptions: what :class:`bus.broker.server.Broker` does with a
    ``manage.subscribe`` that says where to start."""

    journal: Any
    router: Router
    stats: dict[str, int]
    #: ``(link, pattern)`` -> (the last batch's ``last_seq``, where its records ended): the next
    #: batch reads on from there instead of from the index block holding it.
    _replay_cursors: dict[tuple[int, str], tuple[int, tuple[str, int]]]

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
        journal = self.journal
        if journal is None:  # nothing to resume from: live from now, and the client hears so
            self.router.subscribe(link.number, pattern)
            return message.ack({"pattern": pattern, "seq": 0, "replayed": 0, "journal": False})
        end = journal.last_seq
        if args.get("fromEnd"):  # a new durable subscription: live, its position the end
            self.router.subscribe(link.number, pattern)
            return message.ack({"pattern": pattern, "seq": end, "replayed": 0})
        reader = journal.reader()
        cursors = self._replay_cursors
        cursor = cursors.pop((link.number, pattern), None)
        if since_time is not None and not since:
            records = reader.records(since=float(since_time))
        else:
            at = cursor[1] if cursor is not None and cursor[0] == since else None
            records = reader.records(since_seq=since + 1, at=at)
        batch = replay_batch(records, pattern, since, end_seq=end)
        if batch.more and batch.resume_at is not None:
            cursors[(link.number, pattern)] = (batch.last_seq, batch.resume_at)
            if len(cursors) > _MAX_CURSORS:  # catch-ups abandoned midway: the oldest go
                del cursors[next(iter(cursors))]
        for event in batch.events:
            link.write(wire.encode_message(event))
        if not batch.more:
            self.router.subscribe(link.number, pattern)
        self.stats["replayed"] += len(batch.events)
        return message.ack(
            {"pattern": pattern, "seq": batch.last_seq, "replayed": len(batch.events),
             "more": batch.more}
        )  # fmt: skip
