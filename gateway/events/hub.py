"""Server-Sent Events of bus events, shared between HTTP clients, with ``Last-Event-ID`` replay.

One bus subscription per pattern serves every SSE client that asked for it. Each event that
arrives gets the next number of a gateway-wide sequence and is kept in a bounded log
(:class:`EventLog`, sans-I/O), so a client that reconnects with ``Last-Event-ID`` gets the
events it missed, as long as the log still holds them. A bus subscription outlives its last
client by ``linger`` seconds so that a reconnecting client misses nothing in between.

Event ids are the broker journal's sequence number (``SEQ``, PROTOCOL.md 5.14) when the event
carries one: a client that comes back with such a ``Last-Event-ID`` (or ``?since=SEQ|TIME``), to
this gateway or any other, gets a bus subscription of its own that resumes from the journal:
exactly what it missed, then live events. Once it has caught up it moves to the shared
subscriptions (:meth:`EventHub.attach_resuming`): a browser that reconnects costs a private
subscription only while it catches up. Events the broker does not journal have ids
``<epoch>-<seq>``: ``epoch`` names this gateway process, so such an id from another process (or
an older run) replays nothing rather than the wrong events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bus.errors import BusError
from bus.presence import Change, Present
from gateway.events.listeners import (
    EventLog,
    HubEvent,
    Listener,
    ResumingListener,
    S,
    Subscriber,
)

if TYPE_CHECKING:  # pragma: no cover
    from gateway.events.presence import Presence

__all__ = [
    "EventHub",
    "EventLog",
    "HubEvent",
    "Listener",
    "ResumingListener",
    "Subscriber",
    "resume_point",
]

log = logging.getLogger("busgate.gateway")


def _presence_event(listener: Subscriber, change: Change) -> HubEvent | None:
    """``join`` / ``leave`` for one listener, when the change crosses its patterns."""
    client = change.after or change.before
    if client is None or client.id == listener.presence_id:
        return None
    was = change.before is not None and _wants_any(change.before, listener.patterns)
    now = change.after is not None and _wants_any(change.after, listener.patterns)
    if was == now:
        return None
    data = json.dumps(client.to_json(), separators=(",", ":"))
    return HubEvent(0, "", data, None, None, "join" if now else "leave")


def _wants_any(client: Present, patterns: Sequence[str]) -> bool:
    return any(client.wants(pattern) for pattern in patterns)


@dataclass
class _Subscription:
    users: int = 0
    task: asyncio.Task[None] | None = None
    linger: asyncio.TimerHandle | None = None


Subscribe = Callable[[str], Awaitable[Any]]
#: ``await resume(pattern, since, since_time, last)``: a bus subscription that resumes from the
#: journal (``last``: from the last journaled event of each type, PROTOCOL.md 5.15).
Resume = Callable[[str, int | None, float | None, bool], Awaitable[Any]]
Render = Callable[[Any], tuple[str, str, str | None, int | None]]
#: ``ready()``: None when a resuming subscriber can take more now, else what to await first.
Ready = Callable[[], Awaitable[None] | None]
#: ``settled(source)``: a resuming subscriber's own bus subscription has caught up and holds
#: nothing it has not given; each live event it is given reaches the shared one too (5.14).
Settled = Callable[[Any], bool]


@dataclass(eq=False)
class _Own:
    """A resuming subscriber's own bus subscriptions and the tasks that feed it from them."""

    sources: Sequence[Any]
    tasks: list[asyncio.Task[None]]
    shared: bool = False  # it counts as a user of its patterns' shared subscriptions
    joining: asyncio.Task[None] | None = None  # acquiring them (or that failed)


def resume_point(
    last_event_id: str | None, since_time: float | None, last: bool
) -> tuple[int | None, float | None, bool]:
    """Where a stream that resumes from the journal starts: after the journal number in
    ``Last-Event-ID`` (``since``), at ``since_time``, or at the last journaled event of each
    type (``last``, when neither)."""
    journal = last_event_id.strip() if last_event_id else ""
    since = int(journal) if journal.isdigit() else None
    return since, since_time, last and since is None


