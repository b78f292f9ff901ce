"""``GET /v1/subscribe`` answered in the gateway's HTTP protocol, without ASGI (PROTOCOL.md 9.5).

Under ASGI each idle SSE stream held uvicorn's request cycle, Starlette's ``StreamingResponse``,
the tasks that drive it and a queue: some 27 KB of Python objects per subscriber (issue 35).
Here, once a request head names the route and its checks pass (the route's own
:func:`gateway.routes.routes_events.subscription`: types, credentials, permissions, rate,
``Last-Event-ID``, ``since``, ``last``, ``presence``, the bus link), the connection is handed to
one :class:`SseStream`, which is at once the connection's protocol, the hub's subscriber and an
entry of the app's keepalive pass (:mod:`gateway.events.sse_keepalives`). It writes the
response head and each event straight to the transport, in the bytes the route writes (chunked,
as uvicorn writes them). No task, queue or timer of its own while it streams.

As the route's stream:

- the events of its patterns, numbered (``id:``), replayed after ``Last-Event-ID`` from this
  gateway's log; presence ``join`` / ``leave`` with ``?presence=1`` (9.11);
- ``: keepalive`` after ``keepalive`` quiet seconds;
- a client that reads nothing: events wait (up to ``sse_queue``) while the transport's buffer is
  full (``pause_writing``); one more and the stream ends with the ``overflow`` error event, and
  a client that still reads nothing is cut :data:`SLOW_CUT_S` later;
- the server's graceful shutdown (``shutdown``) and the gateway's (``end``) end the stream with
  its last comment, then the connection closes;
- a client that goes leaves the hub at once (``connection_lost``).

A stream that resumes from the journal (a journal number in ``Last-Event-ID``, ``since``,
``last``) is a :class:`gateway.events.sse_resume.ResumingStream` (``resuming``), fed by bus
subscriptions of its own. With CORS on, each response gets the headers the app's CORS
middleware adds (computed by that middleware's own code: :meth:`LeanSse.cors_lines`).

Left to the app (the route answers as before; what was checked here is not checked again): a
refusal (400, 401, 403, 429, 503: the route raises the error found here), HTTP/1.0 or
``Connection: close``, an encoded path, and an app that refreshes a JWKS on requests
(:class:`LeanSse` is then not installed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import httptools
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string
from uvicorn.server import ServerState

from gateway.access.auth import move_query_credential
from gateway.events.hub import HubEvent
from gateway.events.listeners import matches_any
from gateway.events.sse_keepalives import StreamKeepalives
from gateway.process.cycle import SLOW_CUT_S
from gateway.routes.routes_events import (
    KEEPALIVE,
    OVERFLOW,
    SHUTTING_DOWN,
    SUBSCRIBED,
    SUBSCRIPTION,
    Subscription,
    sse_event,
    subscription,
)
from gateway.state import Gateway

__all__ = ["LeanSse", "SseStream"]

log = logging.getLogger("busgate.gateway")
_ACCESS: Final = logging.getLogger("uvicorn.access")

#: The paths of the route (one trailing slash is ignored on ``/v1/`` paths, PROTOCOL.md 9.1).
_PATHS: Final = (b"/v1/subscribe", b"/v1/subscribe/")
#: The route's own headers, after the server's (as Starlette's ``StreamingResponse`` lists them).
_HEADERS: Final = (
    b"cache-control: no-cache\r\nx-accel-buffering: no\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
)
#: After them (and the CORS headers of a cross-origin request), the server's.
_CHUNKED: Final = b"transfer-encoding: chunked\r\n\r\n"
#: The end of a chunked body.
_LAST_CHUNK: Final = b"0\r\n\r\n"
#: Pattern lists whose type matches are kept (streams with the same patterns share one).
_FILTERS: Final = 4096
#: Event types a pattern list remembers the match of.
_TYPES: Final = 1024

ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]
#: Makes the stream of a request that resumes from the journal (``LeanSse``, the request, the
#: server's state, the access log line): :class:`gateway.events.sse_resume.ResumingStream`.
StreamFactory = Callable[
    ["LeanSse", Subscription, ServerState, "tuple[str, str] | None"], "SseStream"
]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_KEEPALIVE_CHUNK: Final = _chunk(KEEPALIVE)
_FIRST_CHUNK: Final = _chunk(SUBSCRIBED.encode())


async def _nowhere(message: Any) -> None:
    """Where :meth:`LeanSse.cors_lines` lets the CORS middleware send the head it completed."""


class LeanSse:
    """Takes ``GET /v1/subscribe`` requests off the gateway's HTTP protocol
    (:class:`gateway.process.http_protocol.HeaderDeadlineProtocol` calls it with itself when a
    request head is complete), and holds what every stream of the app shares.

    Args:
        gateway: the app's gateway.
        on_error: the app's handler of an error raised by a route (what the route would answer
            when the bus refuses a subscription the stream asks for).
        resuming: makes the stream of a request that resumes from the journal (None: the
            app's route answers those).
        cors: the app's CORS middleware, when it has one: each stream's response gets the
            headers it adds (:meth:`cors_lines`).
    """

    def __init__(
        self,
        gateway: Gateway,
        on_error: ErrorHandler,
        resuming: StreamFactory | None = None,
        cors: CORSMiddleware | None = None,
    ) -> None:
        self.gateway = gateway
        self.hub = gateway.bridge.hub
        self.metrics = gateway.metrics
        self.interval = gateway.settings.sse_keepalive_interval
        #: The streams' ``: keepalive`` comments, one pass per slot of the loop's wheel.
        self.quiet = StreamKeepalives(self.interval, _KEEPALIVE_CHUNK)
        self.queue_size = gateway.settings.sse_queue
        self.on_error = on_error
        self.resuming = resuming
        self.cors = cors
        self.loop: asyncio.AbstractEventLoop | None = None
        self._filters: dict[tuple[str, ...], dict[str, bool]] = {}
        self._event: HubEvent | None = None
        self._bytes = b""
        self._defaults: list[tuple[bytes, bytes]] | None = None
        self._head = self._whole = b""
        self._joining: set[asyncio.Task[None]] = set()

    def __call__(self, protocol: Any) -> SseStream | None:
        """A stream for the request whose head ``protocol`` (uvicorn's ``HttpToolsProtocol``)
        just parsed, or None: the app answers it (a refusal found here waits in its scope)."""
        parser = protocol.parser
        if (
            parser.get_method() != b"GET"
            or parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
            or protocol.limit_concurrency is not None
        ):
            return None
        try:
            url = httptools.parse_url(protocol.url)
        except httptools.HttpParserInvalidURLError:
            return None
        if url.path not in _PATHS:
            return None
        scope = {
            "type": "http",
            "method": "GET",
            "root_path": "",
            "path": "/v1/subscribe",
            "headers": list(protocol.headers),
            "query_string": url.query or b"",
            "client": protocol.client,
        }
        move_query_credential(scope)  # as CredentialsFromQuery: out of the logged query
        try:
            ask = subscription(self.gateway, HTTPConnection(scope))
        except Exception as exc:  # the route raises it: the app's handlers answer it
            protocol.scope[SUBSCRIPTION] = exc
            return None
        make: StreamFactory = SseStream
        if self.hub.resumes(ask.last_id, ask.since_time, ask.last):
            if self.resuming is None:
                protocol.scope[SUBSCRIPTION] = ask  # the route's way
                return None
            make = self.resuming  # bus subscriptions of its own, from the journal
        self.loop = protocol.loop
        line = None
        if protocol.access_log:  # what uvicorn logs: the path, the query without a credential
            line = (get_client_addr(scope), get_path_with_query_string(scope))  # type: ignore[arg-type]
        stream = make(self, ask, protocol.server_state, line)
        if self.cors is not None:
            stream.cors = self.cors_lines(self.cors, scope["headers"])
        return stream

    def wanted(self, patterns: tuple[str, ...]) -> dict[str, bool]:
        """The type matches of a pattern list, shared by the streams that ask for it."""
        filters = self._filters
        found = filters.get(patterns)
        if found is None:
            if len(filters) >= _FILTERS:
                filters.clear()
            found = filters[patterns] = {}
        return found

    def chunk(self, event: HubEvent) -> bytes:
        """An event as a chunk of the response body, made once for every stream it goes to."""
        if event is not self._event:
            self._bytes = _chunk(sse_event(self.hub, event).encode())
            self._event = event
        return self._bytes

    def head(self, state: ServerState, cors: bytes = b"") -> bytes:
        """The response head (with the ``cors`` header lines) and the first chunk (the
        server's headers change every second: the date)."""
        defaults = state.default_headers
        if defaults is not self._defaults:
            lines = b"".join(b"%s: %s\r\n" % (name.lower(), value) for name, value in defaults)
            self._head = STATUS_LINE[200] + lines + _HEADERS
            self._whole = self._head + _CHUNKED + _FIRST_CHUNK
            self._defaults = defaults
        if not cors:
            return self._whole
        return b"%s%s%s%s" % (self._head, cors, _CHUNKED, _FIRST_CHUNK)

    @staticmethod
    def cors_lines(cors: CORSMiddleware, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The header lines ``cors`` adds to a response to a request with ``headers``: the
        middleware's own code, given an empty response head (it awaits nothing)."""
        message: dict[str, Any] = {"type": "http.response.start", "status": 200, "headers": []}
        step = cors.send(message, _nowhere, Headers(raw=headers))
        try:
            step.send(None)
        except StopIteration:
            pass
        else:  # pragma: no cover  (a middleware that awaits something: no lean stream then)
            step.close()
            raise RuntimeError("the CORS middleware awaited something")
        return b"".join(b"%s: %s\r\n" % pair for pair in message["headers"])

    def join_later(self, stream: SseStream) -> None:
        """Join ``stream`` once the bus subscriptions it needs are made."""
        task = asyncio.get_running_loop().create_task(stream.join())
        self._joining.add(task)
        task.add_done_callback(self._joining.discard)


class SseStream(asyncio.Protocol):
    """One subscriber's SSE stream: its connection's protocol, the hub's subscriber
    (:class:`gateway.events.listeners.Subscriber`) and an entry of the app's keepalive pass
    (:class:`gateway.events.sse_keepalives.StreamKeepalives`).

    Args:
        lean: what the app's streams share.
        ask: the checked request.
        state: the server's state (its connections: told of a graceful shutdown).
        line: the client and the target for the access log line, None when the server logs no
            access.
    """

    __slots__ = (
        "ask",
        "cors",
        "ended",
        "last_seq",
        "lean",
        "line",
        "opened",
        "patterns",
        "paused",
        "pending",
        "presence",
        "presence_id",
        "quiet_since",
        "state",
        "transport",
        "_cut",
        "_wanted",
    )

    def __init__(
        self, lean: LeanSse, ask: Subscription, state: ServerState, line: tuple[str, str] | None
    ) -> None:
        self.lean = lean
        self.ask: Subscription | None = ask
        self.state = state
        self.line = line
        self.cors = b""  # the CORS header lines of its response
        self.patterns = tuple(ask.patterns)
        self._wanted = lean.wanted(self.patterns)
        self.transport: asyncio.Transport | None = None
        self.last_seq = 0
        self.presence_id = ""
        self.presence = False
        self.opened = False  # the head is written; it is the hub's and counted in the metrics
        self.ended = False  # no more writes: it is over, or its last chunk is written
        self.paused = False
        self.pending: list[HubEvent] | None = None  # events held while the transport is full
        self.quiet_since = 0.0
        self._cut: asyncio.TimerHandle | None = None

    # The connection --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Handed the connection: join the hub at once where its subscriptions run."""
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.state.connections.add(self)  # type: ignore[arg-type]  # told of a shutdown
        hub = self.lean.hub
        if hub.live(self.patterns):
            hub.acquire_now(self.patterns)
            self._start()
        else:
            self.lean.join_later(self)

    async def join(self) -> None:
        """Make the bus subscriptions the stream needs, then start it (or answer the error
        the route would)."""
        hub = self.lean.hub
        try:
            await hub.acquire(self.patterns)
        except Exception as exc:
            if not self.ended:
                await self._refuse(exc)
            return
        if self.ended:  # gone, or the server shut down, meanwhile
            hub.release(self.patterns)
            return
        self._start()

    def _start(self) -> None:
        ask = self._open()
        self.lean.hub.attach(self, ask.last_id, caller=ask.caller, presence=ask.presence)

    def _open(self) -> Subscription:
        """Write the response head: the stream is open (counted, kept alive); the request."""
        lean, transport, ask = self.lean, self.transport, self.ask
        assert transport is not None and ask is not None and lean.loop is not None
        self.ask = None
        self._log(200)
        transport.write(lean.head(self.state, self.cors))
        self.opened = True
        lean.metrics.stream_opened()
        self.quiet_since = now = lean.loop.time()
        lean.quiet.add(self, now)
        return ask

    async def _refuse(self, exc: Exception) -> None:
        """Answer the error as the route would, then close (no stream on this connection)."""
        self.ended = True
        scope: dict[str, Any] = {
            "type": "http",
            "method": "GET",
            "scheme": "http",
            "server": None,
            "root_path": "",
            "path": "/v1/subscribe",
            "query_string": b"",
            "headers": [],
        }
        response = await self.lean.on_error(Request(scope), exc)
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._log(response.status_code)
        lines = b"".join(b"%s: %s\r\n" % pair for pair in self.state.default_headers)
        lines += b"".join(b"%s: %s\r\n" % pair for pair in response.raw_headers)
        lines += self.cors
        status = STATUS_LINE[response.status_code]
        transport.write(b"%s%sconnection: close\r\n\r\n%s" % (status, lines, response.body))
        transport.close()

    def _log(self, status: int) -> None:
        line, self.line = self.line, None
        if line is not None:
            _ACCESS.info('%s - "%s %s HTTP/%s" %d', line[0], "GET", line[1], "1.1", status)

    def data_received(self, data: bytes) -> None:
        """What a client sends on its stream is not read (no request follows it)."""

    def eof_received(self) -> bool | None:
        return None  # the client is done: the transport closes

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        pending, self.pending = self.pending, None
        if pending and not self.ended and self.transport is not None:
            chunk = self.lean.chunk
            self.transport.write(b"".join([chunk(event) for event in pending]))

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.pending = None
        self.transport = None
        self.state.connections.discard(self)  # type: ignore[arg-type,unused-ignore]
        if self._cut is not None:
            self._cut.cancel()
            self._cut = None
        if self.opened:
            self.opened = False
            self.lean.hub.close(self)
            self.lean.metrics.stream_closed()

    def shutdown(self) -> None:
        """The server begins a graceful shutdown (uvicorn calls each connection's)."""
        self._finish(SHUTTING_DOWN)

    # The hub's subscriber --------------------------------------------------------------

    def wants(self, type_: str) -> bool:
        wanted = self._wanted.get(type_)
        if wanted is None:
            cache = self._wanted
            if len(cache) >= _TYPES:
                cache.clear()
            wanted = cache[type_] = matches_any(self.patterns, type_)
        return wanted

    def offer(self, event: HubEvent) -> None:
        if event.seq > self.last_seq:
            self.last_seq = event.seq
            self.notify(event)

    def notify(self, event: HubEvent) -> None:
        if self.ended:
            return
        if self.paused:  # the client reads slower than events come: they wait, to a bound
            pending = self.pending
            if pending is None:
                pending = self.pending = []
            if len(pending) < self.lean.queue_size:
                pending.append(event)
            else:
                self._overflow()
            return
        transport = self.transport
        assert transport is not None and self.lean.loop is not None
        transport.write(self.lean.chunk(event))
        self.quiet_since = self.lean.loop.time()

    def end(self) -> None:
        """The gateway shuts down (:meth:`gateway.state.Gateway.begin_shutdown`)."""
        self._finish(SHUTTING_DOWN)

    # Its end ---------------------------------------------------------------------------

    def _finish(self, last: str) -> None:
        """Write what waits and the last chunk, then close the connection."""
        if self.ended:
            return
        self.ended = True
        transport = self.transport
        if transport is None:
            return
        if self.opened:
            pending, self.pending = self.pending or [], None
            chunks = [self.lean.chunk(event) for event in pending]
            transport.write(b"".join([*chunks, _chunk(last.encode()), _LAST_CHUNK]))
        transport.close()
        if transport.get_write_buffer_size() and self.lean.loop is not None:
            # closing waits for the client to take what is written, which may be never
            self._cut = self.lean.loop.call_later(SLOW_CUT_S, self._cut_off)

    def _overflow(self) -> None:
        """Events piled up past the queue: the stream ends with the overflow error, and the
        connection is cut if the client still reads nothing :data:`SLOW_CUT_S` later."""
        self.pending = None
        self._finish(OVERFLOW)

    def _cut_off(self) -> None:
        self._cut = None
        transport = self.transport
        if transport is not None:
            log.warning("SSE client too slow and not reading: connection cut")
            transport.abort()
