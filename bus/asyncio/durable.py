"""Durable subscriptions: resuming from the broker's journal (PROTOCOL.md 5.14).

:class:`Resuming` is mixed into :class:`bus.asyncio.subscriptions.Subscriptions` (and so into the
client). A durable subscription keeps a position, the journal sequence number of the last event
it was given; it catches up from the journal in batches, each once it has room, while the live
events that arrive meanwhile are held and then given in order, none twice.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final

from bus.asyncio.transport import Transport
from bus.discovery.topics import matches
from bus.errors import BusError, DisconnectedError, NakError, RequestTimeout
from bus.message.message import Message

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.subscription import Subscription

__all__ = ["RESUME_RETRY_FIRST", "RESUME_RETRY_MAX", "Resuming", "retryable"]

log = logging.getLogger("bus.client")

#: Seconds between attempts to resume a durable subscription the bus does not answer for: the
#: first, doubling up to the last.
RESUME_RETRY_FIRST: Final = 0.5
RESUME_RETRY_MAX: Final = 5.0


def retryable(exc: BusError) -> bool:
    """Whether asking again may succeed: no answer in time, or a 5xx NAK (JetStream without a
    leader answers 503); not a refusal of what was asked (a bad pattern or position)."""
    if isinstance(exc, RequestTimeout):
        return True
    return isinstance(exc, NakError) and (exc.rcd or 0) >= 500


class Resuming:
    """Catching durable subscriptions up from the journal (a mixin of the client's
    :class:`~bus.asyncio.subscriptions.Subscriptions`)."""

    timeout: float
    _subs: dict[str, list[Subscription]]
    _connected: bool
    _transport: Transport | None

    async def _catch_up(
        self,
        sub: Subscription,
        after: int,
        since_time: float | None,
        *,
        first: bool = False,
        from_end: bool = False,
        last: bool = False,
    ) -> None:
        """Ask the broker for the journal's events after ``after`` in batches, each once this
        subscription has room for it; the last batch comes with the live subscription. Live
        events arriving meanwhile are held, then given in order, none twice.

        ``first`` (``subscribe()`` waits for it): only the first batch is awaited; the rest is
        asked for by a task (``sub.catch_up``), as the caller can read the subscription, and
        so make room, only once ``subscribe()`` has returned it. ``last`` (with ``first``):
        the last event of each type first, instead of a batch (PROTOCOL.md 5.15).
        """
        transport = self._transport
        if transport is None:
            raise DisconnectedError("not connected")
        args: dict[str, Any] = {"pattern": sub.key, "since": after}
        if sub.relay:
            args["relay"] = True  # presence leaves it out (PROTOCOL.md 5.16)
        if since_time is not None:
            args["sinceTime"] = since_time
        elif from_end:
            args["fromEnd"] = True  # nothing from before: live, from the journal's end
        elif first and last:
            args["last"] = True  # the last event of each type, then live
        while True:
            ack = await transport.call("manage.subscribe", args, self.timeout)
            answer = ack.payload_data() if ack.payload is not None else {}
            answer = answer if isinstance(answer, dict) else {}
            seq = answer.get("seq")
            complete = not sub._held_overflow  # every event of the batch was taken
            if complete and isinstance(seq, int) and (sub.position is None or seq > sub.position):
                sub.position = seq  # what the batch read past (other types) is passed too
            args = {"pattern": sub.key, "since": sub.position or 0}
            if sub.relay:
                args["relay"] = True
            if answer.get("more") or sub._held_overflow:
                sub._held.clear()  # what was held comes again from the journal
                sub._held_overflow = False
                if first:  # subscribe() returns: its caller must read before there is room
                    loop = asyncio.get_running_loop()
                    sub.catch_up = loop.create_task(self._resume_one(sub, after_room=True))
                    return
                await self._batch_room(sub)
                continue
            break
        sub.catching_up = False  # from here, synchronously: the held events, in order
        held, sub._held = sub._held, []
        for message in held:
            self._give(sub, message, message.seq)

    @staticmethod
    async def _batch_room(sub: Subscription) -> None:
        """Until the reader has taken the batch before the next (half the queue is free)."""
        while sub.pending() > sub.queue_size // 2 and not sub._ended:
            await asyncio.sleep(0.01)

    def _give(self, sub: Subscription, message: Message, seq: int | None) -> None:
        """One event to a durable subscription: skipped when its position has passed it; when
        the subscription is full, it catches up from the journal instead of dropping it."""
        if seq is not None and sub.position is not None and seq <= sub.position:
            return
        if sub.catching_up:
            if len(sub._held) < sub.queue_size:
                sub._held.append(message)
            else:
                sub._held_overflow = True
            return
        if len(sub._items) >= sub.queue_size and seq is not None:
            self._start_catch_up(sub)  # not read fast enough: the journal keeps it
            return
        if sub._put(message) and seq is not None:
            sub.position = seq

    def _start_catch_up(self, sub: Subscription) -> None:
        if sub.catching_up or sub._ended:
            return
        sub.catching_up = True
        sub.resumes += 1
        sub.catch_up = asyncio.get_running_loop().create_task(self._resume_one(sub))

    async def _resume_one(self, sub: Subscription, after_room: bool = False) -> None:
        """Catch ``sub`` up from its position, tried again while the bus does not answer (a
        JetStream electing a leader) until it succeeds, the link goes (the reconnection
        resumes it) or the subscription ends."""
        delay, failures = RESUME_RETRY_FIRST, 0
        try:
            if after_room:
                await self._batch_room(sub)
            while True:
                if not self._connected or sub._ended:
                    sub.catching_up = False  # the reconnection resumes it
                    return
                start = sub.start_time if sub.position is None else None
                try:
                    await self._catch_up(sub, sub.position or 0, start)
                except BusError as exc:
                    if isinstance(exc, DisconnectedError):
                        raise
                    if not retryable(exc):
                        self._not_resumed(sub, exc)
                        return
                    failures += 1
                    log.log(
                        logging.WARNING if failures == 1 else logging.DEBUG,
                        "could not resume %r from the journal yet (%s): trying again",
                        sub.key,
                        exc,
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RESUME_RETRY_MAX)
                    continue
                if failures:
                    log.info(
                        "%r resumed from the journal after %d attempt(s)", sub.key, failures + 1
                    )
                return
        except DisconnectedError:
            pass  # the link went again: the next reconnection resumes it

    def _not_resumed(self, sub: Subscription, error: BusError) -> None:
        """The broker cannot resume it (it came back without a journal, or the read failed):
        what was published while the link was down is missed, so the subscription counts the
        gap and says why, then goes on live (the reconnection restored its pattern) with what
        arrived meanwhile, in order; the next reconnection tries to resume again."""
        why = f"could not resume from the journal: {error}"
        log.warning("subscription %r %s; events published meanwhile are missed", sub.key, why)
        sub.gaps += 1
        sub.last_gap = why
        sub.catching_up = False
        held, sub._held = sub._held, []
        sub._held_overflow = False
        for message in held:
            self._give(sub, message, message.seq)

    def _on_event_resuming(self, message: Message) -> None:
        """An event while durable subscriptions exist: a replayed one (``RPL``) goes only to
        the durable subscriptions of its pattern; a live one waits for nobody catching up (the
        journal brings it to them in order); a durable subscription never takes a sequence
        number it has passed."""
        grp = message.grp or ""
        replayed = message.rpl
        seq = message.seq
        for pattern, subs in self._subs.items():
            if replayed is not None and pattern != replayed:
                continue
            if replayed is None and not matches(pattern, grp):
                continue
            for sub in subs:
                if not sub.durable:
                    if replayed is None:
                        sub._put(message)
                elif replayed is not None and not sub.catching_up and self._streamed():
                    self._give(sub, message, seq)  # a stream consumer's event (10.1)
                elif replayed is not None:  # the batch this subscription asked for
                    if sub._held_overflow or seq is None:
                        continue  # full: the rest of the batch comes again from its position
                    if sub.position is None or seq > sub.position:
                        if len(sub._items) < sub.queue_size and sub._put(message):
                            sub.position = seq
                        else:
                            sub._held_overflow = True
                elif seq is not None or not self._streamed():
                    self._give(sub, message, seq)  # (streamed: its consumer brings it)

    def _streamed(self) -> bool:
        return self._transport is not None and self._transport.streams
