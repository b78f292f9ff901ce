"""The handshake of one broker connection (``docs/PROTOCOL.md`` section 4), sans-I/O.

:class:`Authority` holds what every connection of one broker checks credentials against;
:class:`Handshake`, mixed into :class:`bus.broker.protocol.BrokerConnection`, reads the
``manage.connect`` / ``manage.auth`` steps, checks them (hmac-sha256 challenge, sha256
authenticator, open, TLS certificate) and answers with the accept reply or a refusal.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final

from bus.broker.stamp import Stamper
from bus.broker.states import Authenticated, AuthMode, Step
from bus.frame.enums import CloseReason, Encoding
from bus.frame.frame import U32, DataFrame
from bus.link import auth, wire
from bus.message.message import Message

__all__ = ["CONNECT_COMMANDS", "RCD_UNAUTHORIZED", "Authority", "Handshake"]

RCD_UNAUTHORIZED: Final = 401
CONNECT_COMMANDS: Final = ("manage.connect", "manage.reconnect")
_ANONYMOUS: Final = "anonymous"
#: What an unknown post office's proof is checked against (and always refused).
_NO_SECRET: Final = b"\x00" * 32


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


# --- the handshake -----------------------------------------------------------------------------


class Handshake:
    """The handshake steps of :class:`bus.broker.protocol.BrokerConnection`, up to READY."""

    authority: Authority
    ping_interval: float
    max_message_size: int
    certificate_name: str | None
    office: str
    inbox: str
    mode: AuthMode | None
    _nonce: Callable[[], bytes]
    _decoder: wire.WireDecoder
    _connect: Message | None
    _client_nonce: bytes
    _server_nonce: bytes
    _stamper: Stamper | None

    def _step(self, step: Step) -> None:
        raise NotImplementedError  # the connection's

    def _queue_message(self, message: Message) -> None:
        raise NotImplementedError  # the connection's

    def _close(self, reason: CloseReason, detail: str, by_peer: bool = False) -> None:
        raise NotImplementedError  # the connection's

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
