"""The gateway's HTTP/1.1 protocol: uvicorn's httptools protocol with a header deadline.

uvicorn closes a keep-alive connection idle between requests (``timeout_keep_alive``), but
nothing bounds the time a client takes to send a request's line and headers: a socket that
connects and says nothing, or sends a header byte every few seconds (slowloris), holds a
connection forever. Here every request's head must arrive within :data:`HEADER_TIMEOUT_S` of
the connection, or of its first byte on a kept-alive connection (Go's ``ReadHeaderTimeout``,
nginx's ``client_header_timeout``); then the client gets ``408 Request Timeout`` and the
connection is closed. The body is not bounded here: a slow upload is the app's business.

It tells a streamed response that the server starts a graceful shutdown, through the
connection's :class:`CorkedTransport` (``on_shutdown``), so an idle SSE stream ends at once
without looking every few seconds (``gateway.process.cycle.on_shutdown``).

It also writes each response in one syscall: uvicorn writes a response's head and its body
separately, and a socket write is a fifth of the gateway's CPU per request on a small answer.
:class:`CorkedTransport` holds what is written until the response is complete, or until the
end of the loop iteration for a streamed one (an SSE stream's head leaves at once).

A route the app answers in the protocol itself hands the connection over: ``GET
/v1/subscribe`` becomes an SSE stream that is the connection's protocol
(``gateway.events.sse_lean``; the app's ``lean_sse`` says which requests), with no ASGI cycle.

A plain ``POST`` that arrives whole in one read (what a client waiting for each answer sends)
is read by the C accelerator (``bus.native._hotpath.http_request``) and handed to the app's
``direct_requests`` without uvicorn's parser and its eight callbacks (a fifth of the gateway's
instructions per request); anything else, and every request under ``BUSGATE_PURE_PYTHON``, is
fed to uvicorn's parser, the reference, as before.

And it keeps one keep-alive timer per connection, not one per response: uvicorn arms a timer
after every response and cancels it when the next request's bytes arrive (a timer made and
cancelled per request, 2-3 % of the gateway's instructions per request). Here the connection
notes when it went idle; its one timer, when it fires, closes a connection idle for
``timeout_keep_alive`` or sleeps on to the new deadline (the same bound, kept lazily).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final, Protocol

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bus.accelerators import accelerator
from gateway.websocket.lean import upgrade

__all__ = [
    "HEADER_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "CorkedTransport",
    "HeaderDeadlineProtocol",
    "protocol_class",
]

log = logging.getLogger("busgate.gateway")

#: Seconds a request's line and headers may take to arrive.
HEADER_TIMEOUT_S: Final = 10.0
#: Seconds an idle keep-alive connection is kept between requests (uvicorn's default, 5).
KEEP_ALIVE_S: Final = 5

#: One plain request read whole (None: pure Python, every request goes to uvicorn's parser).
_WHOLE_REQUEST: Final[
    Callable[[bytes], tuple[bytes, list[tuple[bytes, bytes]], bytes, bool] | None] | None
] = getattr(accelerator("bus.native._hotpath"), "http_request", None)


class CorkedTransport:
    """A socket transport whose writes are held and sent together by :meth:`flush`: when the
    protocol says a response is complete, before the transport closes, or at the end of the
    loop iteration of the first write held, whichever comes first."""

    __slots__ = ("_held", "_loop", "on_shutdown", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        #: called when the server starts a graceful shutdown while a response streams
        self.on_shutdown: Callable[[], None] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def write_whole(self, data: bytes) -> None:
        """Write a whole response at once (``gateway.process.cycle.write_whole``): nothing to
        hold."""
        if self._held:
            self._held.append(data)
            self.flush()
        elif not self.transport.is_closing():
            self.transport.write(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is held, in one call."""
        held = self._held
        if held:
            data = held[0] if len(held) == 1 else b"".join(held)
            held.clear()
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._held.clear()
        self.transport.abort()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:  # pause_reading, set_protocol, ...
        return getattr(self.transport, name)


