"""``POST /v1/request/{group}``: an HTTP request in, the bus response(s) out (PROTOCOL.md 9.2).

This module reads the request: the group (and a typed route's command), the caller, the
``timeout`` (query or ``X-Busgate-Timeout``), the body within its limit, ``Idempotency-Key``
and ``Accept``; then sends it on the bus. How it is answered (one ACK, or a stream of responses
as NDJSON or SSE, PROTOCOL.md 9.4) is :mod:`gateway.routes.request_answers`, whose public names
are importable from here too. The first response is awaited before the status line goes out,
so a request nobody answers still gets its plain 503/504 error.
"""

from __future__ import annotations

import math
import re
from typing import Final

from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from bus import otel
from bus.errors import BusError, DecodeError, LimitError, UnknownCommandError
from bus.frame.frame import DataFrame
from bus.idempotency import check_key, derive_mid
from bus.message import trace as bus_trace
from bus.message.message import Message
from gateway.access.auth import ANONYMOUS
from gateway.micro import call_micro
from gateway.process.cycle import whole_body
from gateway.process.metrics import Outcome
from gateway.routes.idempotency import request_once
from gateway.routes.payload import parse_body
from gateway.routes.request_answers import (
    StreamMode,
    answer_open,
    outcome_of,
    request_failed,
    send_ack,
    stream_event,
    stream_mode,
    streamed,
)
from gateway.routes.typed import typed_body
from gateway.state import Gateway

__all__ = [
    "GROUP_NAME",
    "StreamMode",
    "answer_open",
    "outcome_of",
    "parse_timeout",
    "read_body",
    "read_payload",
    "request_app",
    "request_failed",
    "send_ack",
    "stream_event",
    "stream_mode",
]

#: What a group in a URL may look like (first character alphanumeric: no ``_INBOX.`` groups).
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


