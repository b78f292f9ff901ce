"""What a service's handler gets and gives: :class:`Request`, :class:`Response`,
:class:`ServiceError`, and the ACK/NAK each outcome becomes (the rules of
:mod:`bus.asyncio.service`, which runs the handlers). No I/O here.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bus.discovery.schemas import schema_of
from bus.errors import ConfigError, EncodeError, RequestError
from bus.frame.frame import DataFrame
from bus.message.message import Message

__all__ = [
    "MAX_MSG",
    "RCD_BAD_REQUEST",
    "RCD_FORBIDDEN",
    "RCD_HANDLER_ERROR",
    "RCD_UNAVAILABLE",
    "RCD_UNKNOWN_COMMAND",
    "Handler",
    "Reply",
    "Request",
    "Response",
    "ServiceError",
    "ack_for",
    "declared_answer",
    "expired",
    "nak_for",
]

#: What a handler may return (or yield): a payload, or a :class:`Response` with MSG/RCD.
Reply = Any
#: A handler: an async function returning a :data:`Reply`, or an async generator yielding several.
Handler = Callable[["Request"], Awaitable[Reply]] | Callable[["Request"], AsyncIterator[Reply]]

#: Longest NAK text sent (an exception's text is cut there).
MAX_MSG = 1000

RCD_BAD_REQUEST = 400
RCD_FORBIDDEN = 403
RCD_UNKNOWN_COMMAND = 404
RCD_HANDLER_ERROR = 500
RCD_UNAVAILABLE = 503
#: The range of RCD: a Java int on the wire (PROTOCOL.md 2.2).
_RCD_MIN, _RCD_MAX = -(2**31), 2**31 - 1


class ServiceError(RequestError):
    """Raise in a handler to answer with a NAK carrying ``msg`` and ``rcd``.

    Args:
        msg: the NAK's ``MSG`` text, shown to the requester.
        rcd: the NAK's ``RCD`` result code (default 500; 4xx for the caller's mistakes).
    """

    def __init__(self, msg: str, rcd: int = RCD_HANDLER_ERROR) -> None:
        if isinstance(rcd, bool) or not isinstance(rcd, int) or not _RCD_MIN <= rcd <= _RCD_MAX:
            # Refused here, where it is made: a NAK that cannot be encoded would leave the
            # caller waiting for its whole timeout (the handler raising this answers NAK 500).
            raise ValueError(f"RCD {rcd!r} is not a 32-bit integer ({_RCD_MIN}..{_RCD_MAX})")
        self.msg = msg
        self.rcd = rcd
        super().__init__(f"rcd={rcd}: {msg}")

    @property
    def status_hint(self) -> int:  # type: ignore[override]
        """HTTP status: an ``rcd`` in 400..599 as is, else 502."""
        return self.rcd if 400 <= self.rcd <= 599 else 502


@dataclass(frozen=True)
class Response:
    """An ACK with a text and a result code besides its payload (return it from a handler)."""

    payload: Mapping[str, Any] | DataFrame | None = None
    msg: str | None = None
    rcd: int | None = None


class Request:
    """One request as a handler sees it.

    Attributes:
        message: the request message (``mid``, ``rpy``, ``enc``, ``src`` ... are on it).
        group: the group the service consumes.
    """

    __slots__ = ("_args", "group", "message")

    def __init__(self, message: Message, group: str) -> None:
        self.message = message
        self.group = group
        self._args: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Request(message={self.message!r}, group={self.group!r})"

    @property
    def cmd(self) -> str:
        """The request's command (the ``CMD`` field)."""
        return self.message.cmd or ""

    @property
    def caller(self) -> str | None:
        """Who the request is made for (``docs/PROTOCOL.md`` 5.11): ``CLR`` when a gateway the
        broker trusts set it (an API key's name, ``jwt:<sub>``), else the post office of ``SRC``
        (the broker stamps both: no client can forge them); None only off the broker."""
        message = self.message
        clr = message.clr
        if clr is not None:
            return clr
        src = message.src
        return None if src is None else src.partition(".")[0]

    @property
    def trace(self) -> str | None:
        """The W3C ``traceparent`` the request carries (``TRC``), or None."""
        return self.message.trc

    @property
    def args(self) -> dict[str, Any]:
        """The request's arguments: its payload as a dict, without ``CMD`` (read once)."""
        args = self._args
        if args is None:
            payload = self.message.payload_data()  # a new dict each time: ours to change
            if type(payload) is not dict:  # a payload of unnamed fields has no named arguments
                payload = dict(payload) if isinstance(payload, dict) else {}
            args = self._args = payload
            args.pop("CMD", None)
        return args

    def get(self, name: str, default: Any = None) -> Any:
        """One argument, or ``default`` when absent."""
        return self.args.get(name, default)

    def __getitem__(self, name: str) -> Any:
        """One required argument.

        Raises:
            ServiceError: the argument is missing (a NAK with ``RCD`` 400 for the requester).
        """
        args = self.args
        if name not in args:
            raise ServiceError(f"missing argument {name!r}", RCD_BAD_REQUEST)
        return args[name]


def declared_answer(handler: Handler) -> Any:
    """The schema of the handler's return annotation when that is a TypedDict or a dataclass
    with a JSON form, else None."""
    try:
        hint = typing.get_type_hints(handler).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve declares nothing
        return None
    if hint is None or not (typing.is_typeddict(hint) or dataclasses.is_dataclass(hint)):
        return None
    try:
        return schema_of(hint)
    except ConfigError:  # a dataclass with no JSON form (DataFrame, ...): nothing declared
        return None


def ack_for(
    request: Message, result: Reply, *, more: bool, src: str | None = None
) -> Message | None:
    """The ACK a handler's result becomes (None: the request wants no answer); ``src`` is who
    answers (SRC), written as the ACK is composed (setting it later decodes the ACK again)."""
    if not request.rpy:  # fire-and-forget: nobody to answer
        return None
    if isinstance(result, Response):
        return request.ack(result.payload, msg=result.msg, rcd=result.rcd, more=more, src=src)
    # a dict first: the usual result, without an ABC check
    if result is None or type(result) is dict or isinstance(result, Mapping | DataFrame):
        return request.ack(result, more=more, src=src)
    return request.ack({"result": result}, more=more, src=src)  # a bare value or a list


def nak_for(request: Message, text: str, rcd: int, src: str | None = None) -> Message | None:
    """The NAK a failure becomes: its text cut to :data:`MAX_MSG` and made Latin-1."""
    if not request.rpy:
        return None
    # MSG travels as Latin-1 text: an error text must never make its own NAK unsendable.
    text = text[:MAX_MSG].encode("latin-1", "replace").decode("latin-1")
    try:
        return request.nak(text, rcd, src=src)
    except EncodeError as exc:  # an RCD out of range: the caller still hears, at once
        return request.nak(f"the service's NAK could not be sent: {exc}"[:MAX_MSG], 500, src=src)


def expired(message: Message) -> bool:
    xpy = message.xpy
    return xpy is not None and xpy > 0 and xpy < time.time()
