"""The one error tree of busgate.

Every exception that busgate raises on purpose is a :class:`BusError`. The tree splits on
*who broke what*: we misused the API (:class:`LocalError`), the peer broke the protocol or sent
bad data (:class:`RemoteError`), the link itself failed (:class:`LinkError`), or a request was
answered with a failure (:class:`RequestError`)::

    BusError                      base of everything below; .status_hint is an HTTP status
    ├── LocalError                the caller misused the API
    │   ├── EncodeError           a value cannot be encoded (range, type, text outside Latin-1)
    │   ├── ConfigError           a setting is missing or invalid
    │   ├── BufferFullError       the outbound buffer is full while disconnected (nothing dropped)
    │   └── ClosedError           the client/service/journal was used after close()
    ├── RemoteError               the peer broke the protocol or sent bad data
    │   ├── DecodeError           malformed bytes: .reason, .offset (and .path for files)
    │   │   └── SchemaError       arguments do not match the command's schema: .field
    │   ├── ProtocolError         a wire rule was broken: .close_reason to send in Disconnect
    │   └── RefusedError          the peer refused an operation: .reason (limit, permission, ...)
    │       └── LimitError        a documented limit was exceeded: .limit, .value
    ├── LinkError                 the connection failed
    │   ├── ConnectError          could not connect within the deadline
    │   ├── AuthError             authentication refused (close reason AUTHENTICATION_FAILURE)
    │   ├── DisconnectedError     the link closed: .close_reason
    │   └── PublishFailedError    published events that cannot be delivered: .events, .cause
    ├── RequestError              a request did not succeed
    │   ├── NakError              answered with a NAK: .msg, .rcd, .response
    │   │   └── NotJournaledError     the bus keeps none of the events asked for (RCD 409)
    │   ├── NoRespondersError     nobody consumes that group (answered at once, not timed out)
    │   ├── UnknownCommandError   the group's live instances declare no such command
    │   └── RequestTimeout        no (final) answer within the timeout
    └── JournalError              a journal segment is damaged: .path, .offset, .reason

Errors of dependencies (OSError, json errors, struct errors, ...) are caught at the boundary
and re-raised as the most specific of these, chained with ``raise ... from exc``.

``status_hint`` is the HTTP status the gateway uses when the error reaches an HTTP client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bus.frame.enums import CloseReason

__all__ = [
    "AuthError",
    "CarriedMessage",
    "BufferFullError",
    "BusError",
    "ClosedError",
    "ConfigError",
    "ConnectError",
    "DecodeError",
    "DisconnectedError",
    "EncodeError",
    "JournalError",
    "LimitError",
    "LinkError",
    "LocalError",
    "NakError",
    "NoRespondersError",
    "NotJournaledError",
    "ProtocolError",
    "PublishFailedError",
    "RefusedError",
    "RemoteError",
    "RequestError",
    "RequestTimeout",
    "SchemaError",
    "UnknownCommandError",
]


class CarriedMessage(Protocol):
    """The bus message an error carries (``NakError.response``, ``PublishFailedError.events``).

    It is a :class:`bus.message.message.Message`; the error tree names only the fields it needs, so
    it
    does not import the message (which raises these errors) and the two form no import circle.
    Narrow with ``isinstance(x, Message)`` to read the rest.
    """

    @property
    def mid(self) -> str | None:
        """The message id (MID)."""

    @property
    def rid(self) -> str | None:
        """The id of the request answered (RID)."""

    @property
    def grp(self) -> str | None:
        """The group or event type (GRP)."""


class BusError(Exception):
    """Base of every error busgate raises on purpose."""

    status_hint: int = 500


class LocalError(BusError):
    """The caller misused the API."""

    status_hint = 400


class EncodeError(LocalError, ValueError):
    """A value cannot be encoded: out of range for its type, wrong type, text outside Latin-1."""


class ConfigError(LocalError, ValueError):
    """A setting is missing or invalid."""


class BufferFullError(LocalError):
    """The bounded outbound buffer is full while the link is down. Nothing was dropped."""

    status_hint = 503


class ClosedError(LocalError):
    """The object was used after it was closed."""

    status_hint = 503


class RemoteError(BusError):
    """The peer broke the protocol or sent bad data."""

    status_hint = 502


class DecodeError(RemoteError, ValueError):
    """Malformed input bytes.

    Attributes:
        reason: what is wrong, in words.
        offset: byte offset in the input where it went wrong (or ``None``).
    """

    status_hint = 400

    def __init__(self, reason: str, offset: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{reason}{where}")


class SchemaError(DecodeError):
    """Arguments that do not match their command's declared schema (:mod:`bus.discovery.schemas`).

    Attributes:
        field: the path of the first wrong member (``qty``, ``items/0/sku``; ``""``: the
            arguments as a whole).
    """

    def __init__(self, reason: str, field: str) -> None:
        self.field = field
        super().__init__(reason)


class ProtocolError(RemoteError):
    """A wire rule was broken; the connection must close with ``close_reason``."""

    def __init__(self, reason: str, close_reason: CloseReason = CloseReason.PROTOCOL_ERROR) -> None:
        self.reason = reason
        self.close_reason = close_reason
        super().__init__(f"{reason} (close reason {close_reason.name})")


class RefusedError(RemoteError):
    """The peer refused an operation (permission, unknown target, ...)."""

    status_hint = 403

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class LimitError(RefusedError):
    """A documented limit was exceeded.

    Attributes:
        limit: name of the limit (``"max_message_size"``, ...).
        value: the value that was refused, when known.
        maximum: the limit's value, when known.
    """

    status_hint = 413

    def __init__(self, limit: str, value: int | None = None, maximum: int | None = None) -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        detail = ""
        if value is not None and maximum is not None:
            detail = f": {value} > {maximum}"
        elif maximum is not None:
            detail = f" ({maximum})"
        super().__init__(f"limit {limit} exceeded{detail}")


class LinkError(BusError):
    """The connection failed."""

    status_hint = 503


class ConnectError(LinkError):
    """Could not connect within the deadline."""


class AuthError(LinkError):
    """Authentication was refused."""

    status_hint = 401
    close_reason = CloseReason.AUTHENTICATION_FAILURE


class DisconnectedError(LinkError):
    """The link closed; ``close_reason`` says why."""

    def __init__(self, message: str, close_reason: CloseReason = CloseReason.UNKNOWN) -> None:
        self.close_reason = close_reason
        super().__init__(f"{message} (close reason {close_reason.name})")


class PublishFailedError(LinkError):
    """Published events (no ``confirm``) whose delivery can no longer be vouched for: the
    broker never receipted them and they could not be resent (PROTOCOL.md 5.12).

    Attributes:
        events: the events, oldest first (their ``mid``, ``grp`` and ``payload`` as published).
        cause: what made them fail.
    """

    def __init__(self, events: Sequence[CarriedMessage], cause: BusError) -> None:
        self.events = events
        self.cause = cause
        super().__init__(f"{len(events)} published event(s) not delivered: {cause}")


class RequestError(BusError):
    """A request did not succeed."""


class NakError(RequestError):
    """The request was answered with a NAK.

    Attributes:
        msg: the NAK's MSG text (may be empty).
        rcd: the NAK's RCD result code (``None`` when absent).
        response: the NAK message itself.
    """

    def __init__(
        self, msg: str, rcd: int | None = None, response: CarriedMessage | None = None
    ) -> None:
        self.msg = msg
        self.rcd = rcd
        self.response = response
        super().__init__(f"NAK rcd={rcd}: {msg}")

    @property
    def status_hint(self) -> int:  # type: ignore[override]
        """HTTP status for this NAK: an RCD in 400..599 is used as is, anything else is 502."""
        if self.rcd is not None and 400 <= self.rcd <= 599:
            return self.rcd
        return 502


class NotJournaledError(NakError):
    """History or last values of types the bus keeps none of: no journal, a journal filter
    that leaves them out, NATS without JetStream (a NAK with RCD 409 whose message names the
    filter; PROTOCOL.md 5.15). Never an empty answer that would look like "nothing happened"."""

    @classmethod
    def of(cls, error: NakError) -> NakError:
        """``error`` as a :class:`NotJournaledError` when its RCD is 409, else itself."""
        if error.rcd != 409 or isinstance(error, NotJournaledError):
            return error
        return cls(error.msg, error.rcd, error.response)


class NoRespondersError(RequestError):
    """Nobody consumes the group: answered at once rather than left to time out."""

    status_hint = 503

    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"no responders for group {group!r}")


class UnknownCommandError(RequestError):
    """The service directory knows the group, and none of its instances declares the command
    (the gateway's ``POST /v1/{group}/{cmd}`` answers 404 without sending it)."""

    status_hint = 404


class RequestTimeout(RequestError, TimeoutError):
    """No (final) answer arrived within the timeout."""

    status_hint = 504

    def __init__(self, group: str, timeout: float) -> None:
        self.group = group
        self.timeout = timeout
        super().__init__(f"no answer from group {group!r} within {timeout:g} s")


class JournalError(BusError):
    """A journal segment is damaged or unreadable (``offset`` -1: not a place in a file, as for
    a journal that is not there)."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: {reason}" + (f" at offset {offset}" if offset >= 0 else ""))