def parse_timeout(text: str | bytes | None) -> float | None:
    """The ``timeout`` parameter (or ``X-Busgate-Timeout`` header) in seconds, if given.

    Raises:
        DecodeError: not a positive finite number.
    """
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    try:
        value = float(text)
    except ValueError as exc:
        raise DecodeError(f"timeout must be a number of seconds, got {text[:40]!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise DecodeError(f"timeout must be a positive number of seconds, got {text[:40]!r}")
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """Read the body, refusing more than ``limit`` bytes.

    Raises:
        LimitError: the body (or its announced Content-Length) exceeds ``limit``.
    """
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise LimitError("max_body", int(announced), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise LimitError("max_body", size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def read_payload(body: bytes, *, need_cmd: bool) -> DataFrame:
    """Parse a JSON object body into a payload frame (Kestrel's JSON mapping).

    See :func:`gateway.routes.payload.parse_body` (a BOM accepted, a member named ``""`` refused,
    errors at the bad value's byte offset, the depth limit named).

    Raises:
        DecodeError: not UTF-8, not JSON, not an object, or (with ``need_cmd``) no text CMD.
    """
    return parse_body(body, need_cmd=need_cmd)


def check_group(group: str) -> None:
    """Raise :class:`DecodeError` for a group name a URL may not address."""
    if not GROUP_NAME.fullmatch(group):
        raise DecodeError(f"bad group name {group[:64]!r}")


class RequestApp:
    """``POST /v1/request/{group}`` as a plain ASGI app (see the module docstring).

    Every request through the gateway passes here, so the common case builds no Starlette
    ``Request``, ``Headers`` or ``Response``: the few headers it needs are read in one pass
    over the raw list, the body from ``receive``, and the answer goes out in two ``send``
    calls. Errors are raised as :class:`BusError` for the app's exception handlers, as from
    any route.
    """

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, span: str | None = None
    ) -> None:
        gateway: Gateway = scope["app"].state.gateway
        group = scope["path_params"]["group"]
        check_group(group)
        started = gateway.monotonic()
        wanted = _wanted_headers(scope["headers"])
        trace = span
        if trace is None:
            # The caller's trace goes on, else one starts here (PROTOCOL.md 5.11); with
            # OpenTelemetry on, the request is a span of its own, the child of the caller's:
            # this call again, inside the span (one coroutine less when spans are off).
            incoming = bus_trace.parse(wanted.get(b"traceparent"))
            if otel.active():
                with otel.span(f"POST /v1/request/{group}", incoming, server=True) as own:
                    await self(scope, receive, send, own or bus_trace.new())
                return
            trace = incoming or bus_trace.new()
        scope["busgate.trace"] = trace  # the error handlers answer with it too
        try:
            # (no Request to build when every caller is admitted as it is)
            principal = ANONYMOUS if gateway.open else gateway.admit(Request(scope, receive))
            principal.check_group(group)
            text = _query_timeout(scope) or wanted.get(b"x-busgate-timeout")
            timeout = gateway.settings.cap_timeout(parse_timeout(text))
            limit = gateway.max_body(principal)
            body = whole_body(scope)  # all there: no receive() (the ASGI way otherwise)
            if body is None:
                body = await _receive_body(receive, wanted.get(b"content-length"), limit)
            elif len(body) > limit:
                raise LimitError("max_body", len(body), limit)
            caller = None if principal is ANONYMOUS else principal.name
            cmd = scope["path_params"].get("cmd")
            if cmd is None:
                message = gateway.bridge.make_request(
                    group, body, _command_payload, caller=caller, trace=trace
                )
            else:  # POST /v1/{group}/{cmd}: the body is the arguments (gateway/routes/typed.py)
                check_group(cmd)
                if await _to_micro(gateway, send, group, cmd, body, timeout):
                    return  # a NATS micro service's endpoint (PROTOCOL.md 10.3)
                body = typed_body(gateway.bridge.directory, group, cmd, body)
                message = gateway.bridge.make_request(
                    group, body, _command_payload, caller=caller, trace=trace, cmd=cmd
                )
        except BusError:
            # Refused before reaching the bus (400, 401, 403, 413, 429): counted, not sent.
            now = gateway.monotonic()
            gateway.metrics.observe(group, Outcome.REJECTED, now - started, now)
            raise
        accept = wanted.get(b"accept", b"")
        mode = stream_mode(accept.decode("latin-1")) if accept else StreamMode.SINGLE
        key = wanted.get(b"idempotency-key")
        if key is not None:  # run once, the first answer again for a repeat (9.12)
            route = f"request {group}" if cmd is None else f"request {group}/{cmd}"
            name = principal.name
            if mode is StreamMode.SINGLE:
                await request_once(
                    gateway, send, message, key=key.decode("latin-1"), caller=name,
                    route=route, timeout=timeout, trace=trace,
                )  # fmt: skip
                return
            message.mid = derive_mid(name, route, check_key(key.decode("latin-1")))
        if mode is StreamMode.SINGLE:
            await _single(gateway, group, message, timeout, scope, receive, send, trace, accept)
        else:
            response = await streamed(gateway, group, message, timeout, mode, trace)
            await response(scope, receive, send)


#: The one instance the route serves.
request_app = RequestApp()

_WANTED: Final = frozenset(
    {b"content-length", b"accept", b"x-busgate-timeout", b"traceparent", b"idempotency-key"}
)


def _wanted_headers(raw: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    # uvicorn gives header names in lower case; the first of a repeated header wins.
    found: dict[bytes, bytes] = {}
    for name, value in raw:
        if name in _WANTED and name not in found:
            found[name] = value
    return found


async def _to_micro(
    gateway: Gateway, send: Send, group: str, cmd: str, body: bytes, timeout: float
) -> bool:
    """Answer from a NATS micro service when ``group`` is one and no busgate service is."""
    bridge = gateway.bridge
    micro = bridge.micro
    if not micro.active:
        return False  # not on NATS: no micro services
    directory = bridge.directory
    busgate = directory is not None and any(s.group == group for s in directory.services())
    if busgate:
        return False  # a busgate service of that name wins
    service = micro.services.get(group) or await micro.find(group)
    if service is None:
        return False
    if not await call_micro(gateway, send, service, cmd, body, timeout):
        known = ", ".join(sorted(service.endpoints)) or "none"
        raise UnknownCommandError(f"micro service {group!r} has no endpoint {cmd!r}; its "
                                  f"endpoints: {known}")  # fmt: skip
    return True


def _query_timeout(scope: Scope) -> str | None:
    if not scope.get("query_string"):
        return None  # most requests: no query string to parse
    value: str | None = QueryParams(scope["query_string"]).get("timeout")
    return value


async def _receive_body(receive: Receive, announced: bytes | None, limit: int) -> bytes:
    """The body from ``receive``, refusing more than ``limit`` bytes (see :func:`read_body`)."""
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise LimitError("max_body", int(announced), limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise LimitError("max_body", size, limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _command_payload(body: bytes) -> DataFrame:
    return read_payload(body, need_cmd=True)


async def _single(
    gateway: Gateway,
    group: str,
    message: Message,
    timeout: float,
    scope: Scope,
    receive: Receive,
    send: Send,
    trace: str,
    accept: bytes,
) -> None:
    bridge = gateway.bridge
    started = gateway.monotonic()
    bridge.begin()
    try:
        ack, rest = await bridge.request_open(message, timeout)
    except BaseException as exc:
        request_failed(gateway, group, started, exc)
        raise
    await answer_open(
        gateway, group, message, ack, rest, started, timeout, trace, accept, scope, receive, send
    )
