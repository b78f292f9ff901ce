"""The ``: keepalive`` comments of an app's lean SSE streams, written in one pass (PROTOCOL.md 9.5).

An idle stream owes its client a comment every ``keepalive`` seconds (so that proxies, which
commonly cut a connection after 60 s without a byte, keep it, and so that a vanished client is
found out by the write that fails). At 20,000 streams that is hundreds of writes a second, and
the write itself (a ``send`` on the stream's socket) is most of what an idle gateway does
(issue 35). :class:`StreamKeepalives` keeps the streams in a timer wheel of its own
(:class:`gateway.events.wheel.TimerWheel`) and is a single entry of the loop's
(:class:`gateway.events.keepalives.Keepalives`): when a slot is due, one loop walks its streams
and writes the comment to each that was quiet for the interval; the streams that got one go
back in one slot with one ``extend``. No call per stream beyond the write, no timer per stream.

A stream that is gone is dropped when its slot comes (it costs nothing to leave); one that sent
events meanwhile goes back in at the end of its own quiet interval; one whose client is not
reading (its transport paused writing) gets no comment: its events are waiting anyway.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from gateway.events.keepalives import PassPerSlot

__all__ = ["Quiet", "StreamKeepalives"]

log = logging.getLogger("busgate.gateway")


class Quiet(Protocol):
    """A stream as the pass sees it (:class:`gateway.events.sse_lean.SseStream`)."""

    #: No more writes: it is over (the pass forgets it).
    ended: bool
    #: The client reads nothing at the moment: no comment now.
    paused: bool
    #: ``loop.time()`` of its last write.
    quiet_since: float
    transport: asyncio.Transport | None


class StreamKeepalives(PassPerSlot[Quiet]):
    """Writes ``chunk`` to every stream quiet for ``interval`` seconds, one pass per slot.

    Args:
        interval: seconds of quiet before a stream gets ``chunk`` (the ``keepalive`` setting).
        chunk: the bytes of one keepalive, as the stream's body carries them.
    """

    __slots__ = ("chunk",)

    def __init__(self, interval: float, chunk: bytes) -> None:
        super().__init__(interval)
        self.chunk = chunk

    def keepalive_due(self, now: float) -> float | None:
        """The pass (the loop's wheel calls it when the earliest slot is due): the comment to
        each stream quiet since ``now - interval``; when to be called again (None: no stream)."""
        wheel, interval, chunk = self.wheel, self.interval, self.chunk
        since = now - interval
        again: list[Quiet] = []
        for stream in wheel.pop_due(now):
            if stream.ended:
                continue
            quiet_since = stream.quiet_since
            if quiet_since > since:  # it wrote meanwhile: its own interval from then
                wheel.add(stream, quiet_since + interval)
                continue
            transport = stream.transport
            if transport is not None and not stream.paused:
                try:
                    transport.write(chunk)
                except Exception:  # one broken transport must cost that stream alone
                    log.exception("keepalive write to %r failed", stream)
                    continue
            stream.quiet_since = now
            again.append(stream)
        if again:
            wheel.add_all(again, now + interval)
        return self.next_due()
