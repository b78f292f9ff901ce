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
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, TypeAlias

from bus import auth, wire
from bus.broker.stamp import Stamper
from bus.codec import Limits
from bus.enums import CloseReason, Encoding
from bus.errors import DecodeError, ProtocolError
from bus.frame import U32, DataFrame
from bus.message import Message, encode_message, read_message
from bus.wire import NEED_DATA, NeedData

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

RCD_UNAUTHORIZED: Final = 401
CONNECT_COMMANDS: Final = ("manage.connect", "manage.reconnect")
_ANONYMOUS: Final = "anonymous"
#: What an unknown post office's proof is checked against (and always refused).
_NO_SECRET: Final = b"\x00" * 32


class State(Enum):
    """Where a connection is in its life."""

    AWAIT_CONNECT = "AWAIT_CONNECT"
    CHALLENGED = "CHALLENGED"
    AUTHENTICATED = "AUTHENTICATED"
    READY = "READY"
    CLOSED = "CLOSED"


class Step(Enum):
    """What happened, as the transition table knows it."""

    CHALLENGE = "CHALLENGE"  # a valid hmac-sha256 connect: challenge sent
    VERIFIED = "VERIFIED"  # credentials checked
    ACCEPT = "ACCEPT"  # the driver registered the connection; accept reply sent
    MESSAGE = "MESSAGE"  # a message to route or a control command
    CLOSE = "CLOSE"


#: The one table of allowed transitions. A step missing from it for the current state is a
#: refusal (before READY) or a programming error (after).
TRANSITIONS: Final[Mapping[tuple[State, Step], State]] = {
    (State.AWAIT_CONNECT, Step.CHALLENGE): State.CHALLENGED,
    (State.AWAIT_CONNECT, Step.VERIFIED): State.AUTHENTICATED,
    (State.CHALLENGED, Step.VERIFIED): State.AUTHENTICATED,
    (State.AUTHENTICATED, Step.ACCEPT): State.READY,
    (State.READY, Step.MESSAGE): State.READY,
    **{(state, Step.CLOSE): State.CLOSED for state in State if state is not State.CLOSED},
}


class AuthMode(Enum):
    """How a client authenticates (the ``mode`` field of ``manage.connect``)."""

    HMAC = "hmac-sha256"  # default: mutual challenge-response (4.1)
    SHA256 = "sha256"  # MOP's authenticator, each id accepted once
    OPEN = "open"  # no secret; only when the broker runs with open=True
    TLS = "tls"  # the post office named by the link's verified client certificate (4.4)


#: Looked up once: an enum member read from its class costs a metaclass lookup, and the data
#: path asks for this one on every message.
_READY: Final = State.READY


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Credentials checked; the driver registers the connection, then ``accept`` or ``refuse``.

    Attributes:
        office: the post office name.
        inbox: the reply group the client asked for.
        mode: how it authenticated.
    """

    office: str
    inbox: str
    mode: AuthMode


@dataclass(frozen=True, slots=True)
class Inbound:
    """A message received on a READY connection: to route, or a ``manage.*`` command.

    Attributes:
        message: the decoded message (its header fields).
        raw: the exact bytes received, forwarded as they are.
    """

    message: Message
    raw: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The connection is over; write :meth:`BrokerConnection.data_to_send`, then close.

    Attributes:
        reason: the close reason (sent to the peer unless ``by_peer``).
        detail: why, in words, for the log.
        by_peer: the peer sent Disconnect (or the socket ended).
    """

    reason: CloseReason
    detail: str
    by_peer: bool = False


ConnEvent: TypeAlias = Authenticated | Inbound | Closed


# --- shared authentication state --------------------------------------------------------------


class Authority:
    """What every connection of one broker checks credentials against (sans-I/O, shared).

    Args:
        offices: post office name -> shared secret.
        open_mode: accept ``mode=open`` for names without a secret.
        replay_memory: how many accepted connect ids to remember (oldest forgotten first).
        gateways: post offices trusted to set CLR for the callers they act for (5.11).
    """

    def __init__(
        self,
        offices: Mapping[str, str],
        open_mode: bool = False,
        replay_memory: int = 100_000,
        gateways: frozenset[str] = frozenset(),
    ) -> None:
        self.offices = dict(offices)
        self.gateways = frozenset(gateways)
        self.open_mode = open_mode
        self.replay_memory = replay_memory
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._seen_offices: set[str] = set()

    def secret(self, office: str) -> bytes | None:
        """The office's secret as bytes (UTF-8), or None if it has none."""
        secret = self.offices.get(office)
        return None if secret is None else secret.encode("utf-8")

    def id_used(self, office: str, message_id: str) -> bool:
        """Whether this connect id was already accepted for this office."""
        return (office, message_id) in self._ids

    def remember_id(self, office: str, message_id: str) -> None:
        """Record an accepted connect id so it is never accepted again."""
        self._ids[(office, message_id)] = None
        while len(self._ids) > self.replay_memory:
            self._ids.popitem(last=False)

    def first_time(self, office: str) -> bool:
        """True the first time an office is accepted since the broker started (MOP's
        ``manage.connect`` versus ``manage.reconnect`` reply)."""
        if office in self._seen_offices:
            return False
        self._seen_offices.add(office)
        return True


