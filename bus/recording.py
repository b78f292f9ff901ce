"""What the NATS journal recorder decides, without I/O (PROTOCOL.md 10.2).

The recorder (:mod:`bus.asyncio.nats_journal`) reads the bus's events from the JetStream stream
through a consumer of its own, and the rest of the bus's traffic (requests, responses, mail)
from a plain subscription. Here, as pure functions and small state machines:

- :func:`stream_record`: the record of one stream message, the event with its stream sequence
  spliced in as ``SEQ`` (so the journal's tail says which stream message was appended last);
  :func:`plain_record`: the record of one message of the plain subscription;
- :func:`recorded_subject`: which subjects of the plain subscription are bus messages to record
  (not the stream's own events, not the transport's status and PubAck subjects);
- :class:`StreamCursor`: the order rule: each stream message is appended, skipped (it is in
  the journal already) or makes the consumer start again (a delivery went missing);
- :class:`AckWindow`: which stream message may be acknowledged once the journal has put which
  record on disk.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Generic, NamedTuple, TypeVar

from bus.discovery.topics import INBOX_PREFIX
from bus.errors import BusError
from bus.event_seq import with_seq
from bus.frame.codec import DEFAULT_LIMITS, Limits
from bus.message.message import MessageType, decode_message, encode_message, read_header

__all__ = [
    "STREAM_TYPES",
    "AckWindow",
    "Delivery",
    "StreamCursor",
    "Take",
    "delivery",
    "plain_record",
    "recorded_subject",
    "stream_record",
]

#: The message types the stream holds (``<prefix>.evt.>``): events and heartbeats.
STREAM_TYPES: Final = frozenset({MessageType.EVT.value, MessageType.HBT.value})
_FRAM, _JSON = 0, 1  # bus.message.header.ENC_CODES: how a body reads

T = TypeVar("T")


def stream_record(raw: bytes, stream_seq: int, limits: Limits = DEFAULT_LIMITS) -> bytes | None:
    """The journal body of a message the stream holds at ``stream_seq``.

    The message as published, with ``SEQ`` = ``stream_seq`` added (a binary frame gets the field
    appended, a JSON object a first member, as the broker's replay adds it, 5.14), so the
    record says which stream message it is. A ``SEQ`` the publisher put in is replaced.

    Returns:
        The body, or None when ``raw`` is no bus event: text or bytes that are neither a binary
        frame nor a JSON object (they cannot carry ``SEQ``), or a message whose ``TYP`` is not
        ``EVT`` or ``HBT`` (the journal's tail is read from those). It is not recorded.
    """
    try:
        head, _ = read_header(raw, limits)
    except BusError:
        return None
    if head.enc not in (_FRAM, _JSON) or head.typ not in STREAM_TYPES:
        return None
    if head.seq is None:
        spliced = with_seq(raw, head.enc, stream_seq)
        if spliced is not raw:
            return spliced
    return _with_own_seq(raw, head.enc, stream_seq, limits)


def _with_own_seq(raw: bytes, enc: int, seq: int | None, limits: Limits) -> bytes | None:
    """``raw`` re-encoded without its ``SEQ`` fields, then with ``seq`` (if given) spliced in."""
    try:
        message = decode_message(raw, limits)
        message.frame.remove("SEQ")
        bare = encode_message(message)
    except BusError:
        return None
    if seq is None:
        return bare
    spliced = with_seq(bare, enc, seq)
    return None if spliced is bare else spliced


def plain_record(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The journal body of a message from the plain subscription: ``raw`` as it came.

    Only an event or heartbeat that arrived outside the stream's subjects with a ``SEQ`` of its
    own (a foreign publisher's) loses that ``SEQ``: in this journal, an event with ``SEQ`` is
    one the recorder took from the stream, and the last such record is where it resumes.
    """
    try:
        head, _ = read_header(raw, limits)
    except BusError:
        return raw
    if head.seq is None or head.typ not in STREAM_TYPES or head.enc not in (_FRAM, _JSON):
        return raw
    return _with_own_seq(raw, head.enc, None, limits) or raw


def recorded_subject(subject: str, prefix: str, events_from_stream: bool) -> bool:
    """Whether a message on ``subject`` (of the plain subscription to ``<prefix>.>``) is
    recorded from there.

    Not recorded: the stream's subjects ``<prefix>.evt.>`` when the stream supplies the events,
    and the transport's own subjects under an inbox, ``<prefix>._INBOX.<id>.<...>`` (NATS's
    no-responders statuses, JetStream's PubAcks): they are not bus messages. A response to an
    inbox (``<prefix>._INBOX.<id>``) is.
    """
    rest = subject[len(prefix) + 1 :]
    if events_from_stream and rest.startswith("evt."):
        return False
    if rest.startswith(INBOX_PREFIX):
        return "." not in rest[len(INBOX_PREFIX) :]
    return True


class Delivery(NamedTuple):
    """Where a JetStream delivery stands, read from its acknowledgement subject.

    Attributes:
        stream_seq: the message's stream sequence.
        delivery: the consumer's number for this delivery (1, 2, 3, ...; redeliveries too).
        stored: when the stream stored the message, epoch seconds (its server's clock).
    """

    stream_seq: int
    delivery: int
    stored: float


def delivery(reply: str | None) -> Delivery | None:
    """The :class:`Delivery` a JetStream acknowledgement subject names, None for any other.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<delivery>.<ns>.<pending>``, or the
    same after ``$JS.ACK.<domain>.<account>`` with a token at the end (nats-server 2.9+).
    """
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    if len(tokens) == 9:
        base = 4
    elif len(tokens) >= 11:
        base = 6
    else:
        return None
    try:
        return Delivery(int(tokens[base + 1]), int(tokens[base + 2]), int(tokens[base + 3]) / 1e9)
    except ValueError:
        return None


class Take(Enum):
    """What to do with one message a stream consumer delivered."""

    APPEND = "append"  # next in stream order: journal it
    SKIP = "skip"  # the journal has it already (a redelivery, or before the journal's tail)
    RESTART = "restart"  # a delivery went missing: start the consumer again after `position`


@dataclass
class StreamCursor:
    """Stream order for one consumer: every stream message once, oldest first.

    ``position`` is the stream sequence the journal holds up to (what the journal's tail said
    at start, then the last message taken). The consumer numbers its deliveries 1, 2, 3, ...
    (redeliveries too); a number that jumps means a delivery never reached us (a fetch that
    timed out while its messages were in flight), and everything after it must wait: the
    consumer starts again after ``position``.

    Attributes:
        position: the last stream sequence journaled (or decided on: a filtered-out event).
        delivered: the consumer's last delivery number seen (0: a new consumer).
    """

    position: int = 0
    delivered: int = 0

    def take(self, stream_seq: int, delivery: int) -> Take:
        """Decide on one delivery (``stream_seq``, the consumer's ``delivery`` number)."""
        if delivery != self.delivered + 1:
            return Take.RESTART
        self.delivered = delivery
        if stream_seq <= self.position:
            return Take.SKIP
        self.position = stream_seq
        return Take.APPEND

    def restarted(self) -> None:
        """A new consumer (its deliveries count from 1) starts after ``position``."""
        self.delivered = 0


@dataclass
class AckWindow(Generic[T]):
    """Stream messages waiting for their records to be on disk before they are acknowledged.

    Each message is added with the journal sequence its acknowledgement waits for: its own
    record's, or, for one that made no record (skipped, filtered out), the journal's last one
    then. As the journal's durable sequence grows (:meth:`ready`), the newest message it covers
    is acknowledged, which acknowledges every one before it (the consumer's ``AckAll``).
    """

    _waiting: deque[tuple[int, T]] = field(default_factory=deque)

    def add(self, journal_seq: int, message: T) -> None:
        """Wait for ``journal_seq`` to be durable before acknowledging ``message``."""
        self._waiting.append((journal_seq, message))

    def ready(self, durable_seq: int) -> T | None:
        """The newest message whose record is durable (``<= durable_seq``), removed with
        every older one; None when there is none."""
        last: T | None = None
        waiting = self._waiting
        while waiting and waiting[0][0] <= durable_seq:
            last = waiting.popleft()[1]
        return last

    def clear(self) -> None:
        """Forget every message (the consumer was replaced: its acknowledgements are void)."""
        self._waiting.clear()

    def __len__(self) -> int:
        return len(self._waiting)
