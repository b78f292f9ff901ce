"""``POST /v1/publish/{type}`` and ``GET /v1/subscribe?types=...`` (Server-Sent Events).

A publication is an EVT message (ENC=JSON) whose GRP is the ``major.minor`` type; the answer is
``202 {"type", "mid"}`` once the bus client has taken it.

A subscription is an SSE stream: ``event: message``, ``id:`` the event's journal sequence number
(``<epoch>-<seq>`` for an event the broker does not journal), ``data`` the event as ``{"type",
"header", "payload"}``; a ``: keepalive`` comment after ``keepalive`` quiet seconds (up to a
second late: one timer wheel serves every stream, :mod:`gateway.events.keepalives`). A client that
reconnects with ``Last-Event-ID`` (or ``?last_event_id=``), to this gateway or another, first
gets what it missed from the broker's journal; ``?since=SEQ|TIME`` starts there
(:mod:`gateway.events.hub`, PROTOCOL.md 9.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from bus.discovery.names import TYPE_NAME, reserved
from bus.discovery.topics import check_pattern
from bus.errors import ConfigError, DecodeError, RefusedError
from bus.journal.times import SINCE_HINT, parse_since
from gateway.events.hub import EventHub, HubEvent, Listener
from gateway.events.keepalives import keepalives
from gateway.process.cycle import SLOW_CUT_S, chunk_writer, cut, on_shutdown, server_closing
from gateway.routes.idempotency import publish_once
from gateway.routes.payload import parse_body
from gateway.routes.routes_request import parse_timeout, read_body
from gateway.state import Gateway, gateway_of

__all__ = [
    "KEEPALIVE",
    "OVERFLOW",
    "SHUTTING_DOWN",
    "SUBSCRIBED",
    "SUBSCRIPTION",
    "TYPE_NAME",
    "Subscription",
    "publish_endpoint",
    "sse_event",
    "subscribe_endpoint",
    "subscription",
]

MAX_PATTERNS = 32


async def publish_endpoint(request: Request) -> Response:
    """Handle ``POST /v1/publish/{type}``."""
    gateway = gateway_of(request)
    type_ = request.path_params["type"]
    if not TYPE_NAME.fullmatch(type_):
        raise DecodeError(f"bad event type {type_[:64]!r}: expected major.minor")
    if reserved(type_):
        raise RefusedError(
            f"event type {type_[:64]!r} is reserved for the system (OAM.*: heartbeats and "
            "probes; _INBOX.*: replies)"
        )
    principal = gateway.admit(request)
    principal.check_type(type_)
    payload = parse_body(await read_body(request, gateway.max_body(principal)), need_cmd=False)
    confirm = request.query_params.get("confirm", "").lower() in ("1", "true", "yes")
    # how long a confirm may wait (a JetStream cluster electing a stream leader takes 4-9 s)
    wanted = request.query_params.get("timeout") or request.headers.get("x-busgate-timeout")
    timeout = gateway.settings.cap_timeout(parse_timeout(wanted))
    key = request.headers.get("idempotency-key")
    if key is not None:  # the first outcome again for a repeat, on any gateway (9.12)
        return await publish_once(
            gateway,
            type_,
            payload,
            key=key,
            caller=principal.name,
            confirm=confirm,
            timeout=timeout,
        )
    mid, seq = await gateway.bridge.publish(type_, payload, confirm, timeout)
    gateway.metrics.event_published()
    if confirm:  # journaled under the broker's fsync policy: 200 with its sequence number
        return JSONResponse({"type": type_, "mid": mid, "seq": seq}, status_code=200)
    return JSONResponse({"type": type_, "mid": mid}, status_code=202)


def parse_types(text: str | None) -> list[str]:
    """Split and check the ``types`` parameter.

    Raises:
        DecodeError: missing, too many, or a malformed pattern.
    """
    if not text:
        raise DecodeError("types is required: a comma-separated list of event types")
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    if not patterns or len(patterns) > MAX_PATTERNS:
        raise DecodeError(f"types must name 1..{MAX_PATTERNS} patterns")
    for pattern in patterns:
        try:
            check_pattern(pattern)
        except ConfigError as exc:
            raise DecodeError(str(exc)) from exc
    return list(dict.fromkeys(patterns))


@dataclass(frozen=True, slots=True)
class Subscription:
    """What ``GET /v1/subscribe`` asks for, checked (:func:`subscription`)."""

    patterns: list[str]
    caller: str
    presence: bool
    last_id: str | None
    since_time: float | None
    last: bool


#: Where the gateway's protocol leaves what it found of a subscription it passed on to the app:
#: the :class:`Subscription` (the checks are not made, nor the rate token taken, twice) or the
#: error to answer (:mod:`gateway.events.sse_lean`).
SUBSCRIPTION: Final = "busgate.subscription"


def subscription(gateway: Gateway, request: HTTPConnection) -> Subscription:
    """Check a ``GET /v1/subscribe``: its types, its caller (admitted, one rate token taken) and
    the caller's permissions, where it resumes, the bus link.

    Raises:
        BusError: what to answer instead of a stream (400, 401, 403, 429, 503).
    """
    query = request.query_params
    patterns = parse_types(query.get("types"))
    principal = gateway.admit(request)
    for pattern in patterns:
        principal.check_type(pattern)
    presence = _flag(query.get("presence"))
    if presence:  # join and leave events: who else subscribes (9.11)
        principal.check_presence()
    last_id = request.headers.get("last-event-id") or query.get("last_event_id")
    since_time = None
    since = query.get("since")
    if since is not None and not last_id:
        last_id, since_time = _since(since)
    # the last value of each type first (a reconnection's Last-Event-ID resumes instead)
    last = _flag(query.get("last")) and not last_id and since_time is None
    gateway.bridge.check_connected()
    return Subscription(patterns, principal.name, presence, last_id, since_time, last)


async def subscribe_endpoint(request: Request) -> Response:
    """Handle ``GET /v1/subscribe``."""
    gateway = gateway_of(request)
    found = request.scope.pop(SUBSCRIPTION, None)
    if isinstance(found, Exception):
        raise found
    ask = found if isinstance(found, Subscription) else subscription(gateway, request)
    listener = await gateway.bridge.hub.open(
        ask.patterns,
        ask.last_id,
        ask.since_time,
        last=ask.last,
        caller=ask.caller,
        presence=ask.presence,
    )
    return _EventStream(gateway, listener, request.scope)


def _flag(text: str | None) -> bool:
    """A yes/no query parameter (``1``, ``true``, ``yes``).

    Raises:
        DecodeError: anything else but ``0``, ``false``, ``no`` or empty.
    """
    value = (text or "").strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("", "0", "false", "no"):
        return False
    raise DecodeError(f"{value[:20]!r}: expected 1 or 0")


def _since(text: str) -> tuple[str | None, float | None]:
    """``?since=``: a journal sequence number or a time, as ``(last_event_id, since_time)``.

    Raises:
        DecodeError: neither (a 400).
    """
    try:
        seq, since_time = parse_since(text, time.time())
    except ValueError as exc:
        raise DecodeError(f"since={text.strip()[:40]!r}: {SINCE_HINT}") from exc
    return (None if seq is None else str(seq)), since_time


#: How often an idle stream looks at whether the server is shutting down (uvicorn's own
#: graceful shutdown; ``begin_shutdown`` ends the streams at once), when its keepalive is later.
_CHECK = 5.0
#: Queued events sent in one chunk at most.
_BATCH = 64
#: A stream's first chunk: the client's reconnection delay, and a comment.
SUBSCRIBED: Final = "retry: 2000\n: subscribed\n\n"
#: A stream's last chunk when its client let events pile up past its queue.
OVERFLOW: Final = (
    'event: error\ndata: {"code":"overflow","message":"events came faster than this client '
    'read them; reconnect with Last-Event-ID"}\n\n'
)
#: A stream's last chunk when the gateway shuts down.
SHUTTING_DOWN: Final = ": the gateway is shutting down\n\n"
#: Queued by the keepalive wheel into an idle stream's queue: write ``: keepalive`` now.
_KEEPALIVE = HubEvent(0, "", "", None, kind="keepalive")
#: What the wheel writes itself, when it can (:func:`gateway.process.cycle.chunk_writer`).
KEEPALIVE: Final = b": keepalive\n\n"


class _EventStream(StreamingResponse):
    """The SSE response of one subscriber; releases its listener however the response ends."""

    def __init__(self, gateway: Gateway, listener: Listener, scope: Scope) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        body = _events(gateway, listener, scope)
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self.gateway = gateway
        self.listener = listener
        gateway.metrics.stream_opened()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Not Starlette's way (a task group whose cancel scope cancels the stream when the
        # client goes): a cancelled stream left a CancelledError that anyio's task holds and
        # whose traceback holds that task's frame, some 50 objects of cyclic garbage per
        # departed client for the full collections to find (issue 35). The client's going
        # ends the stream as the server's shutdown does: its queue says so.
        watchdog = asyncio.create_task(self._cut_when_too_slow(scope))
        gone = asyncio.create_task(self._end_when_gone(receive))
        try:
            try:
                await self.stream_response(send)
            except OSError:  # a server on ASGI 2.4 says so when the client is gone
                pass
        finally:
            watchdog.cancel()
            gone.cancel()
            self.gateway.metrics.stream_closed()
            self.gateway.bridge.hub.close(self.listener)

    async def _end_when_gone(self, receive: Receive) -> None:
        """End the stream (at its next look at its queue) once the client has gone."""
        while (await receive())["type"] != "http.disconnect":
            pass
        listener = self.listener
        listener.ended = True
        with contextlib.suppress(asyncio.QueueFull):
            listener.queue.put_nowait(None)

    async def _cut_when_too_slow(self, scope: Scope) -> None:
        """Cut the connection of a client that let events pile up and still does not read
        (the stream's own end, the overflow line, needs the client to read)."""
        await self.listener.too_slow.wait()
        await asyncio.sleep(SLOW_CUT_S)
        cut(scope, "SSE client too slow and not reading")


class _Quiet:
    """An SSE stream's keepalive, in the loop's wheel (:mod:`gateway.events.keepalives`): when the
    stream has been quiet for ``keepalive`` seconds, the wheel writes ``: keepalive`` to its
    connection (or, where it cannot, queues :data:`_KEEPALIVE` for the stream's task). An idle
    stream has no timer or wake-up of its own, and its keepalive no pass through the stack.

    ``told``: the server tells it of a graceful shutdown
    (:func:`gateway.process.cycle.on_shutdown`);
    otherwise it looks every :data:`_CHECK` seconds."""

    __slots__ = ("done", "interval", "queue", "quiet_since", "server_closing", "told", "write")

    def __init__(
        self,
        queue: asyncio.Queue[HubEvent | None],
        interval: float,
        now: float,
        server_closing: Callable[[], bool],
        write: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.queue = queue
        self.interval = interval
        self.quiet_since = now
        self.server_closing = server_closing
        self.write = write
        self.told = False
        self.done = False

    def shutdown(self) -> None:
        """The server shuts down: the stream ends at its next look at the queue."""
        if not self.done:
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)

    def keepalive_due(self, now: float) -> float | None:
        if self.done:
            return None
        if self.server_closing():
            self.shutdown()
            return None
        due = self.quiet_since + self.interval
        if now >= due:
            if self.queue.empty():  # otherwise it is writing (or blocked writing) anyway
                write = self.write
                if write is None or not write(KEEPALIVE):
                    self.queue.put_nowait(_KEEPALIVE)
            self.quiet_since = now
            due = now + self.interval
        return due if self.told else min(due, now + _CHECK)


async def _events(gateway: Gateway, listener: Listener, scope: Scope) -> AsyncIterator[str]:
    hub = gateway.bridge.hub
    yield SUBSCRIBED
    loop = asyncio.get_running_loop()
    queue = listener.queue
    interval = gateway.settings.sse_keepalive_interval
    closing = server_closing(scope)
    quiet = _Quiet(queue, interval, loop.time(), closing, chunk_writer(scope))
    quiet.told = on_shutdown(scope, quiet.shutdown)
    keepalives(interval).add(quiet, min(quiet.quiet_since + interval, loop.time() + _CHECK))
    try:
        while not (listener.overflowed or listener.ended or gateway.closing or closing()):
            event = queue.get_nowait() if not queue.empty() else await queue.get()
            if event is None:
                break
            if event is _KEEPALIVE:
                yield ": keepalive\n\n"
                continue
            # What queued up meanwhile leaves in the same chunk (one write for a burst, not one
            # per event), up to _BATCH events.
            chunk = [sse_event(hub, event)]
            while len(chunk) < _BATCH and not queue.empty():
                if (event := queue.get_nowait()) is None:
                    break
                if event is not _KEEPALIVE:
                    chunk.append(sse_event(hub, event))
            yield chunk[0] if len(chunk) == 1 else "".join(chunk)
            quiet.quiet_since = loop.time()
            if event is None:
                break
    finally:
        quiet.done = True
        quiet.write = None
        if quiet.told:
            on_shutdown(scope, None)
    yield OVERFLOW if listener.overflowed else SHUTTING_DOWN


def sse_event(hub: EventHub, event: HubEvent) -> str:
    """An event as its SSE lines (PROTOCOL.md 9.5)."""
    if event.kind != "message":  # presence: no id, so Last-Event-ID stays the last event's
        return f"event: {event.kind}\ndata: {event.data}\n\n"
    return f"id: {hub.event_id(event)}\nevent: message\ndata: {event.data}\n\n"