class _Refusal(Exception):
    """Internal: refuse the handshake with this MSG (NAK 401, Disconnect AUTHENTICATION_FAILURE)."""


# --- the connection ----------------------------------------------------------------------------


class BrokerConnection:
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
        nonce: makes the server nonce of the challenge (default :func:`bus.auth.new_nonce`).
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
        """The next event, or :data:`~bus.wire.NEED_DATA`.

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
        each (:meth:`bus.wire.WireDecoder.next_messages`). Empty when next_event has something
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
            # Only the header is read (bus/header.py); the router forwards the bytes as they are.
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

    # -- handshake ---------------------------------------------------------------------------

    def _on_connect(self, message: Message) -> Authenticated | None:
        if message.typ != "OAM" or message.cmd not in CONNECT_COMMANDS:
            raise _Refusal("not authenticated: the first message must be manage.connect")
        args = _payload(message)
        mode_text = str(args.get("mode", AuthMode.HMAC.value))
        try:
            mode = AuthMode(mode_text)
        except ValueError:
            raise _Refusal(f"unknown authentication mode {mode_text!r}") from None
        self.office = str(message.src or args.get("name") or "")
        self.inbox = str(args.get("inbox", ""))
        self.mode = mode
        self._connect = message
        if not self.inbox.startswith("_INBOX.") or len(self.inbox) > 255:
            raise _Refusal("manage.connect needs an inbox group named _INBOX.<id>")
        if mode is AuthMode.OPEN:
            return self._verify_open()
        if mode is AuthMode.TLS:
            return self._verify_certificate()
        secret = self.authority.secret(self.office)
        if mode is AuthMode.SHA256:
            if secret is None:
                raise _Refusal(auth.LOGIN_REFUSED)
            return self._verify_sha256(message, args, secret)
        # An unknown post office is challenged like a known one and refused at its proof, with
        # the same words as a wrong secret: a stranger cannot list the post offices.
        self._challenge(message, args)
        return None

    def _verify_open(self) -> Authenticated:
        if not self.authority.open_mode:
            raise _Refusal("open mode is disabled on this broker: a secret is required")
        if self.authority.secret(self.office or _ANONYMOUS) is not None:
            raise _Refusal(f"post office {self.office!r} has a secret: open mode refused")
        self.office = self.office or _ANONYMOUS
        self._step(Step.VERIFIED)
        return Authenticated(self.office, self.inbox, AuthMode.OPEN)

    def _verify_certificate(self) -> Authenticated:
        named = self.certificate_name
        if named is None:
            raise _Refusal(
                "mode tls needs a client certificate: the broker asks for one only with "
                "--tls-ca, over bus+tls://"
            )
        if self.office and self.office != named:
            raise _Refusal(auth.LOGIN_REFUSED)  # the certificate names another post office
        self.office = named
        self._step(Step.VERIFIED)
        return Authenticated(self.office, self.inbox, AuthMode.TLS)

    def _verify_sha256(
        self, message: Message, args: Mapping[str, object], secret: bytes
    ) -> Authenticated:
        message_id = str(message.mid or "")
        authenticator = args.get("authenticator")
        if not isinstance(authenticator, str):
            raise _Refusal("manage.connect in sha256 mode needs an authenticator")
        if not auth.verify_mop_authenticator(secret, self.office, message_id, authenticator):
            raise _Refusal(auth.LOGIN_REFUSED)
        # Checked after the authenticator so a stranger cannot probe which ids were used.
        if self.authority.id_used(self.office, message_id):
            raise _Refusal(f"message id {message_id!r} was already used: replay refused")
        self.authority.remember_id(self.office, message_id)
        self._step(Step.VERIFIED)
        return Authenticated(self.office, self.inbox, AuthMode.SHA256)

    def _challenge(self, message: Message, args: Mapping[str, object]) -> None:
        nonce = _bytes_arg(args.get("nonce"))
        if nonce is None or len(nonce) != auth.NONCE_SIZE:
            raise _Refusal(f"manage.connect needs a nonce of {auth.NONCE_SIZE} bytes")
        self._client_nonce = nonce
        self._server_nonce = self._nonce()
        reply = _control(
            message, "manage.challenge", {"nonce": _bytes_out(message, self._server_nonce)}
        )
        self._queue_message(reply)
        self._step(Step.CHALLENGE)

    def _on_auth(self, message: Message) -> Authenticated:
        if message.typ != "OAM" or message.cmd != "manage.auth":
            raise _Refusal("not authenticated: expected manage.auth after the challenge")
        proof = _bytes_arg(_payload(message).get("proof"))
        secret = self.authority.secret(self.office)
        # the proof is checked for an unknown post office too (against no secret), so the
        # refusal takes as long as for a wrong secret
        verified = proof is not None and auth.verify_client_proof(
            secret or _NO_SECRET, self.office, self._client_nonce, self._server_nonce, proof
        )
        if secret is None or not verified:
            raise _Refusal(auth.LOGIN_REFUSED)
        self._connect = message
        self._step(Step.VERIFIED)
        return Authenticated(self.office, self.inbox, AuthMode.HMAC)

    def accept(self, extra: Mapping[str, object] | None = None) -> None:
        """Answer the handshake with an ACK announcing the limits; the connection is READY.

        Args:
            extra: more payload fields for the accept reply.
        """
        assert self._connect is not None
        first = self.authority.first_time(self.office)
        payload: dict[str, object] = {
            "maxMessageSize": U32(self.max_message_size),
            "pingIntervalMS": U32(round(self.ping_interval * 1000)),
            "name": self.office,
            "inbox": self.inbox,
            "mode": self.mode.value if self.mode else "",
        }
        if self.mode is AuthMode.HMAC:
            secret = self.authority.secret(self.office) or b""
            proof = auth.server_proof(secret, self.office, self._client_nonce, self._server_nonce)
            payload["proof"] = _bytes_out(self._connect, proof)
        payload.update(extra or {})
        command = CONNECT_COMMANDS[0] if first else CONNECT_COMMANDS[1]
        self._queue_message(_reply(self._connect, "ACK", command, payload))
        self._stamper = Stamper(self.office, self.office in self.authority.gateways)
        self._decoder.max_message = self.max_message_size
        self._step(Step.ACCEPT)

    def refuse(
        self,
        message: Message | None,
        text: str,
        rcd: int = RCD_UNAUTHORIZED,
        reason: CloseReason = CloseReason.AUTHENTICATION_FAILURE,
    ) -> None:
        """Refuse: a NAK (MSG, RCD) to ``message`` if given, then Disconnect, then close."""
        target = message if message is not None else self._connect
        if target is not None:
            nak = _reply(target, "NAK", target.cmd or "", None)
            nak.frame["MSG"] = text
            nak.frame["RCD"] = rcd
            self._queue_message(nak)
        self._close(reason, text)

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
    def limits(self) -> Limits:
        """The decoder limits a message on this connection must meet."""
        return self._limits

    @property
    def ready(self) -> bool:
        """True once the handshake succeeded and until the connection closes."""
        return self.state is _READY


def _payload(message: Message) -> Mapping[str, object]:
    payload = message.payload
    return {name: payload[name] for name in payload}


def _bytes_arg(value: object) -> bytes | None:
    """A nonce or proof: bytes (ENC=FRAM), or lowercase hex text from a JSON client."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return bytes.fromhex(value)
        except ValueError:
            return None
    return None


def _bytes_out(to: Message, value: bytes) -> bytes | str:
    """Bytes for a reply: as they are in a binary frame, hex text for a JSON client."""
    return value.hex() if to.enc is Encoding.JSON else value


def _reply(to: Message, typ: str, cmd: str, payload: Mapping[str, object] | None) -> Message:
    """A reply on the same connection: RID = the message's MID, ENC kept, CMD set."""
    reply = to.reply(typ, payload=None if payload is None else DataFrame(dict(payload)))
    reply.frame["CMD"] = cmd
    return reply


def _control(to: Message, cmd: str, payload: Mapping[str, object]) -> Message:
    return _reply(to, "OAM", cmd, payload)
