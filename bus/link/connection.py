"""The client's side of one broker link as a sans-I/O state machine (``docs/PROTOCOL.md`` 4-5).

The mirror of :mod:`bus.broker.protocol`: bytes in with :meth:`ClientConnection.receive_data`,
events out of :meth:`ClientConnection.next_event`, bytes to write out of
:meth:`ClientConnection.data_to_send`. Time is an argument (``now``, seconds on any monotonic
clock) and nonces and ids come from callables, so the machine does no I/O and reads no clock;
:mod:`bus.asyncio.transport` drives it over a socket.

Every state change goes through :data:`TRANSITIONS`::

    CONNECTING --connect sent--> AWAIT_ANSWER --challenge: auth sent--> CHALLENGED
    AWAIT_ANSWER or CHALLENGED --accepted (server proof checked)--> READY --message--> READY
    any state --refused, Disconnect, silence, protocol error, close--> CLOSED

Events: :class:`Accepted` (once, with the :class:`SessionInfo`), :class:`Received` (a message
body, READY only), :class:`Closed` (once; ``error`` says what to raise in the handshake).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Literal, TypeAlias

from bus.errors import AuthError, BusError, ConnectError, ProtocolError
from bus.frame.enums import CloseReason, CommandKind
from bus.frame.frame import DataFrame
from bus.link import auth, wire
from bus.link.receipts import decode_receipt
from bus.link.wire import NEED_DATA, NeedData
from bus.message.ids import new_id
from bus.message.message import Message, MessageType, encode_message, read_message

__all__ = [
    "DEFAULT_PING_INTERVAL",
    "TRANSITIONS",
    "Accepted",
    "ClientConnection",
    "ClientEvent",
    "ClientState",
    "ReceiptReceived",
    "Closed",
    "Received",
    "SessionInfo",
    "control_message",
]

#: Seconds between Pings until the broker's accept names its own (``pingIntervalMS``).
DEFAULT_PING_INTERVAL: Final = 5.0
_DEFAULT_MAX_MESSAGE: Final = 1024 * 1024


@dataclass(frozen=True)
class SessionInfo:
    """What the other side announced when it accepted the link.

    Attributes:
        name: the post office name we are connected as.
        inbox: our reply group.
        max_message_size: largest message the broker accepts.
        ping_interval: seconds between pings.
        first: True when the broker saw this post office for the first time since it started
            (MOP's ``manage.connect`` reply; False is ``manage.reconnect``).
    """

    name: str
    inbox: str
    max_message_size: int
    ping_interval: float
    first: bool = True


class ClientState(Enum):
    """Where the link is in its life."""

    CONNECTING = "CONNECTING"
    AWAIT_ANSWER = "AWAIT_ANSWER"
    CHALLENGED = "CHALLENGED"
    READY = "READY"
    CLOSED = "CLOSED"


class _Step(Enum):
    SEND_CONNECT = "SEND_CONNECT"
    CHALLENGE = "CHALLENGE"
    ACCEPT = "ACCEPT"
    MESSAGE = "MESSAGE"
    CLOSE = "CLOSE"


#: The one table of allowed transitions.
TRANSITIONS: Final[Mapping[tuple[ClientState, _Step], ClientState]] = {
    (ClientState.CONNECTING, _Step.SEND_CONNECT): ClientState.AWAIT_ANSWER,
    (ClientState.AWAIT_ANSWER, _Step.CHALLENGE): ClientState.CHALLENGED,
    (ClientState.AWAIT_ANSWER, _Step.ACCEPT): ClientState.READY,
    (ClientState.CHALLENGED, _Step.ACCEPT): ClientState.READY,
    (ClientState.READY, _Step.MESSAGE): ClientState.READY,
    **{(s, _Step.CLOSE): ClientState.CLOSED for s in ClientState if s is not ClientState.CLOSED},
}


@dataclass(frozen=True, slots=True)
class Accepted:
    """The broker accepted the link: from now on messages flow.

    Attributes:
        info: what it announced.
    """

    info: SessionInfo


@dataclass(frozen=True, slots=True)
class Received:
    """A message body received on a READY link (decode it with ``read_message``).

    Attributes:
        raw: the body, as it came.
    """

    raw: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The link is over; write :meth:`ClientConnection.data_to_send`, then close the socket.

    Attributes:
        reason: the close reason (sent to the broker unless ``by_peer``).
        detail: why, in words.
        by_peer: the broker sent Disconnect or closed the socket.
        error: during the handshake, what the connecting caller should raise.
    """

    reason: CloseReason
    detail: str
    by_peer: bool = False
    error: BusError | None = None


@dataclass(frozen=True, slots=True)
class ReceiptReceived:
    """A publish receipt (PROTOCOL.md 5.12, :mod:`bus.link.receipts`) on a READY link.

    Attributes:
        count: events of this link the broker has taken (cumulative).
        seq: the broker journal's last sequence number then (0: no journal).
    """

    count: int
    seq: int


ClientEvent: TypeAlias = Accepted | Received | Closed | ReceiptReceived


def control_message(cmd: str, args: Mapping[str, Any], mid: str | None = None) -> Message:
    """A ``manage.*`` command for the broker (TYP=OAM, the arguments in PLD)."""
    frame = DataFrame()
    frame.add("MID", mid or new_id())
    frame.add("TYP", MessageType.OAM.value)
    frame.add("CMD", cmd)
    frame.add("PLD", DataFrame(dict(args)))
    return Message(frame)


class ClientConnection:
    """The client's side of one link.

    Args:
        name: the post office name (``""``: anonymous in open mode).
        secret: its secret (``None``: open mode).
        inbox: the reply group to ask for (``_INBOX.<id>``).
        mode: ``hmac-sha256`` (default with a secret), ``sha256`` (MOP's authenticator) or
            ``open`` (default without one).
        reconnect: send ``manage.reconnect`` instead of ``manage.connect`` (MOP).
        now: the time the socket connected.
        id_source: makes the connect id (default: a new UUID).
        nonce: makes the client nonce of the challenge (default :func:`bus.link.auth.new_nonce`).
    """

    def __init__(
        self,
        *,
        name: str,
        secret: str | None,
        inbox: str,
        now: float,
        mode: str | None = None,
        reconnect: bool = False,
        id_source: Callable[[], str] = new_id,
        nonce: Callable[[], bytes] = auth.new_nonce,
    ) -> None:
        self.name = name
        self.secret = (secret or "").encode("utf-8")
        self.mode = mode or ("hmac-sha256" if secret is not None else "open")
        self.inbox = inbox
        self.reconnect = reconnect
        self.state = ClientState.CONNECTING
        self.info: SessionInfo | None = None
        self.ping_interval = DEFAULT_PING_INTERVAL
        self._id_source = id_source
        self._nonce = nonce()
        self._decoder = wire.WireDecoder()
        self._out: list[bytes] = []
        self._pending: list[ClientEvent] = []
        self._sent: Message | None = None  # the handshake message awaiting its answer
        self._last_received = now
        self._last_ping = now

    # -- transitions -------------------------------------------------------------------------

    def _step(self, step: _Step) -> None:
        target = TRANSITIONS.get((self.state, step))
        if target is None:
            raise ProtocolError(f"{step.name} not allowed in state {self.state.name}")
        self.state = target

    # -- the handshake -----------------------------------------------------------------------

    def start(self) -> None:
        """Queue ``manage.connect`` (or ``manage.reconnect``) with this mode's credentials."""
        args: dict[str, Any] = {"mode": self.mode, "inbox": self.inbox}
        mid = self._id_source()
        if self.mode == "sha256":
            args["authenticator"] = auth.mop_authenticator(self.secret, self.name, mid)
        elif self.mode == "hmac-sha256":
            args["nonce"] = self._nonce
        cmd = "manage.reconnect" if self.reconnect else "manage.connect"
        connect = control_message(cmd, args, mid)
        if self.name:
            connect.src = self.name
        self._send_handshake(connect)
        self._step(_Step.SEND_CONNECT)

    def _send_handshake(self, message: Message) -> None:
        self._sent = message
        self._out.append(wire.encode_message(encode_message(message)))

    def _answer(self, message: Message) -> None:
        sent = self._sent
        assert sent is not None
        if message.rid != sent.mid:
            raise AuthError(f"unexpected {message.typ} {message.cmd} during the handshake")
        if message.typ == MessageType.NAK.value:
            raise AuthError(f"authentication refused: {message.msg} (rcd {message.rcd})")
        if message.typ == MessageType.OAM.value and message.cmd == "manage.challenge":
            if self.state is not ClientState.AWAIT_ANSWER:
                raise AuthError("a second challenge from the broker")
            server_nonce = message.payload.get("nonce")
            if not isinstance(server_nonce, bytes):
                raise AuthError("the broker's challenge has no nonce")
            self._server_nonce = server_nonce
            proof = auth.client_proof(self.secret, self.name, self._nonce, server_nonce)
            self._send_handshake(control_message("manage.auth", {"proof": proof}))
            self._step(_Step.CHALLENGE)
            return
        payload = message.payload
        if self.state is ClientState.CHALLENGED:
            server = payload.get("proof")
            if not isinstance(server, bytes) or not auth.verify_server_proof(
                self.secret, self.name, self._nonce, self._server_nonce, server
            ):
                raise AuthError("the broker failed to prove it knows our secret")
        self.info = SessionInfo(
            name=str(payload.get("name", self.name)),
            inbox=str(payload.get("inbox", self.inbox)),
            max_message_size=int(payload.get("maxMessageSize", _DEFAULT_MAX_MESSAGE)),
            ping_interval=int(payload.get("pingIntervalMS", 5000)) / 1000,
            first=message.cmd != "manage.reconnect",
        )
        self.ping_interval = self.info.ping_interval
        self._step(_Step.ACCEPT)
        self._pending.append(Accepted(self.info))

    # -- input -------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Buffer bytes read from the socket (an empty ``data`` means the broker closed it)."""
        self._last_received = now
        if not data:
            self._close(CloseReason.SOCKET_ERROR, "the broker closed the socket", by_peer=True)
        elif self.state is not ClientState.CLOSED:
            self._decoder.receive_data(data)

    def next_event(self) -> ClientEvent | Literal[NeedData.NEED_DATA]:
        """The next event, or :data:`~bus.link.wire.NEED_DATA`."""
        while True:
            if self._pending:
                return self._pending.pop(0)
            if self.state is ClientState.CLOSED:
                return NEED_DATA
            try:
                event = self._decoder.next_event()
            except ProtocolError as exc:
                self._close(exc.close_reason, f"bad data from the broker: {exc.reason}")
                continue
            if event is NEED_DATA:
                return NEED_DATA
            if isinstance(event, wire.MessageReceived):
                if self.state is ClientState.READY:
                    return Received(event.data)
                self._handshake_message(event.data)
            elif isinstance(event, wire.DisconnectReceived):
                self._close(event.reason, "the broker closed the link", by_peer=True)
            elif isinstance(event, wire.CommandReceived) and self.state is ClientState.READY:
                receipt = decode_receipt(event.data)
                if receipt is not None and event.kind is CommandKind.MQ_COMMAND:
                    return ReceiptReceived(*receipt)
            # A Ping's arrival already counted as life; other Mq/Rpc commands are not ours.

    def next_messages(self) -> list[bytes]:
        """The bodies of the messages received next on a READY link, in order: what
        :meth:`next_event` would return one by one as :class:`Received` (the wire decoder's
        :meth:`~bus.link.wire.WireDecoder.next_messages`). Empty when :meth:`next_event` has
        something else first (or no accelerator cut them up): call it then."""
        if self._pending or self.state is not ClientState.READY:
            return []
        return self._decoder.next_messages()

    def _handshake_message(self, raw: bytes) -> None:
        try:
            self._answer(read_message(raw))
        except AuthError as exc:
            self._close(CloseReason.AUTHENTICATION_FAILURE, str(exc), error=exc)
        except BusError as exc:  # a body larger than any message
            self._close(CloseReason.PROTOCOL_ERROR, f"bad handshake answer: {exc}", error=exc)

    # -- output ------------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Bytes to write now (and forget)."""
        data = b"".join(self._out)
        self._out.clear()
        return data

    # -- time and closing --------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Advance time: a Ping every half interval; close after 1.5 silent intervals."""
        if self.state is ClientState.CLOSED:
            return
        if now - self._last_received > 1.5 * self.ping_interval:
            self._close(CloseReason.TIMEOUT, "the broker was silent for 1.5 ping intervals")
        elif self.state is ClientState.READY and now - self._last_ping >= self.ping_interval / 2:
            self._last_ping = now
            self._out.append(wire.encode_ping())

    def close(self, reason: CloseReason, detail: str) -> None:
        """Close from our side: queue Disconnect; a :class:`Closed` event follows."""
        self._close(reason, detail)

    def _close(
        self, reason: CloseReason, detail: str, by_peer: bool = False, error: BusError | None = None
    ) -> None:
        if self.state is ClientState.CLOSED:
            return
        handshaking = self.state is not ClientState.READY
        self._step(_Step.CLOSE)
        if not by_peer:
            self._out.append(wire.encode_disconnect(reason))
        if handshaking and error is None:
            error = _handshake_error(reason, detail)
        self._pending.append(Closed(reason, detail, by_peer, error))


def _handshake_error(reason: CloseReason, detail: str) -> BusError:
    """What a caller waiting for the link should raise when it closes before READY."""
    if reason is CloseReason.CONNECTION_REFUSED:
        return ConnectError(
            "the broker refused the connection (it is full, or this address is refused for a "
            "while: too many failed logins or sockets not logged in)"
        )
    if reason is CloseReason.TIMEOUT:
        return ConnectError("the handshake did not finish before the broker's deadline")
    return AuthError(
        f"the broker closed the link during the handshake: {detail} (close reason {reason.name})"
    )