class DirectTaker(Protocol):
    """What answers some requests from the protocol's callbacks, without the ASGI stack
    (the app's ``direct_requests``: ``gateway.routes.request_direct``)."""

    def take(self, protocol: Any) -> bool:
        """Take the request whose head was just read (False: uvicorn goes on with it)."""
        ...

    def take_whole(
        self,
        protocol: Any,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
    ) -> bool:
        """Take a whole request read in one piece (False: its bytes go to uvicorn's parser)."""
        ...


def direct_taker(app: object) -> DirectTaker | None:
    """The ``direct_requests`` of the app under uvicorn's middleware, if it has one."""
    for _ in range(4):
        taker = getattr(app, "direct_requests", None)
        if taker is not None:
            return taker  # type: ignore[no-any-return]
        app = getattr(app, "app", None)
    return None


def _under_middleware(app: object, name: str) -> Any:
    """The app's attribute ``name`` (None: it has none), under uvicorn's middleware."""
    for _ in range(4):
        found = getattr(app, name, None)
        if found is not None:
            return found
        app = getattr(app, "app", None)
    return None


class _HandedOver:
    """The request cycle of a connection handed over to another protocol: complete, so
    uvicorn's ``on_body`` and ``on_message_complete`` pass over what is left of the request."""

    response_complete = True


