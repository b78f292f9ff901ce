"""Durable subscriptions: events from the journal for a subscriber that resumes (PROTOCOL.md 5.14).

Sans-I/O apart from reading the journal it is given. Two pieces:

- :func:`with_seq` (from :mod:`bus.event_seq`): an event's bytes with its journal sequence
  number (``SEQ``, U64) and, for a replayed one, the pattern it is replayed for (``RPL``),
  spliced in without decoding;
- :func:`replay_batch`: the next events of a pattern after a sequence number (or from a time),
  at most ``max_count`` of them and about ``max_bytes``, and whether more remain. The broker
  sends a batch, and registers the live subscription only with the batch that reached the end
  of the journal, in the same step: nothing published meanwhile is missed or sent twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from bus.broker.routing import matches
from bus.event_seq import rpl_field, with_seq
from bus.journal.format import Record
from bus.message.message import MessageType, read_header

__all__ = ["MAX_REPLAY_BYTES", "MAX_REPLAY_COUNT", "Batch", "replay_batch", "with_seq"]

#: Events sent per batch at most (the client asks for the next when it has room).
MAX_REPLAY_COUNT: Final = 1000
#: Bytes per batch, about (a batch stops after the event that passes it).
MAX_REPLAY_BYTES: Final = 4 * 1024 * 1024

_EVT: Final = MessageType.EVT.value


@dataclass
class Batch:
    """One batch of a replay.

    Attributes:
        events: the events' bytes, ``SEQ`` and ``RPL`` spliced in, oldest first.
        last_seq: the sequence number read up to (the next batch starts after it); when
            ``more`` is false, the journal's last one.
        more: the batch stopped at its limits before the end of the journal.
        resume_at: where the next batch's records begin, ``(segment path, offset)`` (the end
            of the last record read; ``JournalReader.records(at=...)``), when known.
    """

    events: list[bytes] = field(default_factory=list)
    last_seq: int = 0
    more: bool = False
    resume_at: tuple[str, int] | None = None


def replay_batch(
    records: Iterable[Record],
    pattern: str,
    after_seq: int,
    *,
    end_seq: int,
    max_count: int = MAX_REPLAY_COUNT,
    max_bytes: int = MAX_REPLAY_BYTES,
) -> Batch:
    """The events (``TYP=EVT``) of ``pattern`` among ``records`` after ``after_seq``.

    Args:
        records: journal records, oldest first (a reader's ``records(since_seq=...)``, or
            ``records(since=time)`` for a replay from a time).
        pattern: the subscription's pattern (``sensor.*``); it goes in each event's ``RPL``.
        after_seq: the last sequence number the subscriber has (0: none).
        end_seq: the journal's last sequence number now: the batch that reaches it ends the
            replay.
        max_count, max_bytes: the batch's limits.
    """
    batch = Batch(last_seq=max(after_seq, 0))
    size = 0
    rpl = rpl_field(pattern)
    for record in records:
        seq = record.seq
        if seq is None or seq <= after_seq:
            continue
        if seq > end_seq:
            break
        batch.last_seq = seq
        batch.resume_at = (record.path, record.end)
        head, _ = read_header(record.raw)
        if head.typ != _EVT or not matches(pattern, head.grp or ""):
            continue
        raw = with_seq(record.raw, head.enc, seq, pattern, rpl)
        batch.events.append(raw)
        size += len(raw)
        if len(batch.events) >= max_count or size >= max_bytes:
            batch.more = seq < end_seq
            return batch
    batch.last_seq = max(batch.last_seq, end_seq)
    return batch
