"""The client's side of publish receipts (PROTOCOL.md 5.12), mixed into :class:`Client`.

The sans-I/O window is :class:`bus.link.receipts.Outbox`; this mixin wires it to the links: every
event written on a link is kept until the broker's receipt covers it; a publish waits while the
window is full; after a reconnection (subscriptions restored first) the events the lost link
left unreceipted are resent, oldest first, before the buffer, except those the broker says it
already journaled (``manage.receipts``); an event that can no longer be delivered is reported:
to ``on_publish_failed`` when one is set, else the next ``publish()`` or ``flush()`` raises
:class:`~bus.errors.PublishFailedError` carrying it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from bus.asyncio.transport import Transport
from bus.errors import (
    BufferFullError,
    BusError,
    DisconnectedError,
    LimitError,
    NakError,
    PublishFailedError,
)
from bus.link.receipts import MAX_MIDS, Outbox, as_list
from bus.message.message import Message, MessageType, read_message

__all__ = ["FailureHandler", "Receipts"]

log = logging.getLogger("bus.client")

#: Called with the events that can no longer be delivered (5.12).
FailureHandler = Callable[[PublishFailedError], None]

_EVT = MessageType.EVT.value


class Receipts:
    """Receipts, resend and failure reports: a mixin of :class:`bus.asyncio.client.Client`."""

    timeout: float
    _connected: bool
    _transport: Transport | None
    _buffer: deque[Message]

    def _init_receipts(self, enabled: bool, window: int, on_failed: FailureHandler | None) -> None:
        """``window``: bytes of unreceipted events kept before a publish waits."""
        self.receipts = enabled
        #: Called with each :class:`PublishFailedError`; without one, the next publish() or
        #: flush() raises it.
        self.on_publish_failed = on_failed
        #: Published events reported as not delivered so far.
        self.publishes_failed = 0
        self._outbox = Outbox(window)
        self._room = asyncio.Event()
        self._failed: list[Message] = []
        self._failed_cause: BusError | None = None

    @property
    def unreceipted(self) -> int:
        """Events written or waiting for a resend that the broker has not receipted yet."""
        return len(self._outbox) + len(self._outbox.resend)

    async def _restore_receipts(self, transport: Transport) -> None:
        """On a new link, before the buffer: turn receipts on, ask which of the events the lost
        link left unreceipted the broker already has, resend the others in order."""
        outbox = self._outbox
        outbox.new_link()
        if not (self.receipts and transport.receipts):
            self._fail(_events(outbox.resend), "the link gives no receipts")
            outbox.resend.clear()
            return
        try:
            since, taken, seq = outbox.scan_from, set[str](), 0
            pending = outbox.resend_mids()
            for start in range(0, max(len(pending), 1), MAX_MIDS):
                args = {"since": since, "mids": pending[start : start + MAX_MIDS]}
                answer = await transport.call("manage.receipts", args, self.timeout)
                taken.update(as_list(answer.payload.get("taken")))
                seq = seq or int(answer.payload.get("seq", 0))
        except NakError as exc:  # a broker without receipts: what the lost link held is unknown
            self._fail(_events(outbox.resend), f"the broker gives no receipts ({exc})")
            outbox.resend.clear()
            return
        outbox.taken(taken, seq)

        def written(raw: bytes | None) -> None:
            if transport is self._transport:
                outbox.written(raw)

        def receipt(count: int, seq: int) -> None:
            if transport is self._transport:
                outbox.receipt(count, seq)
                if not outbox.full:
                    self._room.set()

        transport.on_written, transport.on_receipt = written, receipt
        while outbox.resend:
            raw = outbox.resend.popleft()
            message = read_message(raw)  # the same bytes go out again (same MID)
            try:
                await transport.send(message)
            except LimitError as exc:  # the new broker takes smaller messages
                self._fail([message], str(exc))
            except DisconnectedError:
                outbox.resend.appendleft(raw)  # nothing was written
                raise

    async def _wait_room(self) -> None:
        """Backpressure: while the window of unreceipted events is full, wait for receipts.

        Raises:
            BufferFullError: no receipt made room within the client's timeout.
        """
        outbox = self._outbox
        try:
            async with asyncio.timeout(self.timeout):  # a broker that takes nothing
                while outbox.full and self._connected:
                    self._room.clear()
                    await self._room.wait()
        except TimeoutError:
            raise BufferFullError(
                f"{len(outbox)} published events ({outbox.window} bytes) have waited "
                f"{self.timeout:g} s for the broker's receipt"
            ) from None

    def _fail_all(self, why: str) -> None:
        """The client ends: every unreceipted or buffered event is reported."""
        outbox = self._outbox
        outbox.new_link()
        events = _events(outbox.resend)
        outbox.resend.clear()
        events += [m for m in self._buffer if m.typ == _EVT and m.rpy is None]
        self._fail(events, why)

    def _fail(self, events: list[Message], why: str) -> None:
        if not events:
            return
        self.publishes_failed += len(events)
        error = PublishFailedError(events, DisconnectedError(why))
        log.warning("%d published event(s) not delivered: %s", len(events), why)
        handler = self.on_publish_failed
        if handler is None:
            self._failed += events
            self._failed_cause = error.cause
            return
        try:
            handler(error)
        except Exception as exc:  # the application's handler: its failure is its own
            log.error("on_publish_failed raised %s: %s", type(exc).__name__, exc)

    def _raise_failed(self) -> None:
        """Raise what failed since the last report (no ``on_publish_failed`` handler)."""
        if self._failed:
            events, self._failed = self._failed, []
            cause = self._failed_cause or DisconnectedError("not delivered")
            raise PublishFailedError(events, cause)


def _events(raws: deque[bytes]) -> list[Message]:
    return [read_message(raw) for raw in raws]
