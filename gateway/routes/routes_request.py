"""``POST /v1/request/{group}``: an HTTP request in, the correlated bus response(s) out.

One answer (the default, ``Accept: application/json``): the ACK as ``200 {"header", "payload"}``;
a NAK, no responders, a timeout or a bus failure as an error status (:mod:`gateway.routes.errors`).
When that ACK says more follow (``Flag.MORE``: a command that streams), every response is
answered as NDJSON (below), as grpc-gateway streams: the rest are not dropped.

Several answers (``Accept: application/x-ndjson`` or ``text/event-stream``): every response is
sent as it arrives, one :func:`stream_event` per line (NDJSON) or per SSE event, and the last
has ``"final": true``: the response without ``Flag.MORE``, or a ``timeout`` (or ``error``) marker
with ``received``, the number of responses sent before it. The timeout bounds the whole
exchange (a deadline, as in gRPC), not the wait for each response: a stream that must last
longer asks for a longer ``timeout`` (up to the server's cap). The first response is awaited
before the status line goes out, so a request nobody answers still gets its plain 503/504 error.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator
from enum import Enum
from typing import Final

from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from bus import otel
from bus.errors import (
    BufferFullError,
    BusError,
    ClosedError,
    DecodeError,
    LimitError,
    LinkError,
    NakError,
    NoRespondersError,
    RequestTimeout,
    UnknownCommandError,
)
from bus.frame.frame import DataFrame
from bus.idempotency import check_key, derive_mid
from bus.message import trace as bus_trace
from bus.message.message import Message
from gateway.access.auth import ANONYMOUS
from gateway.bridge import render_response
from gateway.micro import call_micro
from gateway.process.cycle import SLOW_CUT_S, cut, whole_body, write_whole
from gateway.process.metrics import Outcome
from gateway.routes.errors import http_error
from gateway.routes.idempotency import request_once
from gateway.routes.negotiate import REQUEST_OFFERS, preferred
from gateway.routes.payload import parse_body
from gateway.routes.typed import typed_body
from gateway.state import Gateway

__all__ = [
    "GROUP_NAME",
    "StreamMode",
    "read_body",
    "parse_timeout",
    "read_payload",
    "request_app",
    "stream_event",
]

#: What a group in a URL may look like (first character alphanumeric: no ``_INBOX.`` groups).
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
JSON_TYPE = "application/json"
_FIRST_NON_SPACE = re.compile(r"\s*(\S)")


class StreamMode(Enum):
    """How the responses go back."""

    SINGLE = JSON_TYPE
    NDJSON = "application/x-ndjson"
    SSE = "text/event-stream"


def stream_mode(accept: str) -> StreamMode:
    """Pick the answer mode from the ``Accept`` header, q-values honoured (RFC 9110 12.5.1)."""
    if "/x-ndjson" not in accept and "/event-stream" not in accept:
        return StreamMode.SINGLE  # the usual case, decided without parsing anything
    chosen = preferred(accept, REQUEST_OFFERS)
    return StreamMode(chosen) if chosen else StreamMode.SINGLE


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


def outcome_of(exc: BaseException) -> Outcome:
    """The metrics outcome of a failed request."""
    if isinstance(exc, NakError):
        return Outcome.NAK
    if isinstance(exc, NoRespondersError):
        return Outcome.NO_RESPONDERS
    if isinstance(exc, RequestTimeout):
        return Outcome.TIMEOUT
    if isinstance(exc, LinkError | BufferFullError | ClosedError):
        return Outcome.UNAVAILABLE
    return Outcome.ERROR


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
            response = await _streamed(gateway, group, message, timeout, mode, trace)
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


def _headers(response: Message) -> dict[str, str]:
    # The request's MID is the response's RID: the id to look for in the journal.
    return {"X-Busgate-Mid": response.rid or ""}


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


def request_failed(gateway: Gateway, group: str, started: float, exc: BaseException) -> None:
    """A request sent under ``bridge.begin()`` at ``started`` got no first response: the
    bridge's in-flight count ends, and a :class:`BusError` (a NAK, the timeout, the link lost)
    is counted in the route's metrics. (Shared by the ASGI route, its streams and
    :mod:`gateway.routes.request_direct`; a function, not a coroutine around the request: an
    ``await`` layer more costs every request.)"""
    gateway.bridge.end()
    if isinstance(exc, BusError):
        now = gateway.monotonic()
        gateway.metrics.observe(group, outcome_of(exc), now - started, now)


async def answer_open(
    gateway: Gateway,
    group: str,
    message: Message,
    ack: Message,
    rest: AsyncIterator[Message] | None,
    started: float,
    timeout: float,
    trace: str,
    accept: bytes,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Answer a request whose first response came: the ACK alone, or (``rest``: more follow)
    every response as NDJSON. The bridge's in-flight count, begun for it, ends here."""
    bridge = gateway.bridge
    if rest is not None and preferred(accept.decode("latin-1"), _NDJSON_ONLY) is None:
        await rest.aclose()  # type: ignore[attr-defined]  # the client takes JSON only
        rest = None  # (the first, its FLG says more came)
    if rest is not None:  # more follow: every response as NDJSON, not the first alone
        exchange = _Exchange(gateway, group, ack, rest)  # it ends the in-flight count
        exchange.started = started
        await _Stream(exchange, StreamMode.NDJSON, _stream_headers(ack, trace), timeout)(
            scope, receive, send
        )
        return
    bridge.end()
    now = gateway.monotonic()
    gateway.metrics.observe(group, Outcome.ACK, now - started, now)
    await send_ack(scope, send, message, ack, trace)


