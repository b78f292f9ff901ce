"""What the SSE hub (:mod:`gateway.events.hub`) feeds: its events, its replay log and its
subscribers (PROTOCOL.md 9.5).

A :class:`Listener` is an SSE client whose events wait in a bounded queue for the client's task
(the ASGI way); a :class:`ResumingListener` resumes from the broker's journal; any other
:class:`Subscriber` (the lean stream of :mod:`gateway.events.sse_lean`) writes its events to its
connection itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from bus.discovery.topics import matches

__all__ = [
    "EventLog",
    "HubEvent",
    "JournalSeen",
    "Listener",
    "ResumingListener",
    "S",
    "Subscriber",
    "matches_any",
]


@dataclass(frozen=True)
class HubEvent:
    """One bus event as the SSE stream sends it.

    Attributes:
        seq: its number in this gateway's sequence.
        type: the event type (``major.minor``).
        data: the SSE ``data`` (JSON text, one line).
        mid: the bus message id, used to drop a copy that came through a second pattern.
        journal: its sequence number in the broker's journal (None: not journaled).
        kind: the SSE ``event``: ``message``, or ``join`` / ``leave`` (presence, 9.11: no ``id``).
    """

    seq: int
    type: str
    data: str
    mid: str | None
    journal: int | None = None
    kind: str = "message"


class Subscriber(Protocol):
    """What the hub feeds events to: a :class:`Listener` (a queue a task drains), or a stream
    that writes them to its connection itself (:mod:`gateway.events.sse_lean`)."""

    patterns: tuple[str, ...]
    #: Presence (9.11): its id there, and whether it is told of joins and leaves.
    presence_id: str
    presence: bool

    def wants(self, type_: str) -> bool:
        """Whether an event of this type goes to it."""
        ...  # pragma: no cover

    def offer(self, event: HubEvent) -> None:
        """An event of its patterns (numbered: one it already has is skipped)."""
        ...  # pragma: no cover

    def notify(self, event: HubEvent) -> None:
        """A presence event (no place in the event sequence)."""
        ...  # pragma: no cover

    def end(self) -> None:
        """The gateway shuts down: end the stream."""
        ...  # pragma: no cover


S = TypeVar("S", bound=Subscriber)


class EventLog:
    """The last events, numbered, without duplicates (sans-I/O).

    Args:
        size: events kept for replay (the newest ``size``).
        max_chars: characters of event data kept at most (8 MiB by default): events can be as
            large as the bus allows, and the log must stay small whatever they are.
    """

    def __init__(self, size: int, max_chars: int = 8 * 1024 * 1024) -> None:
        self.size = size
        self.max_chars = max_chars
        self.last_seq = 0
        self._events: deque[HubEvent] = deque()
        self._mids: set[str] = set()
        self._chars = 0

    def append(
        self, type_: str, data: str, mid: str | None, journal: int | None = None
    ) -> HubEvent | None:
        """Number and keep an event; ``None`` when the same ``mid`` is already held."""
        if mid is not None and mid in self._mids:
            return None
        self.last_seq += 1
        event = HubEvent(self.last_seq, type_, data, mid, journal)
        self._events.append(event)
        self._chars += len(data)
        if mid is not None:
            self._mids.add(mid)
        while self._events and (len(self._events) > self.size or self._chars > self.max_chars):
            self._forget(self._events.popleft())
        return event

    def _forget(self, event: HubEvent) -> None:
        self._chars -= len(event.data)
        if event.mid is not None:
            self._mids.discard(event.mid)

    def since(self, seq: int, patterns: Sequence[str]) -> list[HubEvent]:
        """The events after ``seq`` whose type matches one of ``patterns``."""
        return [e for e in self._events if e.seq > seq and matches_any(patterns, e.type)]


#: Event types a listener remembers the match of (a flood of distinct types costs no memory).
_WANTED_CACHE: Final = 1024


def matches_any(patterns: Sequence[str], type_: str) -> bool:
    return any(matches(pattern, type_) for pattern in patterns)


@dataclass(eq=False)
class Listener:
    """One SSE client: the patterns it asked for and a bounded queue of events."""

    patterns: tuple[str, ...]
    queue: asyncio.Queue[HubEvent | None] = field(default_factory=asyncio.Queue)
    ended: bool = False
    too_slow: asyncio.Event = field(default_factory=asyncio.Event)  # set when it overflows

    last_seq: int = 0
    #: Presence (9.11): its id there, and whether it is told of joins and leaves.
    presence_id: str = ""
    presence: bool = False
    #: Whether an event type matches the patterns, by type (cleared past _WANTED_CACHE types).
    _wanted: dict[str, bool] = field(default_factory=dict, repr=False)

    def wants(self, type_: str) -> bool:
        """Whether an event of this type goes to this client (one of its patterns matches)."""
        wanted = self._wanted.get(type_)
        if wanted is None:
            if len(self._wanted) >= _WANTED_CACHE:
                self._wanted.clear()
            wanted = self._wanted[type_] = matches_any(self.patterns, type_)
        return wanted

    @property
    def overflowed(self) -> bool:
        """Events piled up past the queue: the client is too slow and will be closed."""
        return self.too_slow.is_set()

    def end(self) -> None:
        """End the stream (the gateway is shutting down): ``None`` is queued."""
        self.ended = True
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)

    def notify(self, event: HubEvent) -> None:
        """Queue a presence event (no place in the event sequence)."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.too_slow.set()

    def offer(self, event: HubEvent) -> None:
        """Queue an event; a client too slow to keep up is marked and will be closed."""
        if event.seq <= self.last_seq:
            return  # already queued (replayed, then delivered live)
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.too_slow.set()
            return
        self.last_seq = event.seq


class JournalSeen:
    """The events a resuming stream has given (sans-I/O): an event that two patterns both
    bring, that a replay repeats, or that the shared subscriptions bring again when the stream
    moves to them (:meth:`gateway.events.hub.EventHub.attach_resuming`), is given once. An event
    is known by its journal number, one the broker does not journal by its message id (one with
    neither always is new). The newest ``size`` are kept.

    Args:
        size: events remembered (100,000).
    """

    __slots__ = ("size", "_order", "_seen")

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._seen: set[int | str] = set()
        self._order: deque[int | str] = deque()

    def first(self, event: HubEvent) -> bool:
        """Whether ``event`` is new; remembers it."""
        key = event.journal if event.journal is not None else event.mid
        if key is None:
            return True
        if key in self._seen:
            return False
        self._seen.add(key)
        self._order.append(key)
        if len(self._order) > self.size:
            self._seen.discard(self._order.popleft())
        return True


@dataclass(eq=False)
class ResumingListener(Listener):
    """An SSE client that resumes from the journal: fed by bus subscriptions of its own, one
    per pattern (:meth:`gateway.events.hub.EventHub.attach_resuming`), each giving first what
    the journal holds after its position; an event two patterns both bring (or a replay
    repeats) is given once, by its journal number."""

    seen: JournalSeen = field(default_factory=JournalSeen, repr=False)

    def offer(self, event: HubEvent) -> None:
        if not self.seen.first(event):
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.too_slow.set()
