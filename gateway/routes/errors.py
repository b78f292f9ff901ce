"""From busgate's error tree to HTTP: a status, and a JSON body ``{"error": {"code", "message"}}``.

Every error the gateway answers with has this body; ``code`` is one of :class:`ErrorCode` and
``message`` says what happened in words. A NAK also carries ``rcd`` (its result code, or ``null``)
and ``response`` (the NAK's header and payload).

| error                                   | status          | code            |
|-----------------------------------------|-----------------|-----------------|
| NotJournaledError (history, last value) | 409             | ``not_journaled``|
| NakError (RCD 400..599)                 | the RCD itself  | ``nak``         |
| NakError (any other RCD, or none)       | 502             | ``nak``         |
| NoRespondersError                       | 503             | ``no_responders``|
| RequestTimeout                          | 504             | ``timeout``     |
| SchemaError (+ ``field``: the member)    | 400             | ``bad_request`` |
| DecodeError, EncodeError                | 400             | ``bad_request`` |
| UnknownCommandError                     | 404             | ``not_found``   |
| AuthError                               | 401             | ``unauthorized``|
| RefusedError                            | 403             | ``forbidden``   |
| LimitError (``limit="rate"``)           | 429             | ``rate_limited``|
| LimitError (``limit="auth_failures"``)  | 429             | ``rate_limited``|
| LimitError (any other limit)            | 413             | ``too_large``   |
| LinkError, BufferFullError, ClosedError | 503             | ``bus_unavailable``|
| ProtocolError and other RemoteError     | 502             | ``bad_gateway`` |
| HTTP 404 / 405 from routing             | 404 / 405       | ``not_found``, ``method_not_allowed``|
| anything else                           | 500             | ``internal``    |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bus.errors import (
    AuthError,
    BufferFullError,
    BusError,
    ClosedError,
    DecodeError,
    EncodeError,
    LimitError,
    LinkError,
    NakError,
    NoRespondersError,
    NotJournaledError,
    RefusedError,
    RemoteError,
    RequestTimeout,
    SchemaError,
)

__all__ = ["ErrorCode", "HttpError", "code_for_status", "error_body", "http_error"]


class ErrorCode(StrEnum):
    """The ``code`` of an error body."""

    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    NAK = "nak"
    NO_RESPONDERS = "no_responders"
    TIMEOUT = "timeout"
    BUS_UNAVAILABLE = "bus_unavailable"
    BAD_GATEWAY = "bad_gateway"
    NOT_READY = "not_ready"
    NOT_JOURNALED = "not_journaled"
    CONFLICT = "conflict"
    INTERNAL = "internal"


@dataclass(frozen=True)
class HttpError:
    """What to answer for an error: status, body and extra headers."""

    status: int
    code: ErrorCode
    message: str
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        """The JSON body ``{"error": {"code": ..., "message": ..., **extra}}``."""
        return error_body(self.code, self.message, **self.extra)


def error_body(code: ErrorCode | str, message: str, **extra: Any) -> dict[str, Any]:
    """Build the error body every error response carries."""
    return {"error": {"code": str(code), "message": message, **extra}}


_BY_STATUS = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.TOO_LARGE,
    429: ErrorCode.RATE_LIMITED,
    503: ErrorCode.BUS_UNAVAILABLE,
    504: ErrorCode.TIMEOUT,
}


def code_for_status(status: int) -> ErrorCode:
    """The error code used for a plain HTTP status (routing errors and the like)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ErrorCode.INTERNAL if status >= 500 else ErrorCode.BAD_REQUEST


def http_error(exc: BaseException, response: dict[str, Any] | None = None) -> HttpError:
    """Map an exception to the HTTP answer.

    Args:
        exc: the error (a :class:`BusError` normally; anything else is a 500).
        response: for a :class:`NakError`, the NAK rendered as JSON (header and payload).

    Returns:
        Status, code, message, extra body fields and headers.
    """
    if isinstance(exc, NotJournaledError):  # the bus keeps none of them: say which filter
        return HttpError(409, ErrorCode.NOT_JOURNALED, exc.msg)
    if isinstance(exc, NakError):
        extra = {"rcd": exc.rcd, "response": response}
        return HttpError(exc.status_hint, ErrorCode.NAK, exc.msg or "request refused", extra)
    if not isinstance(exc, BusError):
        return HttpError(500, ErrorCode.INTERNAL, "internal error")
    return _bus_error(exc)


def _bus_error(exc: BusError) -> HttpError:
    message = str(exc)
    if isinstance(exc, NoRespondersError):
        return HttpError(503, ErrorCode.NO_RESPONDERS, message)
    if isinstance(exc, RequestTimeout):
        return HttpError(504, ErrorCode.TIMEOUT, message)
    if isinstance(exc, SchemaError):
        return HttpError(400, ErrorCode.BAD_REQUEST, message, {"field": exc.field})
    if isinstance(exc, DecodeError | EncodeError):
        return HttpError(400, ErrorCode.BAD_REQUEST, message)
    if isinstance(exc, AuthError):
        return HttpError(
            401, ErrorCode.UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"}
        )
    if isinstance(exc, LimitError):
        if exc.limit == "rate":
            retry = str(max(1, exc.value or 1))
            return HttpError(
                429, ErrorCode.RATE_LIMITED, "rate limit exceeded", headers={"Retry-After": retry}
            )
        if exc.limit == "auth_failures":
            retry = str(max(1, exc.value or 1))
            text = f"too many wrong credentials from this address: retry in {retry} s"
            return HttpError(429, ErrorCode.RATE_LIMITED, text, headers={"Retry-After": retry})
        return HttpError(413, ErrorCode.TOO_LARGE, message)
    if isinstance(exc, RefusedError):
        return HttpError(403, ErrorCode.FORBIDDEN, message)
    if isinstance(exc, LinkError | BufferFullError | ClosedError):
        return HttpError(503, ErrorCode.BUS_UNAVAILABLE, f"the bus is unavailable: {message}")
    if isinstance(exc, RemoteError):
        return HttpError(502, ErrorCode.BAD_GATEWAY, message)
    return HttpError(exc.status_hint, code_for_status(exc.status_hint), message)
