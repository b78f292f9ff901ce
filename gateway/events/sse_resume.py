"""A lean SSE stream that resumes from the journal (PROTOCOL.md 9.5: ``Last-Event-ID`` with a
journal number, ``?since=``, ``?last=1``), answered in the gateway's HTTP protocol.

It is a :class:`gateway.events.sse_lean.SseStream` (the same head, events, keepalives, refusals,
overflow and shutdown, written by the connection's protocol itself); what differs is where its
events come from: bus subscriptions of its own, one per pattern
(:meth:`gateway.events.hub.EventHub.resume_sources`), each giving first what the journal holds
after the stream's position, then live events, each event once by its journal number
(:class:`gateway.events.listeners.JournalSeen`). A replay can be far longer than any queue:
while the client's transport is full the pumps wait, and what is still to come waits in the bus
subscriptions, instead of piling up to an ``overflow``. Once it has caught up, the hub moves it
to the app's shared subscriptions (:meth:`gateway.events.hub.EventHub.attach_resuming`): from
then on it is fed as any other stream, and its ``offer`` drops what both brought.
"""

from __future__ import annotations

import asyncio
from typing import cast

from uvicorn.server import ServerState

from gateway.events.hub import HubEvent, resume_point
from gateway.events.listeners import JournalSeen
from gateway.events.sse_lean import LeanSse, SseStream
from gateway.routes.routes_events import Subscription

__all__ = ["ResumingStream"]


class ResumingStream(SseStream):
    """One subscriber's SSE stream that resumes from the journal.

    Args:
        lean: what the app's streams share.
        ask: the checked request (it resumes: :meth:`gateway.events.hub.EventHub.resumes`).
        state: the server's state.
        line: the client and the target for the access log line (None: no access log).
    """

    __slots__ = ("seen", "_drained")

    def __init__(
        self, lean: LeanSse, ask: Subscription, state: ServerState, line: tuple[str, str] | None
    ) -> None:
        super().__init__(lean, ask, state, line)
        self.seen = JournalSeen()
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Handed the connection: its bus subscriptions are made before the head is written
        (a bus that keeps none of the types is the route's ``409``)."""
        self.transport = cast(asyncio.Transport, transport)
        self.state.connections.add(self)  # type: ignore[arg-type]  # told of a shutdown
        self.lean.join_later(self)

    async def join(self) -> None:
        """Subscribe from the journal, then start (or answer the error the route would)."""
        hub, ask = self.lean.hub, self.ask
        assert ask is not None
        start = resume_point(ask.last_id, ask.since_time, ask.last)
        try:
            sources = await hub.resume_sources(self.patterns, *start)
        except Exception as exc:
            if not self.ended:
                await self._refuse(exc)
            return
        if self.ended:  # gone, or the server shut down, meanwhile
            await hub.drop_sources(sources)
            return
        self._open()
        hub.attach_resuming(
            self, sources, caller=ask.caller, presence=ask.presence, ready=self._ready
        )

    def offer(self, event: HubEvent) -> None:
        if self.seen.first(event):
            self.notify(event)

    def _ready(self) -> asyncio.Future[None] | None:
        """None while the client reads on; else what the pumps await: the transport drained."""
        if not self.paused or self.ended:
            return None
        if self._drained is None:
            assert self.lean.loop is not None
            self._drained = self.lean.loop.create_future()
        return self._drained

    def _wake(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._wake()
