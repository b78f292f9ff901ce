"""The words of one broker connection (``docs/PROTOCOL.md`` section 4): its states, the one
table of allowed transitions, how a client authenticates, and the events
:class:`bus.broker.protocol.BrokerConnection` gives its driver.

Shared by the connection core (:mod:`bus.broker.protocol`) and its handshake
(:mod:`bus.broker.handshake`); sans-I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeAlias

from bus.frame.enums import CloseReason
from bus.message.message import Message

__all__ = [
    "TRANSITIONS",
    "AuthMode",
    "Authenticated",
    "Closed",
    "ConnEvent",
    "Inbound",
    "State",
    "Step",
]


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
