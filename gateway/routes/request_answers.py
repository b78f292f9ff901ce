"""How ``POST /v1/request/{group}`` is answered once its first response came (PROTOCOL.md 9.2, 9.4).

One answer (the default, ``Accept: application/json``): the ACK as ``200 {"header", "payload"}``
(:func:`send_ack`); when that ACK says more follow (``Flag.MORE``: a command that streams),
every response is answered as NDJSON, as grpc-gateway streams (:func:`answer_open`): the rest
are not dropped.

Several answers (``Accept: application/x-ndjson`` or ``text/event-stream``): every response is
sent as it arrives, one :func:`stream_event` per line (NDJSON) or per SSE event, and the last
has ``"final": true``: the response without ``Flag.MORE``, or a ``timeout`` (or ``error``) marker
with ``received``, the number of responses sent before it. The timeout bounds the whole
exchange (a deadline, as in gRPC), not the wait for each response.

The request's accounting lives here too (:func:`request_failed`, :func:`outcome_of`), shared by
the ASGI route (:mod:`gateway.routes.routes_request`) and :mod:`gateway.routes.request_direct`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from enum import Enum
from typing import Final

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from bus.errors import (
    BufferFullError,
    BusError,
    ClosedError,
    LinkError,
    NakError,
    NoRespondersError,
    RequestTimeout,
)
from bus.message.message import Message
from gateway.bridge import render_response
from gateway.process.cycle import SLOW_CUT_S, cut, write_whole
from gateway.process.metrics import Outcome
from gateway.routes.errors import http_error
from gateway.routes.negotiate import REQUEST_OFFERS, preferred
from gateway.state import Gateway

__all__ = [
    "StreamMode",
    "answer_open",
    "outcome_of",
    "request_failed",
    "send_ack",
    "stream_event",
    "stream_mode",
    "streamed",
]

JSON_TYPE = "application/json"


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


def _headers(response: Message) -> dict[str, str]:
    # The request's MID is the response's RID: the id to look for in the journal.
    return {"X-Busgate-Mid": response.rid or ""}


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


async def streamed(
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
