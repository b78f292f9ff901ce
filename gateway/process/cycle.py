"""What a streamed response can learn and do about its connection under uvicorn.

ASGI gives an app no way to see a server shutting down or to drop a connection whose client
reads nothing. uvicorn's ``send`` is a bound method of its per-request cycle, which the app
keeps in the scope (:data:`SERVER_CYCLE`, set in :mod:`gateway.app`); the streams use it for
both. Under another server there is no cycle, and these fall back to doing nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from gateway.process.http_protocol import CorkedTransport

__all__ = ["DIRECT_CYCLE", "SERVER_CYCLE", "SLOW_CUT_S", "chunk_writer", "cut", "direct_cycle",
           "default_lines", "on_shutdown", "server_closing", "write_whole"]  # fmt: skip

log = logging.getLogger("busgate.gateway")

#: Where the app keeps the server's per-request object.
SERVER_CYCLE: Final = "busgate.server_cycle"
#: Where the gateway's fast path keeps the cycle :func:`write_whole` may write to.
DIRECT_CYCLE: Final = "busgate.direct_cycle"
#: Seconds a stream whose client reads nothing is given past its own end (an SSE client marked
#: too slow, an NDJSON answer past its timeout) before its connection is cut: a write to a
#: client that does not read waits forever, holding the response and what it holds.
SLOW_CUT_S: Final = 5.0


def server_closing(scope: Scope) -> Callable[[], bool]:
    """A test for "the server is shutting down", from the server's own per-request object.

    uvicorn marks every response in progress ``keep_alive = False`` when it starts a graceful
    shutdown, then waits for them to end; an SSE stream never ends on its own, so it watches
    that mark (whatever hosts the app: ``busgate gateway``, ``busgate run`` or a test). A
    connection that was not keep-alive from the start, or another server, gives no signal.
    """
    cycle = scope.get(SERVER_CYCLE)
    if getattr(cycle, "keep_alive", None) is not True:
        return lambda: False
    return lambda: getattr(cycle, "keep_alive", True) is False


def on_shutdown(scope: Scope, callback: Callable[[], None] | None) -> bool:
    """Have ``callback`` called when the server starts a graceful shutdown while this response
    streams (told by the gateway's protocol,
    :class:`gateway.process.http_protocol.CorkedTransport`); ``None`` when the stream ends (the
    callback holds the stream, which holds the cycle that holds the transport: left there, a
    departed stream is cyclic garbage).

    Returns:
        False where nobody would call it (another protocol or server): poll
        :func:`server_closing` then.
    """
    transport = getattr(scope.get(SERVER_CYCLE), "transport", None)
    if not isinstance(transport, CorkedTransport):
        return False
    transport.on_shutdown = callback
    return True


def chunk_writer(scope: Scope) -> Callable[[bytes], bool] | None:
    """A writer of one whole body chunk of this streamed response straight to its connection,
    as uvicorn's ``send`` writes it (chunked), for a stream's timer: an SSE keepalive costs a
    write, not a wake-up of the stream's task and a pass through the ASGI stack.

    The writer returns False (nothing written) unless the response has started, is chunked,
    not complete, and the connection takes more now (no write is waiting for the client): then
    the chunk must go the ASGI way, after what waits. ``None`` under another server.
    """
    cycle: Any = direct_cycle(scope.get(SERVER_CYCLE))
    if cycle is None:
        return None

    def write(data: bytes) -> bool:
        if (
            not cycle.response_started
            or cycle.response_complete
            or cycle.disconnected
            or not cycle.chunked_encoding
            or cycle.flow.write_paused
        ):
            return False
        transport = cycle.transport
        write = getattr(transport, "write_whole", None) or transport.write
        write(b"%x\r\n%s\r\n" % (len(data), data))
        return True

    return write


def cut(scope: Scope, why: str) -> bool:
    """Drop the request's connection at once (no more bytes are written to it).

    Returns:
        Whether there was a connection to drop (False under a server without the cycle).
    """
    transport = getattr(scope.get(SERVER_CYCLE), "transport", None)
    if transport is None:
        return False
    log.warning("%s: connection cut", why)
    transport.abort()
    return True


def direct_cycle(cycle: object) -> RequestResponseCycle | None:
    """``cycle`` when :func:`write_whole` can write to it: uvicorn's httptools cycle, whose
    ``send`` it does the work of (under h11 or another server, None: the ASGI way)."""
    return cycle if type(cycle) is RequestResponseCycle else None


def whole_body(scope: Scope) -> bytes | None:
    """The request's body when all of it has arrived, taken as uvicorn's ``receive`` takes it.

    A request through the gateway usually arrives in one read, its body with its head; a
    ``receive`` call for it costs a coroutine, an event's wait and a message dict per request.

    Returns:
        The body; None when it must be received the ASGI way: no direct cycle, more of the body
        to come, a ``100 Continue`` to send first, the client gone or the response over.
    """
    cycle: Any = scope.get(DIRECT_CYCLE)
    if (
        cycle is None
        or cycle.more_body
        or cycle.waiting_for_100_continue
        or cycle.disconnected
        or cycle.response_complete
    ):
        return None
    body = cycle.body
    cycle.body = type(body)()  # as receive leaves it (bytearray or bytes, by uvicorn version)
    cycle.message_event.clear()
    return bytes(body)


def write_whole(scope: Scope, status: int, headers: bytes, body: bytes) -> bool:
    """Write a whole response in one call, as uvicorn's ``send`` writes a start and a body.

    The answer to every request through the gateway goes out here: ``send`` checks each
    header against a regular expression on every response, and the two ASGI messages cost a
    tenth of the gateway's CPU per small answer. The same bytes leave, in the same order
    (the server's date and server headers first), and the cycle ends the same way (a
    connection not kept alive is closed after it).

    Args:
        scope: the request's scope; :data:`DIRECT_CYCLE` names the cycle (else False).
        status: the status code.
        headers: the header lines, each ending in CRLF, content-length among them; only
            values this gateway made (nothing a caller or a service sent unchecked).
        body: the whole body (content-length bytes).

    Returns:
        False when the response must be sent the ASGI way: no direct cycle, a response
        already started, the client gone or not reading (``send`` waits for it).
    """
    cycle: Any = scope.get(DIRECT_CYCLE)
    if cycle is None or cycle.response_started or cycle.disconnected or cycle.flow.write_paused:
        return False
    defaults = default_lines(cycle.default_headers)
    if defaults is None:
        return False
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    if cycle.access_log:
        own = cycle.scope
        cycle.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(own),
            own["method"],
            get_path_with_query_string(own),
            own["http_version"],
            status,
        )
    keep_alive = cycle.keep_alive
    close = b"" if keep_alive else b"connection: close\r\n"
    transport = cycle.transport  # the gateway's CorkedTransport need not hold it
    write = getattr(transport, "write_whole", None) or transport.write
    write(b"".join((STATUS_LINE[status], defaults, headers, close, b"\r\n", body)))
    cycle.response_complete = True
    cycle.message_event.set()
    if not keep_alive:
        cycle.transport.close()
    cycle.on_response()
    return True


class _DefaultLines:
    """The server's default headers (a list uvicorn replaces every second, with the date) as
    the lines ``send`` writes for them, made once per list."""

    headers: list[tuple[bytes, bytes]] | None = None
    lines: bytes | None = None

    @classmethod
    def of(cls, headers: list[tuple[bytes, bytes]]) -> bytes | None:
        """The lines; None if a header would not pass ``send``'s checks (it raises then)."""
        if headers is not cls.headers:
            cls.headers = headers
            cls.lines = None
            if not any(HEADER_RE.search(n) or HEADER_VALUE_RE.search(v) for n, v in headers):
                cls.lines = b"".join(b"%s: %s\r\n" % (n.lower(), v) for n, v in headers)
        return cls.lines


def default_lines(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The server's default headers (uvicorn's list, a new one every second, with the date)
    as the lines uvicorn's ``send`` writes for them; None if one would not pass its checks."""
    return _DefaultLines.of(headers)
