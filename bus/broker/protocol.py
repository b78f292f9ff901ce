"""One broker connection as a sans-I/O state machine (``docs/PROTOCOL.md`` sections 4 and 5).

Bytes go in with :meth:`BrokerConnection.receive_data`, events come out of
:meth:`BrokerConnection.next_event`, and bytes to write come out of
:meth:`BrokerConnection.data_to_send`. Time is an argument (``now``, seconds on any monotonic
clock) and nonces come from a callable, so the machine does no I/O and reads no clock.

Every state change goes through :data:`TRANSITIONS`::

    AWAIT_CONNECT --connect (hmac-sha256)--> CHALLENGED --auth ok--> AUTHENTICATED
    AWAIT_CONNECT --connect (sha256, open) ok-------------------> AUTHENTICATED
    AUTHENTICATED --accept (the driver registered it)--> READY --message--> READY
    any state --close (refusal, timeout, protocol error, peer Disconnect, shutdown)--> CLOSED

Nothing is routed before READY: a message in an earlier state that is not the expected
connect step is refused (NAK 401, Disconnect AUTHENTICATION_FAILURE).

This module holds the connection core (input, events, the data path, output, time and
closing); the states, the table and the events are in :mod:`bus.broker.states`, the handshake
steps and :class:`Authority` in :mod:`bus.broker.handshake` (re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, Literal

from bus.broker.handshake import CONNECT_COMMANDS, RCD_UNAUTHORIZED, Authority, Handshake, _Refusal
from bus.broker.stamp import Stamper
from bus.broker.states import (
    TRANSITIONS,
    Authenticated,
    AuthMode,
    Closed,
    ConnEvent,
    Inbound,
    State,
    Step,
)
from bus.errors import DecodeError, ProtocolError
from bus.frame.codec import Limits
from bus.frame.enums import CloseReason
from bus.link import auth, wire
from bus.link.wire import NEED_DATA, NeedData
from bus.message.message import Message, encode_message, read_message

__all__ = [
    "CONNECT_COMMANDS",
    "RCD_UNAUTHORIZED",
    "TRANSITIONS",
    "AuthMode",
    "Authenticated",
    "Authority",
    "BrokerConnection",
    "Closed",
    "ConnEvent",
    "Inbound",
    "State",
    "Step",
]

#: Looked up once: an enum member read from its class costs a metaclass lookup, and the data
#: path asks for this one on every message.
_READY: Final = State.READY


# --- the connection ----------------------------------------------------------------------------


class BrokerConnection(Handshake):
    """The broker's side of one connection.

    Args:
        authority: shared credentials and replay memory.
        now: the time the socket was accepted.
        ping_interval: seconds between our Pings; silence of 1.5 intervals closes (TIMEOUT).
        connect_timeout: seconds allowed from accept to the end of the handshake.
        max_message_size: largest message accepted (bigger: Disconnect PROTOCOL_ERROR).
        max_handshake_bytes: largest message accepted before the link is READY: a stranger
            cannot make the broker buffer a megabyte per socket before it says who it is.
        certificate_name: the name of the client certificate TLS verified on this link (None:
            no TLS, or no client certificate); ``mode=tls`` logs in as it.
        nonce: makes the server nonce of the challenge (default :func:`bus.link.auth.new_nonce`).
    """

    def __init__(
        self,
        authority: Authority,
        now: float,
        *,
        ping_interval: float = 5.0,
        connect_timeout: float = 5.0,
        max_message_size: int = 1024 * 1024,
        max_handshake_bytes: int = 16 * 1024,
        certificate_name: str | None = None,
        nonce: Callable[[], bytes] = auth.new_nonce,
    ) -> None:
        self.authority = authority
        self.state = State.AWAIT_CONNECT
        self.ping_interval = ping_interval
        self.connect_timeout = connect_timeout
        self.max_message_size = max_message_size
        self._nonce = nonce
        self._decoder = wire.WireDecoder(max_message=min(max_message_size, max_handshake_bytes))
        self._limits = Limits(max_size=max_message_size)
        self._out: list[bytes] = []
        self._opened = now
        self._last_received = now
        self._last_ping = now
        self._last_echo = -math.inf
        self._pending: Closed | None = None
        self.office = ""
        self.inbox = ""
        self.mode: AuthMode | None = None
        self._connect: Message | None = None
        self._client_nonce = b""
        self._server_nonce = b""
        self._stamper: Stamper | None = None
        self.certificate_name = certificate_name

    # -- transitions -------------------------------------------------------------------------

    def _step(self, step: Step) -> None:
        target = TRANSITIONS.get((self.state, step))
        if target is None:
            raise ProtocolError(f"{step.name} not allowed in state {self.state.name}")
        self.state = target

    # -- input -------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Buffer bytes read from the socket (an empty ``data`` means the peer closed)."""
        self._last_received = now
        if not data:
            self._close(CloseReason.SOCKET_ERROR, "the peer closed the socket", by_peer=True)
            return
        if self.state is not State.CLOSED:
            self._decoder.receive_data(data)

    def next_event(self) -> ConnEvent | Literal[NeedData.NEED_DATA]:
        """The next event, or :data:`~bus.link.wire.NEED_DATA`.

        Returns:
            :class:`Authenticated`, :class:`Inbound`, :class:`Closed` (once), or NEED_DATA.
        """
        while True:
            if self._pending is not None:
                event, self._pending = self._pending, None
                return event
            if self.state is State.CLOSED or self.state is State.AUTHENTICATED:
                return NEED_DATA  # AUTHENTICATED: wait for accept/refuse before reading on
            try:
                wire_event = self._decoder.next_event()
            except ProtocolError as exc:
                self._close(exc.close_reason, exc.reason)
                continue
            if wire_event is NEED_DATA:
                return NEED_DATA
            result = self._handle(wire_event)
            if result is not None:
                return result

    def next_messages(self) -> list[bytes]:
        """The bodies received next on a READY connection, each to be read with
        :meth:`read_routable`: what :meth:`next_event` gives one by one, without a wire event
        each (:meth:`bus.link.wire.WireDecoder.next_messages`). Empty when next_event has something
        else first."""
        if self._pending is not None or self.state is not _READY:
            return []
        return self._decoder.next_messages()

    def read_routable(self, raw: bytes) -> tuple[Message, bytes] | None:
        """A body from :meth:`next_messages` as :meth:`next_event` gives it (an
        :class:`Inbound`'s message and bytes, without the event object: every routed message
        passes here); None when the connection is closed, or this body closed it (next_event
        gives the Closed)."""
        if self.state is not _READY:
            return None
        return self._routable(raw)

    def _handle(self, event: wire.WireEvent) -> ConnEvent | None:
        if isinstance(event, wire.MessageReceived):
            return self._message(event.data)
        if isinstance(event, wire.DisconnectReceived):
            self._close(event.reason, f"peer sent Disconnect {event.reason.name}", by_peer=True)
        elif isinstance(event, wire.PingReceived) and (
            self._last_received - self._last_echo >= self.ping_interval / 2
        ):
            # DtronixMQ's server echoes a client's Ping (seed 002); at most one echo per half
            # interval, so two peers that both echo cannot bounce a Ping between them forever.
            self._last_echo = self._last_received
            self._out.append(wire.encode_ping())
        return None  # its arrival already counted as life; Mq/Rpc commands: not ours

    def _message(self, raw: bytes) -> ConnEvent | None:
        if self.state is _READY:
            routable = self._routable(raw)
            return None if routable is None else Inbound(*routable)
        try:
            message = read_message(raw, self._limits)
        except DecodeError as exc:
            self._close(CloseReason.PROTOCOL_ERROR, f"undecodable message: {exc}")
            return None
        try:
            if self.state is State.AWAIT_CONNECT:
                return self._on_connect(message)
            return self._on_auth(message)
        except _Refusal as refusal:
            self.refuse(message, str(refusal))
            return None

    def _routable(self, raw: bytes) -> tuple[Message, bytes] | None:
        try:
            # Only the header is read (bus/message/header.py); the router forwards the bytes as they
            # are.
            message = read_message(raw, self._limits)
        except DecodeError as exc:
            self._close(CloseReason.PROTOCOL_ERROR, f"undecodable message: {exc}")
            return None
        # SRC and CLR name who sent it (5.11): a forged one is overwritten here.
        stamper = self._stamper
        if stamper is not None:
            message, raw = stamper.stamp(message, raw)
            if len(raw) > self.max_message_size:
                self._close(
                    CloseReason.PROTOCOL_ERROR,
                    f"message of {len(raw)} bytes with SRC stamped exceeds "
                    f"max_message_size {self.max_message_size}",
                )
                return None
        return message, raw

    # -- output ------------------------------------------------------------------------------

    def send_message(self, message: Message) -> None:
        """Queue a message for this connection (control replies; routed bytes go direct)."""
        self._queue_message(message)

    def _queue_message(self, message: Message) -> None:
        self._out.append(wire.encode_message(encode_message(message)))

    def data_to_send(self) -> bytes:
        """Bytes to write now (and forget)."""
        data = b"".join(self._out)
        self._out.clear()
        return data

    # -- time and closing --------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Advance time: send a Ping every interval; close a silent or too slow peer (TIMEOUT)."""
        if self.state is State.CLOSED:
            return
        if self.state is not State.READY and now - self._opened > self.connect_timeout:
            self.refuse(None, "no manage.connect within the deadline", reason=CloseReason.TIMEOUT)
            return
        if now - self._last_received > 1.5 * self.ping_interval:
            self._close(CloseReason.TIMEOUT, "silent for 1.5 ping intervals")
            return
        if now - self._last_ping >= self.ping_interval:
            self._last_ping = now
            self._out.append(wire.encode_ping())

    def close(self, reason: CloseReason, detail: str) -> None:
        """Close from our side (shutdown, eviction): queue Disconnect; a Closed event follows."""
        self._close(reason, detail)

    def _close(self, reason: CloseReason, detail: str, by_peer: bool = False) -> None:
        if self.state is State.CLOSED:
            return
        self._step(Step.CLOSE)
        if not by_peer:
            self._out.append(wire.encode_disconnect(reason))
        self._pending = Closed(reason, detail, by_peer)

    @property
    def stamper(self) -> Stamper | None:
        """How messages from this link are stamped (SRC, CLR); None until it is READY."""
        return self._stamper

    @property
    def limits(self) -> Limits:
        """The decoder limits a message on this connection must meet."""
        return self._limits

    @property
    def ready(self) -> bool:
        """True once the handshake succeeded and until the connection closes."""
        return self.state is _READY
