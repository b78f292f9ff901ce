"""``/ws`` without the ASGI stack: the WebSocket spoken from the HTTP protocol's own socket
(PROTOCOL.md 6.8; issue 35 goal 1).

Under uvicorn every ``/ws`` client costs a websockets ``ServerProtocol``, uvicorn's protocol
with its ``asyncio.Queue``, ``Event`` and scope, Starlette's ``WebSocket``, an ASGI task and
a sender task: about 143 objects the garbage collector tracks and 28 KB per idle client, and
full collections were a quarter of the gateway's CPU while 10,000 clients joined. Here, when
the gateway's HTTP protocol (:mod:`gateway.process.http_protocol`) sees an upgrade to the
path of an :class:`~gateway.websocket.ws.ObjectsEndpoint`, :func:`upgrade` answers the
handshake itself (:mod:`gateway.websocket.ws_handshake`; what the endpoint's connections
share is its :class:`~gateway.websocket.ws_site.Site`) and hands the socket to one
:class:`LeanWebSocket`: a protocol object with ``__slots__`` that reads frames with
:class:`~gateway.websocket.ws_reader.FrameReader`, hands objects to the endpoint's object
server, and writes the shared frames of :class:`~gateway.websocket.ws_frames.FrameCache`
straight to the transport, at the end of the loop iteration, with no task, queue or lock of
its own.

What stays the same as the ASGI path (:mod:`gateway.websocket.ws`): the Object System
semantics (the endpoint's server, presence, ``last``, unlinked ``services/request`` answered
with 503), admission (the gateway's keys, tokens and rates; refused: ``403``), no Origin
check, the close codes (1008 bad object or too slow, 1009 too large, 1011 keepalive timeout,
1012 server restart), the queue bound (``max_queue`` frames waiting while the transport says
it is full: then the client is cut, told 1008 and dropped within :data:`CLOSE_TIMEOUT`), and
the keepalive pings (``ws_ping_interval``, ``ws_ping_timeout``), written to all the endpoint's
clients due in one pass (:mod:`gateway.websocket.ws_pings`). What differs: permessage-deflate
is declined (the request goes the ASGI way instead when the gateway turns compression on and
the client offers it), as is any subprotocol; an app with a JWKS refresher goes the ASGI way
too (its middleware may fetch keys). ``ws_lean = false`` in the gateway's settings turns this
path off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Hashable
from typing import Any, Final

from bus.errors import BusError, ConfigError, DecodeError, LimitError
from bus.objects.bridge import bus_type_of
from bus.objects.codec import BusinessObject, decode_metadata, decode_object
from bus.objects.tcp import ObjectServer
from gateway.websocket.ws import CLOSE_TIMEOUT
from gateway.websocket.ws_handshake import HandshakeError, accept_response, check_upgrade, refusal
from gateway.websocket.ws_last import send_last_values
from gateway.websocket.ws_reader import (
    Close,
    FrameReader,
    Message,
    Ping,
    Pong,
    WebSocketError,
    close_frame,
    control_frame,
)
from gateway.websocket.ws_site import Site, site_of

__all__ = ["LeanWebSocket", "upgrade"]

log = logging.getLogger("busgate.gateway.ws")

_OPEN, _CLOSING, _CLOSED = 0, 1, 2
_BATCH: Final = 64  # frames joined into one write at most
_PONG: Final = 0xA
_POLICY_VIOLATION: Final = 1008
_TOO_BIG: Final = 1009
_INTERNAL_ERROR: Final = 1011
_SERVICE_RESTART: Final = 1012


def upgrade(http: Any, transport: asyncio.Transport) -> bool:
    """Take a WebSocket upgrade request off uvicorn's ``http`` protocol (its head parsed, its
    ``transport`` the socket's own): True when it is ``/ws``'s, answered here; False: not
    this path's (uvicorn's WebSocket protocol takes it)."""
    site = site_of(http.config)
    if site is None:
        return False
    path, _, query = http.url.partition(b"?")
    headers: list[tuple[bytes, bytes]] = http.scope["headers"]
    if path != site.path or http.scope["method"] != "GET":
        return False
    if site.compression and any(
        name == b"sec-websocket-extensions" and b"permessage-deflate" in value.lower()
        for name, value in headers
    ):
        return False  # the gateway compresses (ws_compression): uvicorn's protocol does
    http.connections.discard(http)
    try:
        key = check_upgrade(headers)
        principal = site.admit(http, query, headers)
    except HandshakeError as exc:
        log.info("WebSocket handshake refused (%d): %s", exc.status, exc.reason)
        _refuse(transport, exc.status, exc.reason, exc.headers)
        return True
    except BusError as exc:  # AuthError (no or bad credentials), LimitError (rate)
        log.info("WebSocket object client refused: %s", exc)
        _refuse(transport, 403, f"WebSocket refused: {exc}")
        return True
    ws = LeanWebSocket(site, transport, principal, http.server_state.connections)
    transport.set_protocol(ws)
    # httptools' parser holds the HTTP protocol, which holds it: left so, every join made a
    # cycle of two dozen objects for the garbage collector; the HTTP protocol is done now
    http.parser = None
    transport.write(accept_response(key, http.server_state.default_headers))
    ws.join()
    return True


def _refuse(transport: asyncio.Transport, status: int, text: str, headers: Any = ()) -> None:
    transport.write(refusal(status, text, headers))
    transport.close()


class LeanWebSocket(asyncio.Protocol):
    """One ``/ws`` client after its handshake: the object server's peer and the socket's
    protocol (see the module doc)."""

    __slots__ = (
        "site",
        "transport",
        "principal",
        "reader",
        "server",
        "conn",
        "state",
        "out",
        "paused",
        "early",
        "next_close_code",
        "answered",
        "watching",
        "last_values",
        "drop",
        "connections",
    )

    def __init__(
        self, site: Site, transport: asyncio.Transport, principal: Any, connections: set[Any]
    ) -> None:
        self.site = site
        #: the server's open connections (uvicorn's ``server_state``): its shutdown tells each
        self.connections = connections
        connections.add(self)
        self.transport = transport
        self.principal = principal
        self.reader = FrameReader(site.max_size)
        self.server: ObjectServer | None = None  # until joined
        self.conn: Hashable | None = None
        self.state = _OPEN
        self.out: list[bytes] | None = None  # frames not yet given to the transport
        self.paused = False
        self.early = b""  # bytes that came before it joined
        self.next_close_code = _POLICY_VIOLATION
        self.answered = True  # a pong came since its last ping (ws_pings.py)
        #: bus types that reached it live while its last values are read (ws_last.py)
        self.watching: set[str] | None = None
        self.last_values: asyncio.Task[None] | None = None
        self.drop: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ joining

    def join(self) -> None:
        """Attach to the endpoint's object server: at once when it runs, else once it has
        started (its first client waits for the link; reading waits meanwhile)."""
        endpoint = self.site.endpoint
        if endpoint.server is not None and not endpoint._lock.locked():
            endpoint._clients += 1
            self._attach(endpoint.server)
            return
        self.transport.pause_reading()
        self.site.keep(asyncio.get_running_loop().create_task(self._join_later()))

    async def _join_later(self) -> None:
        try:
            server = await self.site.endpoint._acquire({"app": self.site.app})
        except ConfigError as exc:
            log.error("WebSocket object client refused: %s", exc)
            self._start_close(_INTERNAL_ERROR)
            return
        if self.state == _CLOSED:
            self.site.release()
            return
        self._attach(server)
        with contextlib.suppress(RuntimeError):  # closing meanwhile
            self.transport.resume_reading()
        early, self.early = self.early, b""
        if early:
            self.data_received(early)

    def _attach(self, server: ObjectServer) -> None:
        site = self.site
        endpoint = site.endpoint
        self.server = server
        conn = self.conn = server.attach(self, trusted=site.trusted)
        endpoint.present[conn] = (time.time(), str(getattr(self.principal, "name", "")))
        endpoint._touch(conn)
        if site.metrics is not None:
            site.metrics.socket_opened()
        if site.pings is not None:
            site.pings.add(self, asyncio.get_running_loop().time())

    def _detach(self) -> None:
        conn, server = self.conn, self.server
        if conn is None or server is None:
            return
        self.conn = None
        site = self.site
        site.endpoint.present.pop(conn, None)
        site.endpoint._touch(conn)
        server.detach(conn)
        if site.metrics is not None:
            site.metrics.socket_closed()
        if self.last_values is not None:
            self.last_values.cancel()
            self.last_values = None
        site.release()

    # ------------------------------------------------------------------ reading

    def data_received(self, data: bytes) -> None:
        if self.server is None:
            self.early += data
            return
        if self.reader.lone_pong(data):  # the answer to a keepalive ping: a flag, no event
            self.answered = True
            return
        try:
            events = self.reader.feed(data)
        except WebSocketError as exc:
            self._fail(exc.code, exc.reason)
            return
        except LimitError as exc:
            self._fail(_TOO_BIG, str(exc))
            return
        try:
            self._dispatch(events)
        except Exception:  # a bug costs this client alone (1011), never the loop a traceback
            log.exception("WebSocket object client failed")
            self._fail_now(_INTERNAL_ERROR, "internal error")

    def _dispatch(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, Message):
                if self.state == _OPEN:
                    self._message(event.data)
            elif isinstance(event, Ping):
                if self.state != _CLOSED:
                    self.transport.write(control_frame(_PONG, event.payload))
            elif isinstance(event, Pong):
                self.answered = True
            elif isinstance(event, Close):
                self._close_received(event)

    def _message(self, data: str | bytes) -> None:
        endpoint, server, conn = self.site.endpoint, self.server, self.conn
        if server is None or conn is None:
            return
        try:
            if isinstance(data, str):
                obj = decode_metadata(data, endpoint.max_metadata)
            else:
                obj = decode_object(data, endpoint.max_metadata, endpoint.max_payload)
        except (DecodeError, LimitError) as exc:
            self.next_close_code = _TOO_BIG if isinstance(exc, LimitError) else _POLICY_VIOLATION
            server.reject(conn, exc)  # an error object, then the router's close
            return
        event = obj.event
        if event == "services/request" and endpoint._unreachable(server, obj):
            endpoint._answer_unlinked(self, obj)  # type: ignore[arg-type]
            return
        server.receive(conn, obj)
        if event == "routing/subscribe":
            endpoint._touch(conn)
            if obj.metadata.get("last") is True:
                self.watching = set()  # the last value of each bus type, then live (5.15)
                self.last_values = asyncio.get_running_loop().create_task(
                    send_last_values(self.site.app, server, conn, self, self.principal)
                )

    def _close_received(self, event: Close) -> None:
        if self.state == _OPEN:  # the client begins: echo its code (RFC 6455 5.5.1)
            self.state = _CLOSING
            self.out = None
            self.transport.write(close_frame(event.code))
        else:
            self._write_all()  # our close frame, if the transport had not taken it yet
        self._detach()
        self.transport.close()

    def _fail(self, code: int, reason: str) -> None:
        log.info("WebSocket client broke the protocol: %s (close %d)", reason, code)
        self._fail_now(code, reason)

    def _fail_now(self, code: int, reason: str) -> None:
        """Close frame and TCP close at once, not waiting for the client's answer (RFC 6455
        7.1.7); a client that takes nothing is dropped within :data:`CLOSE_TIMEOUT`."""
        self._start_close(code, reason)
        self._write_all()
        self.transport.close()

    # ------------------------------------------------------------------ writing

    def send(self, data: bytes, obj: BusinessObject) -> None:
        """Queue one encoded object (the object server's peer interface)."""
        if self.state != _OPEN:
            return
        if self.watching is not None and (bus_type := bus_type_of(obj)) is not None:
            self.watching.add(bus_type)
        frame = self.site.endpoint._frames.frame(data, text=not obj.payload)
        out = self.out
        if out is None:
            self.out = [frame]
            if not self.paused:
                self.site.mark(self)
        elif len(out) < self.site.endpoint.max_queue:
            out.append(frame)
        else:
            self._too_slow()

    def close(self, reason: str) -> None:
        """The object server closes it (after an error object, or stopping)."""
        self._start_close(self.next_close_code)

    def _too_slow(self) -> None:
        log.warning("WebSocket object client too slow: closing (1008)")
        self.out = None  # what was queued for it is dropped, and its memory freed
        self._start_close(_POLICY_VIOLATION)
        # the others hear routing/disconnect now, not when the socket is gone (and not from
        # inside the router's dispatch that found it full)
        asyncio.get_running_loop().call_soon(self._detach)

    def _start_close(self, code: int, reason: str = "") -> None:
        """Send a close frame after what is queued; the TCP connection is dropped within
        :data:`CLOSE_TIMEOUT` unless the client answers first (PROTOCOL.md 6.8)."""
        if self.state != _OPEN:
            return
        self.state = _CLOSING
        frame = close_frame(code, reason)
        if self.out is None:
            self.out = [frame]
            if not self.paused:
                self.site.mark(self)
        else:
            self.out.append(frame)
        self.drop = asyncio.get_running_loop().call_later(CLOSE_TIMEOUT, self._drop)

    def _drop(self) -> None:
        self.drop = None
        if self.state != _CLOSED:
            self.transport.abort()

    def flush(self) -> None:
        """Give the transport what is queued, a batch per write, while it takes more."""
        out = self.out
        if out is None or self.paused or self.state == _CLOSED:
            return
        write, done, count = self.transport.write, 0, len(out)
        while done < count and not self.paused:
            batch = out[done : done + _BATCH]
            done += len(batch)
            write(batch[0] if len(batch) == 1 else b"".join(batch))
        if done >= count:
            self.out = None
        else:
            del out[:done]

    def _write_all(self) -> None:
        """Give the transport everything queued at once (it is about to close)."""
        out, self.out = self.out, None
        if out and self.state != _CLOSED:
            self.transport.write(b"".join(out))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.flush()

    # ------------------------------------------------------------------ keepalive

    @property
    def pinged(self) -> bool:
        """It gets keepalive pings (ws_pings.py): open, not closing or closed."""
        return self.state == _OPEN

    def ping_unanswered(self) -> None:
        """Its pong did not come by the next ping (and ``ws_ping_timeout`` after the ping)."""
        log.info("WebSocket client left a ping unanswered: closing (1011)")
        self._fail_now(_INTERNAL_ERROR, "keepalive ping timeout")

    # ------------------------------------------------------------------ the connection

    def shutdown(self) -> None:
        """The server stops (uvicorn's graceful shutdown): 1012, then the TCP close."""
        self._start_close(_SERVICE_RESTART)
        self._write_all()
        self.transport.close()

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = _CLOSED
        self.out = None
        if self.drop is not None:
            self.drop.cancel()
            self.drop = None
        self.connections.discard(self)
        self._detach()
