"""Publishing: events to their subscribers, confirmed or not, and flush (PROTOCOL.md 5.12).

:class:`Publishing` is mixed into :class:`bus.asyncio.client.Client`: ``publish`` writes an
event straight to bytes on a link that takes them (``bus://``), ``publish_event`` sends one the
caller built, a confirmed publish waits for the journal's sequence number, and ``flush``
returns once the broker has routed everything sent before it. The window of unreceipted events
they wait on is :class:`bus.asyncio.receipts.Receipts`'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from bus.asyncio.requests import _Pending
from bus.errors import BusError, ConfigError, DisconnectedError, NakError, RequestTimeout
from bus.frame.enums import CloseReason
from bus.frame.frame import DataFrame
from bus.link.receipts import Outbox
from bus.message.message import Message, MessageType, encode_event, new_id, read_message

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.transport import Transport

__all__ = ["Publishing"]


class Publishing:
    """Publish and flush: a mixin of :class:`bus.asyncio.client.Client`."""

    inbox: str
    timeout: float
    reconnect: bool
    _connected: bool
    _transport: Transport | None
    _outbox: Outbox

    if TYPE_CHECKING:  # provided by Client and its other mixins

        async def send(self, message: Message) -> None: ...

        def _check_open(self) -> None: ...

        def _hold(self, message: Message) -> None: ...

        def _raise_failed(self) -> None: ...

        async def _wait_room(self) -> None: ...

        @property
        def sender(self) -> str | None: ...

        # Requests' (bus.asyncio.requests): a request, and the wait for its first answer
        _send_request: Callable[..., Awaitable[_Pending]]
        _answered: Callable[..., Awaitable[tuple[Message, Message]]]

    async def publish(
        self,
        type: str,
        payload: Mapping[str, Any] | DataFrame | None = None,
        *,
        confirm: bool = False,
        timeout: float | None = None,
    ) -> int | None:
        """Publish an event (TYP=EVT) of a ``major.minor`` type to its subscribers.

        Args:
            type: the ``major.minor`` type.
            payload: the event's fields.
            confirm: wait until the broker has journaled it under its fsync policy, or the
                JetStream stream has stored it on ``nats://`` (PROTOCOL.md 5.12, 10.1). If
                the link drops first, the same message (same MID) is sent again after the
                reconnection; the broker (JetStream: ``Nats-Msg-Id``) does not store a retry
                twice.
            timeout: seconds to wait for the confirmation (default: the client's).

        Returns:
            With ``confirm``, the event's sequence number in the broker's journal (the
            stream's on ``nats://``); else None (the event is written to the link, or buffered
            while it is down, and on ``bus://`` kept until the broker receipts it: it is
            delivered or reported, PROTOCOL.md 5.12).

        Raises:
            BufferFullError, LimitError, ClosedError: as :meth:`send`; BufferFullError also
                when the window of unreceipted events stays full for ``timeout``.
            PublishFailedError: events of earlier publishes that cannot be delivered (no
                ``on_publish_failed`` handler); this event was not sent.
            NakError: ``confirm`` and the broker routed it but could not journal it (503: no
                journal, a filter leaving it out, a failed write).
            ConfigError: ``confirm`` on a transport that cannot confirm (``nats://`` to a
                server without JetStream).
            RequestTimeout: ``confirm`` and no confirmation within ``timeout``.
        """
        transport = self._transport
        if confirm or transport is None or not transport.writes_bodies:
            data = payload if payload is not None else {}
            message = (
                Message.event(type, data, reply_to=self.inbox, src=self.sender)
                if confirm  # composed as publish_event would make it
                else Message.event(type, data)
            )
            return await self.publish_event(message, confirm=confirm, timeout=timeout)
        # What publish_event and send do, with the event written straight to bytes: it is
        # built on every publish, and the link only needs its bytes (and the outbox keeps them).
        raw = encode_event(new_id(), type, payload if payload is not None else {})
        self._raise_failed()
        if self._outbox.full and self._connected:
            await self._wait_room()
        self._check_open()
        transport = self._transport  # a new one, if the link came back while we waited
        if self._connected and transport is not None:
            try:
                await transport.send_event(raw)
                return None
            except DisconnectedError:  # nothing was written
                if not self.reconnect:
                    raise
        self._hold(read_message(raw))
        return None

    async def publish_event(
        self, message: Message, *, confirm: bool = False, timeout: float | None = None
    ) -> int | None:
        """Publish an event built by the caller (the gateway's keep ENC=JSON), as
        :meth:`publish` does."""
        if not confirm:
            self._raise_failed()  # an earlier publish's events that cannot be delivered
            if self._outbox.full and self._connected:
                await self._wait_room()
            await self.send(message)
            return None
        seq, _ = await self.publish_confirmed(message, timeout=timeout)
        return seq

    async def publish_confirmed(
        self, message: Message, *, timeout: float | None = None
    ) -> tuple[int, bool]:
        """A confirmed publish of an event built by the caller: ``(seq, duplicate)``,
        ``duplicate`` when the broker (JetStream) already held its MID and answered with the
        first one's ``seq`` (PROTOCOL.md 5.12).

        Raises:
            ConfigError: the bus cannot confirm (NATS without JetStream).
            NakError: not journaled (no journal, its filter); as :meth:`publish` otherwise.
        """
        type = message.grp or ""
        if self._transport is not None and not self._transport.confirms:
            raise ConfigError(
                "a confirmed publish needs the busgate broker with a journal (bus:// and "
                "--journal) or a NATS server with JetStream (nats-server -js); this NATS "
                "server has no JetStream, so a publish is at most once"
            )
        # RPY, and SRC journaled with it: a restarted broker knows a retry (each one set only
        # when it differs: setting a field decodes a message still in its bytes)
        if message.rpy != self.inbox:
            message.rpy = self.inbox
        if message.src != self.sender:
            message.src = self.sender

        async def attempt(budget: float) -> tuple[Message, _Pending]:
            # the same message (MID) each time: the broker knows a retry
            return message, await self._send_request(message, budget, False)

        _, answer = await self._answered(attempt, type, "confirmed publish", timeout, True)
        if answer.typ == MessageType.NAK.value:
            raise NakError(answer.msg or "", answer.rcd, answer)
        data = answer.payload_data()
        return int(data["seq"]), bool(data.get("duplicate"))

    async def flush(self, timeout: float | None = None) -> int:
        """Return once the broker has routed everything this client sent before the call.

        Returns:
            The broker journal's last sequence number then (0 without a journal).

        Raises:
            DisconnectedError: the link is down; RequestTimeout: no answer within ``timeout``.
            PublishFailedError: published events that cannot be delivered (5.12), when no
                ``on_publish_failed`` handler took them.
        """
        self._check_open()
        seq = await self._flushed(self.timeout if timeout is None else timeout)
        self._raise_failed()
        return seq

    async def _flushed(self, timeout: float) -> int:
        if not self._connected or self._transport is None:
            raise DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        # manage.flush goes out behind everything sent before it, on the same link; the
        # receipt for them comes before its answer
        reply = await self._transport.call("manage.flush", {}, timeout)
        return int(reply.payload.get("seq", 0))

    async def _drain_receipts(self) -> None:
        """Before a close: wait for the receipts of what was published as long as they keep
        coming (a broker still taking a burst has lost nothing); give up after ``timeout``
        seconds in which not one came, or when the link is gone (PROTOCOL.md 5.12)."""
        left = len(self._outbox) + len(self._outbox.resend)
        while left:
            try:
                await self._flushed(self.timeout)
                return
            except RequestTimeout:
                now = len(self._outbox) + len(self._outbox.resend)
                if now >= left:
                    return  # not one receipt in a whole timeout: the caller hears of the rest
                left = now
            except BusError:
                return
