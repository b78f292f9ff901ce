"""Where a journal recorded from a stream ends: :func:`last_stream_seq` (PROTOCOL.md 10.2).

The NATS recorder journals each event of the JetStream stream with its stream sequence in the
event's ``SEQ`` field, in stream order, and nothing else it journals is an event with a
``SEQ``. So the newest such record says which stream message the journal holds last, and a
recorder that starts again (after a kill -9, or on another machine's copy of the journal)
resumes right after it: nothing twice, nothing missed. Reading it costs a scan of the newest
segment (an older one only when the newest holds no such record).
"""

from __future__ import annotations

import os
from collections import deque
from typing import Final

from bus.journal.fields import header_fields
from bus.journal.reader import read_segment
from bus.journal.segments import Damage, TornTail, list_segments

__all__ = ["last_stream_seq"]

_STREAM_TYPES: Final = frozenset({"EVT", "HBT"})
#: Records kept while scanning a segment, newest last: the answer is nearly always among them.
_KEPT: Final = 1024


def _stream_seq(raw: bytes) -> int | None:
    fields = header_fields(raw, ("TYP", "SEQ"))
    seq = fields.get("SEQ")
    if fields.get("TYP") in _STREAM_TYPES and isinstance(seq, int) and seq > 0:
        return seq
    return None


def last_stream_seq(directory: str | os.PathLike[str]) -> int:
    """The stream sequence of the newest event record that carries one (0: none).

    Damaged spans and torn tails are read around, as every reader does (a writer opened on the
    directory first has cut a torn tail already).
    """
    for segment in reversed(list_segments(directory)):
        damage: list[Damage] = []
        torn: list[TornTail] = []
        kept: deque[bytes] = deque(maxlen=_KEPT)
        count = 0
        for record in read_segment(segment, damage=damage, torn=torn):
            kept.append(record.raw)
            count += 1
        for raw in reversed(kept):
            seq = _stream_seq(raw)
            if seq is not None:
                return seq
        if count > _KEPT:  # not among the newest: look at every record of this segment
            last = 0
            for record in read_segment(segment, damage=damage, torn=torn):
                last = _stream_seq(record.raw) or last
            if last:
                return last
    return 0
