"""Errors to HTTP: every error of the tree gets its documented status and code."""

from __future__ import annotations

import pytest

from bus.errors import (
    AuthError,
    BufferFullError,
    BusError,
    ConnectError,
    DecodeError,
    DisconnectedError,
    LimitError,
    NakError,
    NoRespondersError,
    ProtocolError,
    RefusedError,
    RequestTimeout,
)
from bus.frame.enums import CloseReason
from gateway.routes.errors import ErrorCode, error_body, http_error


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (NakError("not found", 404), 404, ErrorCode.NAK),
        (NakError("teapot", 418), 418, ErrorCode.NAK),
        (NakError("odd", 7), 502, ErrorCode.NAK),
        (NakError("none"), 502, ErrorCode.NAK),
        (NoRespondersError("demo"), 503, ErrorCode.NO_RESPONDERS),
        (RequestTimeout("demo", 2), 504, ErrorCode.TIMEOUT),
        (DecodeError("bad JSON", 3), 400, ErrorCode.BAD_REQUEST),
        (AuthError("no key"), 401, ErrorCode.UNAUTHORIZED),
        (RefusedError("not yours"), 403, ErrorCode.FORBIDDEN),
        (LimitError("max_body", 10, 5), 413, ErrorCode.TOO_LARGE),
        (LimitError("rate", 3), 429, ErrorCode.RATE_LIMITED),
        (DisconnectedError("gone", CloseReason.SERVER_SHUTDOWN), 503, ErrorCode.BUS_UNAVAILABLE),
        (ConnectError("refused"), 503, ErrorCode.BUS_UNAVAILABLE),
        (BufferFullError("full"), 503, ErrorCode.BUS_UNAVAILABLE),
        (ProtocolError("bad frame"), 502, ErrorCode.BAD_GATEWAY),
        (ValueError("bug"), 500, ErrorCode.INTERNAL),
    ],
)
def test_status_and_code(exc: BaseException, status: int, code: ErrorCode) -> None:
    error = http_error(exc)
    assert (error.status, error.code) == (status, code)
    body = error.body()["error"]
    assert body["code"] == code.value and isinstance(body["message"], str) and body["message"]


def test_nak_body_carries_rcd_and_response() -> None:
    body = http_error(NakError("nope", 409), {"header": {"TYP": "NAK"}, "payload": {}}).body()
    assert body["error"]["rcd"] == 409
    assert body["error"]["message"] == "nope"
    assert body["error"]["response"]["header"]["TYP"] == "NAK"


def test_rate_limit_says_when_to_retry() -> None:
    assert http_error(LimitError("rate", 4)).headers["Retry-After"] == "4"


def test_unauthorized_names_the_scheme() -> None:
    assert http_error(AuthError("x")).headers["WWW-Authenticate"] == "Bearer"


def test_internal_errors_do_not_leak_their_text() -> None:
    assert "secret" not in http_error(RuntimeError("secret path")).message


def test_error_body_shape() -> None:
    assert error_body("timeout", "late") == {"error": {"code": "timeout", "message": "late"}}
    assert isinstance(http_error(BusError("x")).status, int)