async def send_ack(scope: Scope, send: Send, message: Message, ack: Message, trace: str) -> None:
    """Send the one ACK that answers ``message`` (200, its MID and trace as headers)."""
    body = render_response(ack)
    # The ACK's RID is the request's MID (the client matched it by that), which this gateway
    # made; the trace was parsed or made here: nothing in these lines came unchecked.
    mid = (message.mid or "").encode("latin-1")
    lines = _ANSWER_LINES % (len(body), mid, trace.encode("latin-1"))
    if not write_whole(scope, 200, lines, body):
        headers = [
            (b"content-length", b"%d" % len(body)),
            (b"content-type", b"application/json"),
            (b"x-busgate-mid", mid),
            (b"traceparent", trace.encode("latin-1")),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


_ANSWER_LINES: Final = (
    b"content-length: %d\r\ncontent-type: application/json\r\nx-busgate-mid: %s\r\n"
    b"traceparent: %s\r\n"
)


def stream_event(message: Message) -> str:
    """One streamed response: ``{"event": "response", "final": bool, "header", "payload"}``.

    The end-of-stream marker (``Flag.END``, no data of its own) is ``"event": "end"``.
    """
    final = "false" if message.more else "true"
    event = "end" if message.end else "response"
    return f'{{"event":"{event}","final":{final},{render_response(message)[1:].decode()}'


def _error_event(exc: BusError, received: int) -> tuple[str, str]:
    body = http_error(exc).body()["error"]
    body["received"] = received
    if isinstance(exc, RequestTimeout):
        # The timeout bounds the whole exchange (a deadline, as in gRPC), not each response.
        body["message"] = (
            f"the stream from group {exc.group!r} did not end within {exc.timeout:g} s "
            f"(the timeout bounds the whole stream; {received} responses received)"
        )
        marker = {"event": "timeout", "final": True, "error": body}
        return "timeout", json.dumps(marker, separators=(",", ":"))
    marker = {"event": "error", "final": True, "error": body}
    return "error", json.dumps(marker, separators=(",", ":"))


def _frame(mode: StreamMode, name: str, data: str, number: int) -> str:
    if mode is StreamMode.NDJSON:
        return data + "\n"
    return f"id: {number}\nevent: {name}\ndata: {data}\n\n"


class _Stream(StreamingResponse):
    """A streamed answer that releases what it holds however it ends.

    The body generator may never start (the client left first) or be cancelled anywhere; the
    cleanup runs once the ASGI call returns, whatever happened.
    """

    def __init__(
        self, exchange: _Exchange, mode: StreamMode, headers: dict[str, str], timeout: float
    ) -> None:
        super().__init__(exchange.body(mode), media_type=mode.value, headers=headers)
        self.exchange = exchange
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watchdog = asyncio.create_task(self._cut_when_overdue(scope))
        try:
            await super().__call__(scope, receive, send)
        finally:
            watchdog.cancel()
            await self.exchange.finish()

    async def _cut_when_overdue(self, scope: Scope) -> None:
        """The timeout bounds the whole stream; one still open well past it is blocked on a
        client that reads nothing (its timeout line cannot even be written)."""
        await asyncio.sleep(self.timeout + SLOW_CUT_S)
        cut(scope, "NDJSON/SSE answer past its timeout to a client that reads nothing")


class _Exchange:
    """One streamed request: its responses, its outcome, and what to release at the end."""

    def __init__(
        self, gateway: Gateway, group: str, first: Message, responses: AsyncIterator[Message]
    ) -> None:
        self.gateway = gateway
        self.group = group
        self.first = first
        self.responses = responses
        self.outcome = Outcome.ACK
        self.started = gateway.monotonic()
        self.finished = False
        gateway.metrics.stream_opened()

    async def body(self, mode: StreamMode) -> AsyncIterator[str]:
        number = 0
        current: Message | None = self.first
        try:
            while current is not None:
                number += 1
                name = "end" if current.end else "response" if current.more else "final"
                if not current.more and current.typ == "NAK":
                    self.outcome = Outcome.NAK
                yield _frame(mode, name, stream_event(current), number)
                if not current.more:
                    break
                current = await anext(self.responses, None)
        except BusError as exc:
            self.outcome = outcome_of(exc)
            name, data = _error_event(exc, number)
            yield _frame(mode, name, data, number + 1)

    async def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        gateway = self.gateway
        gateway.metrics.stream_closed()
        now = gateway.monotonic()
        gateway.metrics.observe(self.group, self.outcome, now - self.started, now)
        try:
            aclose = getattr(self.responses, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            gateway.bridge.end()


async def _streamed(
    gateway: Gateway, group: str, message: Message, timeout: float, mode: StreamMode, trace: str
) -> Response:
    started = gateway.monotonic()
    # The stream outlives this handler: _Stream ends the in-flight count when it is done.
    gateway.bridge.begin()
    try:
        responses = gateway.bridge.stream(message, timeout)
        first = await anext(responses)
    except BaseException as exc:
        request_failed(gateway, group, started, exc)
        raise
    exchange = _Exchange(gateway, group, first, responses)
    exchange.started = started
    return _Stream(exchange, mode, _stream_headers(first, trace), timeout)


#: What a plain-JSON request to a stream is answered with, if its Accept admits it.
_NDJSON_ONLY: Final = (StreamMode.NDJSON.value,)


def _stream_headers(first: Message, trace: str) -> dict[str, str]:
    return {
        **_headers(first),
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
        "traceparent": trace,
    }