class EventHub:
    """Shares bus subscriptions between SSE clients.

    Args:
        subscribe: ``await subscribe(pattern)`` returns an async iterator of bus messages with
            an ``unsubscribe()`` coroutine (the bus client's ``subscribe``).
        render: turns a bus message into ``(type, data, mid)``.
        buffer: events kept for ``Last-Event-ID`` replay.
        linger: seconds a subscription outlives its last listener.
        queue_size: events waiting for one SSE client before it is dropped as too slow (10,000).
        resume: makes a bus subscription that resumes from the journal (None: none resumes).
        settled: whether such a subscription has caught up (:data:`Settled`; None: a resuming
            subscriber keeps its own subscriptions while it is connected).
    """

    def __init__(
        self,
        subscribe: Subscribe,
        render: Render,
        buffer: int,
        linger: float,
        queue_size: int = 10_000,
        resume: Resume | None = None,
        settled: Settled | None = None,
    ) -> None:
        self._subscribe = subscribe
        self._resume = resume
        self._settled = settled
        self._render = render
        self.linger = linger
        self.queue_size = queue_size
        self.epoch = secrets.token_hex(4)
        self.log = EventLog(buffer)
        self._listeners: set[Subscriber] = set()
        #: The subscribers that resume from the journal, while bus subscriptions of their own
        #: feed them (the shared pumps never look at them).
        self._resumers: dict[Subscriber, _Own] = {}
        self._dropping: set[asyncio.Task[None]] = set()
        #: The listeners told of presence changes (``?presence=1``): a join is announced to
        #: these, not looked up among every stream (no walk over all clients per join).
        self._watchers: set[Subscriber] = set()
        self._subs: dict[str, _Subscription] = {}
        self.presence: Presence | None = None  # gateway/events/presence.py, when set

    @property
    def patterns(self) -> list[str]:
        """The patterns with a live bus subscription (in use or lingering)."""
        return sorted(self._subs)

    def event_id(self, event: HubEvent) -> str:
        """The SSE ``id`` of an event: its journal number, else ``<epoch>-<seq>``."""
        if event.journal is not None:
            return str(event.journal)
        return f"{self.epoch}-{event.seq}"

    def _seq_from(self, last_event_id: str | None) -> int | None:
        if not last_event_id:
            return None
        epoch, _, seq = last_event_id.partition("-")
        if epoch != self.epoch or not seq.isdigit():
            return None
        return int(seq)

    async def open(
        self,
        patterns: Sequence[str],
        last_event_id: str | None = None,
        since_time: float | None = None,
        *,
        last: bool = False,
        caller: str = "",
        presence: bool = False,
    ) -> Listener:
        """Start listening to ``patterns``; the events missed since ``last_event_id`` come first.

        Args:
            patterns: bus subscription patterns (``sensor.temp``, ``sensor.*``).
            last_event_id: the SSE ``Last-Event-ID`` the client sent back, if any: a journal
                number resumes from the broker's journal, ``<epoch>-<seq>`` from this
                gateway's memory.
            since_time: resume from the journal at this time (epoch seconds) instead.
            last: start with the last journaled event of each matching type.
            caller: who it is (presence lists it).
            presence: tell it of the others that come and go (``event: join`` / ``leave``).

        Returns:
            The listener: take events from ``listener.queue``; call :meth:`close` at the end.

        Raises:
            BusError: the bus refused a subscription (nothing stays subscribed);
                NotJournaledError with ``last`` when it keeps none of a pattern's events.
        """
        if self.resumes(last_event_id, since_time, last):
            resumer = ResumingListener(tuple(patterns), asyncio.Queue(self.queue_size))
            sources = await self.resume_sources(
                resumer.patterns, *resume_point(last_event_id, since_time, last)
            )
            return self.attach_resuming(resumer, sources, caller=caller, presence=presence)
        listener = Listener(tuple(patterns), asyncio.Queue(self.queue_size))
        await self.acquire(listener.patterns)
        return self.attach(listener, last_event_id, caller=caller, presence=presence)

    def resumes(self, last_event_id: str | None, since_time: float | None, last: bool) -> bool:
        """Whether a stream asking this resumes from the journal (:meth:`open` gives it bus
        subscriptions of its own) rather than sharing the hub's."""
        journal = last_event_id.strip() if last_event_id else ""
        return self._resume is not None and (journal.isdigit() or since_time is not None or last)

    def live(self, patterns: Sequence[str]) -> bool:
        """Whether each pattern has a running bus subscription: :meth:`acquire_now` may join."""
        for pattern in patterns:
            sub = self._subs.get(pattern)
            if sub is None or sub.task is None or sub.task.done():
                return False
        return True

    def acquire_now(self, patterns: Sequence[str]) -> None:
        """Count one more user of each pattern's running subscription (:meth:`live` said so)."""
        for pattern in patterns:
            self._take(self._subs[pattern])

    async def acquire(self, patterns: Sequence[str]) -> None:
        """Count one more user of each pattern's subscription, subscribing where none runs.

        Raises:
            BusError: the bus refused a subscription (nothing stays acquired).
        """
        acquired: list[str] = []
        try:
            for pattern in patterns:
                await self._acquire(pattern)
                acquired.append(pattern)
        except BaseException:
            for pattern in acquired:
                self._release(pattern)
            raise

    def release(self, patterns: Sequence[str]) -> None:
        """Undo :meth:`acquire` (a stream that went before it started)."""
        for pattern in patterns:
            self._release(pattern)

    def attach(self, subscriber: S, last_event_id: str | None, *, caller: str, presence: bool) -> S:
        """Feed ``subscriber`` the events of its patterns (acquired first), after those it
        missed since ``last_event_id`` (this gateway's ``<epoch>-<seq>``); :meth:`close` it."""
        self._listeners.add(subscriber)
        seq = self._seq_from(last_event_id)
        if seq is not None:
            for event in self.log.since(seq, subscriber.patterns):
                subscriber.offer(event)
        return self._present(subscriber, caller, presence)

    def _present(self, listener: S, caller: str, presence: bool) -> S:
        """Count the listener in presence (9.11); ``presence``: tell it of joins and leaves."""
        if self.presence is not None:  # its own join is not for itself: told of the others
            listener.presence_id = self.presence.sse_joined(caller, listener.patterns)
        listener.presence = presence
        if presence:
            self._watchers.add(listener)
        return listener

    @property
    def resuming(self) -> int:
        """How many subscribers are fed by bus subscriptions of their own (catching up)."""
        return len(self._resumers)

    @property
    def watchers(self) -> int:
        """How many open streams are told of presence changes."""
        return len(self._watchers)

    def presence_changed(self, changes: list[Change]) -> None:
        """Tell the listeners that asked (``?presence=1``) of the clients that now subscribe to
        types they subscribe to (``join``), or no longer do (``leave``)."""
        for listener in self._watchers:
            for change in changes:
                event = _presence_event(listener, change)
                if event is not None:
                    listener.notify(event)

    async def resume_sources(
        self, patterns: Sequence[str], since: int | None, since_time: float | None, last: bool
    ) -> list[Any]:
        """Bus subscriptions of its own for a stream that resumes from the journal, one per
        pattern (:func:`resume_point` says from where).

        Raises:
            BusError: the bus refused one (none stays subscribed); NotJournaledError when it
                keeps none of a pattern's events.
        """
        assert self._resume is not None
        sources: list[Any] = []
        try:
            for pattern in patterns:
                sources.append(await self._resume(pattern, since, since_time, last))
        except BaseException:
            await self.drop_sources(sources)
            raise
        return sources

    @staticmethod
    async def drop_sources(sources: Sequence[Any]) -> None:
        """End bus subscriptions :meth:`resume_sources` made that no stream will use."""
        for source in sources:
            with contextlib.suppress(Exception):
                await source.unsubscribe()

    def attach_resuming(
        self,
        subscriber: S,
        sources: Sequence[Any],
        *,
        caller: str,
        presence: bool,
        ready: Ready | None = None,
    ) -> S:
        """Feed ``subscriber`` from ``sources`` (:meth:`resume_sources`): what the journal
        holds after its position, then live events; :meth:`close` it.

        Once each source has caught up and holds nothing not given (``settled``), it moves to
        the shared subscriptions and its own end: each live event from then on reaches a shared
        one too, and what those hold from before was given already (its ``offer`` drops it, by
        journal number or message id). No gap, none twice (PROTOCOL.md 9.5).

        Args:
            ready: asked after each event (a subscriber that writes to its connection: None
                while the client reads on, else what to await before the next).
        """
        own = self._resumers[subscriber] = _Own(sources, [])
        self._present(subscriber, caller, presence)
        if not self._settle(subscriber):
            own.tasks += [
                asyncio.create_task(self._pump_to(source, subscriber, ready)) for source in sources
            ]
        return subscriber

    async def _pump_to(self, source: Any, listener: Subscriber, ready: Ready | None) -> None:
        try:
            async for message in source:
                try:
                    type_, data, mid, journal = self._render(message)
                except BusError as exc:
                    log.warning("event dropped: cannot render it as JSON: %s", exc)
                    continue
                listener.offer(HubEvent(0, type_, data, mid, journal))
                if ready is not None and (waiting := ready()) is not None:
                    await waiting  # the rest waits in the bus subscription, not here
                self._settle(listener)
        finally:
            with contextlib.suppress(Exception):
                await source.unsubscribe()

    def _settle(self, subscriber: Subscriber) -> bool:
        """Move a resuming subscriber to the shared subscriptions if each of its own has
        settled (first acquiring them, in the background where one is not running); whether
        it moved."""
        own, settled = self._resumers.get(subscriber), self._settled
        if own is None or settled is None or not all(settled(s) for s in own.sources):
            return False
        if not own.shared:
            if own.joining is not None:  # acquiring, or the bus refused: it stays on its own
                return False
            if not self.live(subscriber.patterns):
                own.joining = asyncio.create_task(self._join_shared(subscriber, own))
                return False
            self.acquire_now(subscriber.patterns)
            own.shared = True
        # Nothing between here and the end awaits: what its own subscriptions brought is
        # given, and every event from now on reaches the shared ones.
        del self._resumers[subscriber]
        self._listeners.add(subscriber)
        self._end_own(own)
        return True

    def _end_own(self, own: _Own) -> None:
        """Stop the pumps and end the subscriptions (a pump cancelled before it ran would not)."""
        for task in own.tasks:
            task.cancel()
        dropping = asyncio.create_task(self.drop_sources(own.sources))
        self._dropping.add(dropping)
        dropping.add_done_callback(self._dropping.discard)

    async def _join_shared(self, subscriber: Subscriber, own: _Own) -> None:
        """Acquire the shared subscriptions of a settled subscriber's patterns, then move it."""
        try:
            await self.acquire(subscriber.patterns)
        except Exception as exc:  # it is fed as before, by its own subscriptions
            log.info("a resumed SSE stream stays on its own subscriptions: %s", exc)
            return
        if self._resumers.get(subscriber) is not own:  # it went meanwhile
            self.release(subscriber.patterns)
            return
        own.shared = True
        self._settle(subscriber)

    def end_all(self) -> None:
        """End every listener's stream (the gateway is shutting down): ``None`` is queued."""
        for listener in [*self._listeners, *self._resumers]:
            listener.end()

    def close(self, listener: Subscriber) -> None:
        """Stop a listener; its subscriptions linger, then end if nobody else uses them."""
        own = self._resumers.pop(listener, None)
        if own is None and listener not in self._listeners:
            return
        self._listeners.discard(listener)
        self._watchers.discard(listener)
        if self.presence is not None and listener.presence_id:
            self.presence.sse_left(listener.presence_id)
        if own is not None:
            self._end_own(own)
            if not own.shared:
                return
        for pattern in listener.patterns:
            self._release(pattern)

    async def _acquire(self, pattern: str) -> None:
        sub = self._subs.get(pattern)
        if sub is not None and sub.task is not None and sub.task.done():
            # The bus subscription ended (the client closed it): start a fresh one.
            users, sub = sub.users, None
            del self._subs[pattern]
        else:
            users = 0
        if sub is None:
            sub = self._subs[pattern] = _Subscription(users=users)
            try:
                source = await self._subscribe(pattern)
            except BaseException:
                del self._subs[pattern]
                raise
            sub.task = asyncio.create_task(self._pump(source), name=f"sse-{pattern}")
        self._take(sub)

    @staticmethod
    def _take(sub: _Subscription) -> None:
        if sub.linger is not None:
            sub.linger.cancel()
            sub.linger = None
        sub.users += 1

    def _release(self, pattern: str) -> None:
        sub = self._subs.get(pattern)
        if sub is None:
            return
        sub.users -= 1
        if sub.users == 0:
            loop = asyncio.get_running_loop()
            sub.linger = loop.call_later(self.linger, self._drop, pattern)

    def _drop(self, pattern: str) -> None:
        sub = self._subs.get(pattern)
        if sub is not None and sub.users == 0:
            del self._subs[pattern]
            if sub.task is not None:
                sub.task.cancel()

    async def _pump(self, source: Any) -> None:
        try:
            async for message in source:
                try:
                    type_, data, mid, journal = self._render(message)
                except BusError as exc:  # one event that cannot be shown must not end the pump
                    log.warning("event dropped: cannot render it as JSON: %s", exc)
                    continue
                event = self.log.append(type_, data, mid, journal)
                if event is None:
                    continue
                for listener in list(self._listeners):
                    if listener.wants(type_):
                        listener.offer(event)
        finally:
            with contextlib.suppress(Exception):
                await source.unsubscribe()

    async def shutdown(self) -> None:
        """Drop every bus subscription (listeners see no more events)."""
        subs, self._subs = self._subs, {}
        for sub in subs.values():
            if sub.linger is not None:
                sub.linger.cancel()
            if sub.task is not None:
                sub.task.cancel()
        for sub in subs.values():
            if sub.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sub.task