_HANDED_OVER: Final = _HandedOver()


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request head slower than ``header_timeout`` gets 408."""

    header_timeout: float = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One timer per connection, moved lazily: a request head records when it started and
        # a finished one clears it; the timer, when it fires, answers 408 or sleeps on to the
        # current head's deadline (no timer made and cancelled per request).
        self._head_started: float | None = None
        self._head_deadline: asyncio.TimerHandle | None = None
        # The keep-alive bound, kept the same way: when the connection went idle (None: a
        # request is on its way or being answered) and the one timer that checks it.
        self._idle_since: float | None = None
        self._idle_check: asyncio.TimerHandle | None = None
        self.direct: DirectTaker | None = None  # set when connected
        #: The protocol the connection goes to once the data read is parsed (a lean route's).
        self._taken: asyncio.Protocol | None = None
        #: uvicorn's parser is between requests (none begun and not complete): a read holding
        #: one whole request may skip it.
        self._between = True

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        corked = CorkedTransport(transport, self.loop)
        super().connection_made(corked)  # type: ignore[arg-type]
        self.direct = direct_taker(self.app)
        self._arm()

    def on_response_complete(self) -> None:
        # uvicorn's, with the lazy keep-alive timer (see the module docstring).
        transport = self.transport
        if isinstance(transport, CorkedTransport):
            transport.on_shutdown = None  # the next request's response is another one
        self._flush()
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._idle_since = None
        self.flow.resume_reading()
        if self.pipeline:  # pipelined requests: the next one starts
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._idle_check is None:
            self._idle_check = self.loop.call_later(self.timeout_keep_alive, self._check_idle)

    def _unset_keepalive_if_required(self) -> None:
        # uvicorn calls this when bytes arrive (and when the connection is lost, handled below)
        self._idle_since = None

    def _check_idle(self) -> None:
        self._idle_check = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return  # busy: the next response arms the timer again
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:  # idle since a later response than the one the timer was set for
            self._idle_check = self.loop.call_later(left, self._check_idle)
            return
        self.timeout_keep_alive_handler()

    def shutdown(self) -> None:
        super().shutdown()
        transport = self.transport
        if isinstance(transport, CorkedTransport) and transport.on_shutdown is not None:
            told, transport.on_shutdown = transport.on_shutdown, None
            try:
                told()
            except Exception:  # one stream's bug must not stop the server's shutdown
                log.exception("a stream's shutdown hook failed")

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol gets the socket itself (it writes its frames its own way);
        # this connection's timers are done with it. /ws is answered without ASGI
        # (gateway/websocket/lean.py); any other upgrade goes uvicorn's way.
        self._flush()
        transport = self.transport
        if isinstance(transport, CorkedTransport):
            self.transport = transport.transport
        self._stop_timers()
        if not upgrade(self, self.transport):
            super().handle_websocket_upgrade()

    def _flush(self) -> None:
        transport = self.transport
        if isinstance(transport, CorkedTransport):
            transport.flush()

    def on_headers_complete(self) -> None:
        self._head_started = None  # first: a WebSocket upgrade returns from here early
        if self._taken is not None:
            return  # a request pipelined behind a stream: never answered
        direct = self.direct
        if direct is not None and direct.take(self):
            return  # answered from the callbacks (gateway.routes.request_direct)
        # A route the app answers in the protocol itself (``app.lean_sse``,
        # gateway.events.sse_lean): the connection becomes the stream's once the data is read.
        lean = _under_middleware(self.app, "lean_sse")
        if lean is not None and (stream := lean(self)) is not None:
            self._taken = stream
            self.cycle = _HANDED_OVER  # type: ignore[assignment]  # uvicorn skips its body
            return
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._between and _WHOLE_REQUEST is not None and self._taken is None:
            direct = self.direct
            whole = _WHOLE_REQUEST(data) if direct is not None else None
            if whole is not None and direct.take_whole(self, *whole):  # type: ignore[union-attr]
                # What uvicorn's data_received and our header deadline would have noted.
                self._idle_since = self._head_started = None
                return
        super().data_received(data)
        if self._taken is not None:
            self._hand_over(self._taken)

    def _hand_over(self, protocol: asyncio.Protocol) -> None:
        """Make ``protocol`` the connection's: this one's timers stop, and the server counts
        the other among its connections (it tells it of a shutdown)."""
        transport = self.transport
        if transport.is_closing():  # a 400 for bytes that followed the head: nothing to hand over
            self._taken = self.cycle = None  # type: ignore[assignment]  # none was made
            return
        self._stop_timers()
        self.connections.discard(self)
        self.flow.resume_reading()
        if isinstance(transport, CorkedTransport):
            transport.flush()
            transport = transport.transport
        self.parser = None  # type: ignore[assignment]  # it holds this protocol: no cycle left
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._between = False
        if self._head_started is None:
            self._arm()  # a later request's head, from its first byte (idle: keep-alive's)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._between = True

    def connection_lost(self, exc: Exception | None) -> None:
        transport = self.transport
        if isinstance(transport, CorkedTransport):
            transport.on_shutdown = None  # it holds a stream, which holds this transport
        self._stop_timers()
        super().connection_lost(exc)

    def _stop_timers(self) -> None:
        self._head_started = self._idle_since = None
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None

    def _arm(self) -> None:
        self._head_started = self.loop.time()
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.header_timeout, self._check_head)

    def _check_head(self) -> None:
        self._head_deadline = None
        started = self._head_started
        if started is None:
            return  # no head on its way: the next one arms a timer again
        left = started + self.header_timeout - self.loop.time()
        if left > 0:  # a later head than the one the timer was set for
            self._head_deadline = self.loop.call_later(left, self._check_head)
            return
        self._head_started = None
        self._head_too_slow()

    def _head_too_slow(self) -> None:
        transport = self.transport
        if transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered (pipelined heads wait their turn)
        log.info("HTTP client too slow to send a request head: 408, closed")
        transport.write(_timeout_response(self.header_timeout))
        transport.close()


def _timeout_response(seconds: float) -> bytes:
    text = f"request line and headers took more than {seconds:g} s".encode()
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(text), text)
    )


def protocol_class(header_timeout: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class for uvicorn's ``http`` setting, with this header deadline."""
    if header_timeout == HeaderDeadlineProtocol.header_timeout:
        return HeaderDeadlineProtocol
    return type(
        "HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout": header_timeout}
    )
