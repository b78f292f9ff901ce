"""The Object System over WebSocket: ``/ws`` (docs/PROTOCOL.md section 6.8).

One WebSocket message is one object: a **text** message is metadata only (JSON), a **binary**
message is metadata, a NUL byte and exactly ``size`` payload bytes. The gateway answers the same
way: objects without payload go out as text, objects with payload as binary.

Each gateway process runs its own Object System server (:class:`~bus.objects.tcp.ObjectServer`)
for its WebSocket clients and links to the broker's object server as ``role: server``, so any
number of gateways and the broker form one network: objects, ``to``, services and
``routing/disconnect`` cross gateways. The link targets are, in order: ``link_to`` given to
:func:`create_route`, the gateway's ``objects_links`` setting (``--objects-link HOST:PORT``,
repeatable), the ``BUSGATE_OBJECTS_LINK`` environment variable (``host:port``; empty: no link),
or the host of the gateway's ``bus_url`` on port 7890. A link that is down is logged as a
WARNING (while the server runs, that is while WebSocket clients are connected).

A WebSocket client may not subscribe with ``role: server`` (which receives every object,
whatever ``to`` says) unless the gateway's ``ws_allow_server_role`` setting allows it: without
it the subscription is answered with an error object (``code: forbidden``) and logged.

The server starts with the first WebSocket client and stops when the last one leaves, so the
endpoint needs no lifespan hook; :meth:`ObjectsEndpoint.stop` is there for an app that wants
to stop it sooner. When the app has a ``state.gateway`` (``gateway.state.Gateway``), every
connection is admitted by its authentication and rate limits first (refused: close 1008).

While the gateway's server has no link (none configured, a bad address, or the hub is away), a
``services/request`` that no WebSocket client of this gateway registered a service for is
answered at once with ``services/reply`` ``{"rcd": 503, "error": ...}`` naming the link, rather
than left unanswered; :func:`check_link` (called when the app starts) logs a WARNING then.

Mount it with ``WebSocketRoute("/ws", ObjectsEndpoint())`` or ``create_route()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from collections.abc import Callable, Hashable, MutableMapping
from typing import Any, Final

from starlette.routing import WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from bus.errors import BusError, ConfigError, DecodeError, LimitError
from bus.link.bus_url import parse_bus_url
from bus.link.tls import link_context, tls_failure
from bus.objects.address import LinkTarget, parse_link_target
from bus.objects.bridge import LINK_SECRET_ENV, bus_type_of
from bus.objects.codec import (
    DEFAULT_MAX_METADATA,
    DEFAULT_MAX_PAYLOAD,
    BusinessObject,
    decode_metadata,
    decode_object,
    encode_object,
)
from bus.objects.links import LINK_REFUSED_HINT
from bus.objects.router import Router
from bus.objects.tcp import DEFAULT_PORT, Link, ObjectServer
from gateway.access.auth import ANONYMOUS
from gateway.websocket.ws_frames import EXTENSION, FrameCache, FrameWriter, Outbox
from gateway.websocket.ws_last import send_last_values

__all__ = ["DEFAULT_MAX_QUEUE", "ObjectsEndpoint", "check_link", "create_route", "link_targets"]

log = logging.getLogger("busgate.gateway.ws")

#: Objects waiting to be sent to one WebSocket client before it is closed as too slow: as many
#: as an SSE stream may let pile up (``sse_queue``), since a burst is not a slow client. The
#: frames are shared by the clients (FrameCache): a client's queue costs a slot per object.
DEFAULT_MAX_QUEUE: Final = 10_000
#: Queued frames written to one client in one write at most.
_BATCH: Final = 64
#: Seconds a client cut off as too slow has to take its close frame before its TCP connection
#: is dropped (uvicorn's close handshake timeout).
CLOSE_TIMEOUT: Final = 10.0
_POLICY_VIOLATION: Final = 1008
_TOO_BIG: Final = 1009
_INTERNAL_ERROR: Final = 1011
_LINK_ENV: Final = "BUSGATE_OBJECTS_LINK"


class _WebSocketPeer:
    """One WebSocket client: a bounded outbox drained by a sender task.

    Under :class:`gateway.websocket.ws_frames.FrameWritingProtocol` with no extension negotiated,
    the
    outbox holds each object's frame, built once for all clients, and the sender writes what
    queued up in one write; otherwise it holds the encoded objects, sent through ASGI.
    """

    def __init__(
        self, websocket: WebSocket, max_queue: int, frames: FrameCache | None = None
    ) -> None:
        self.websocket = websocket
        writer = websocket.scope.get("extensions", {}).get(EXTENSION)
        usable = frames is not None and isinstance(writer, FrameWriter) and writer.usable()
        self.writer = writer if usable else None
        #: the connection's own protocol (the gateway's server), to drop a client that is cut
        self.dropper = writer if isinstance(writer, FrameWriter) else None
        self.frames = frames if usable else None
        self.outbox: Outbox[bytes | tuple[bytes, BusinessObject] | int] = Outbox(max_queue)
        self.close_code: int | None = None
        self.next_close_code = _POLICY_VIOLATION
        self.sender: asyncio.Task[None] | None = None
        self.cutter: asyncio.Task[None] | None = None
        self.detach: Callable[[], None] = lambda: None  # leave the network (set when attached)
        self.principal: Any = None  # who it is (the gateway's admission)
        #: bus types that reached it live while its last values are read
        #: (gateway/websocket/ws_last.py)
        self.watching: set[str] | None = None
        self.last_values: asyncio.Task[None] | None = None

    def send(self, data: bytes, obj: BusinessObject) -> None:
        if self.close_code is not None:
            return
        if self.watching is not None and (bus_type := bus_type_of(obj)) is not None:
            self.watching.add(bus_type)
        frames = self.frames
        item = frames.frame(data, text=not obj.payload) if frames is not None else (data, obj)
        if not self.outbox.put(item):
            log.warning("WebSocket object client too slow: closing (1008)")
            self.close_code = _POLICY_VIOLATION
            self._force_close_marker()
            # The sender may be waiting for a client that reads nothing: its marker would
            # never be reached. Stop it and close now (bounded by the close handshake's
            # timeout when even the close frame cannot be written).
            self.cutter = asyncio.get_running_loop().create_task(self._cut())

    async def _cut(self) -> None:
        self.detach()  # the others hear routing/disconnect now, not when the socket is gone
        sender = self.sender
        if sender is not None and not sender.done():
            sender.cancel()
            await asyncio.wait({sender})
        self.outbox.items.clear()  # what was queued for it is dropped, and its memory freed
        # A client that reads nothing never takes the close frame: its connection is dropped
        # at the close handshake's bound (PROTOCOL.md 6.8). The close itself waits until the
        # transport takes more, which for such a client is never, or the drop.
        if self.dropper is not None:
            self.dropper.drop_within(CLOSE_TIMEOUT)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT + 1.0):
                await self.websocket.close(_POLICY_VIOLATION)

    def close(self, reason: str) -> None:
        if self.close_code is None:
            self.close_code = self.next_close_code
            self._force_close_marker()

    def _force_close_marker(self) -> None:
        self.outbox.put_last(self.close_code or _POLICY_VIOLATION)

    async def run_sender(self) -> None:
        """Send queued objects (text without payload, binary with) until a close marker."""
        outbox, items = self.outbox, self.outbox.items
        while True:
            item = await outbox.get()
            if isinstance(item, bytes):  # frames: with what queued up meanwhile, one write
                batch = [item]
                while items and len(batch) < _BATCH:
                    head = items[0]
                    if not isinstance(head, bytes):
                        break  # a close marker: after this write
                    batch.append(head)
                    items.popleft()
                assert self.writer is not None
                if not await self.writer.write(b"".join(batch)):
                    return  # closed: whoever closed it announces the departure
                continue
            if isinstance(item, int):
                with contextlib.suppress(Exception):
                    await self.websocket.close(item)
                return
            data, obj = item
            try:
                if obj.payload:
                    await self.websocket.send_bytes(data)
                else:
                    await self.websocket.send_text(data[:-1].decode("utf-8"))
            except WebSocketDisconnect:
                return  # the client is gone: its receive loop announces the departure


def _settings(scope: Scope) -> Any:
    app = scope.get("app")
    gateway = getattr(getattr(app, "state", None), "gateway", None)
    return getattr(gateway, "settings", None)


def _default_links(scope: Scope) -> list[LinkTarget]:
    return link_targets(_settings(scope))


def link_targets(settings: Any) -> list[LinkTarget]:
    """Where the gateway's object server links: the settings' ``objects_links``, else
    ``BUSGATE_OBJECTS_LINK``, else the bus host on port 7890 (``[]``: no link). A
    ``tls://HOST:PORT`` link speaks TLS, trusting the system's CAs and ``BUSGATE_BUS_TLS_CA``
    and presenting ``BUSGATE_BUS_TLS_CERT``/``_KEY`` (PROTOCOL.md 4.7).

    Raises:
        ConfigError: a link is not ``[tls://]host:port``.
    """
    configured = getattr(settings, "objects_links", ())
    if configured:
        return [parse_link_target(text) for text in configured]
    text = os.environ.get(_LINK_ENV)
    if text is not None:
        return _parse_link(text)
    bus_url = getattr(settings, "bus_url", None)
    host = parse_bus_url(bus_url).host if isinstance(bus_url, str) else None  # the first server
    return [LinkTarget(host or "127.0.0.1", DEFAULT_PORT)]


async def check_link(settings: Any, timeout: float = 2.0) -> bool:
    """Try the Object System links once, at start; log a WARNING when ``/ws`` will lack one.

    Returns:
        True when every hub answered.
    """
    try:
        targets = link_targets(settings)
    except ConfigError as exc:
        log.warning("/ws has no Object System link: %s", exc)
        return False
    if not targets:
        log.warning(
            "/ws has no Object System link (%s is empty): WebSocket clients reach only each "
            "other, and their services/request get rcd 503",
            _LINK_ENV,
        )
        return False
    reached = True
    for target in targets:
        try:
            context = link_context() if target.tls else None
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(target.host, target.port, ssl=context)
        except (OSError, TimeoutError, ConfigError) as exc:
            log.warning(
                "/ws: the Object System hub at %s cannot be reached (%s); WebSocket "
                "clients' services/request get rcd 503 until it can (%s=host:port sets it)",
                target,
                _why(exc),
                _LINK_ENV,
            )
            reached = False
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return reached


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return tls_failure(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or "no answer"


def _parse_link(text: str) -> list[LinkTarget]:
    if not text:
        return []
    try:
        return [parse_link_target(text if text.rpartition(":")[0] else f"127.0.0.1{text}")]
    except ConfigError as exc:
        raise ConfigError(f"{_LINK_ENV} / link_to must be [tls://]host:port, got {text!r}") from exc


class ObjectsEndpoint:
    """The ``/ws`` ASGI endpoint and the gateway's own object server.

    Args:
        link_to: ``host:port`` of the server to link to (``""``: none; ``None``: see module doc).
        max_metadata: metadata limit per object (default 8192 bytes).
        max_payload: payload limit per object (default 8 MiB).
        max_queue: objects queued per client before it is closed as too slow (default 10,000).
        link_wait: seconds the first client waits for the link to come up (default 2 s).

    Raises:
        ConfigError: ``link_to`` is not ``host:port``. A bad ``BUSGATE_OBJECTS_LINK`` is logged
            and closes each WebSocket with 1011 (it is read when the first client comes).
    """

    def __init__(
        self,
        link_to: str | None = None,
        *,
        max_metadata: int = DEFAULT_MAX_METADATA,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        max_queue: int = DEFAULT_MAX_QUEUE,
        link_wait: float = 2.0,
    ) -> None:
        if link_to is not None:
            _parse_link(link_to)  # a bad address is an error when the app is built
        self.link_to = link_to
        self.max_metadata = max_metadata
        self.max_payload = max_payload
        self.max_queue = max_queue
        self.link_wait = link_wait
        self.server: ObjectServer | None = None
        self.links: list[Link] = []
        self.link_text = ""
        self._clients = 0
        #: each WebSocket client's connection -> (since, caller): the gateway's presence
        self.present: dict[Hashable, tuple[float, str]] = {}
        #: the connections that came, subscribed or went since the gateway's presence last
        #: looked (it reads only those); ``None`` until it looks, so nothing piles up unread
        self.touched: set[Hashable] | None = None
        self._lock = asyncio.Lock()
        self._frames = FrameCache()  # shared by this endpoint's clients

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        principal = await self._admit(websocket)
        if principal is None:
            return
        await websocket.accept()
        try:
            server = await self._acquire(scope)
        except ConfigError as exc:
            log.error("WebSocket object client refused: %s", exc)
            await websocket.close(_INTERNAL_ERROR)
            return
        peer = _WebSocketPeer(websocket, self.max_queue, self._frames)
        allowed = bool(getattr(_settings(scope), "ws_allow_server_role", False))
        conn = server.attach(peer, trusted=allowed)
        self.present[conn] = (time.time(), str(getattr(principal, "name", "")))
        self._touch(conn)
        peer.principal = principal
        peer.detach = lambda: server.detach(conn)
        sender = peer.sender = asyncio.create_task(peer.run_sender())
        try:
            await self._receive_loop(websocket, server, conn, peer, sender)
        finally:
            self.present.pop(conn, None)
            self._touch(conn)
            server.detach(conn)
            if not sender.done():
                peer.close("gone")
            # asyncio.wait: neither a cancelled sender nor its error is raised here
            done, _ = await asyncio.wait({sender}, timeout=5.0)
            if not done:
                sender.cancel()
            if peer.cutter is not None:
                await asyncio.wait({peer.cutter}, timeout=5.0)
            if peer.last_values is not None:
                peer.last_values.cancel()
            await self._release()

    def _touch(self, conn: Hashable) -> None:
        touched = self.touched
        if touched is not None:
            touched.add(conn)

    async def _admit(self, websocket: WebSocket) -> Any:
        """The caller (the gateway's principal; anonymous without a gateway), or None: refused
        and closed."""
        gateway = (
            getattr(websocket.app.state, "gateway", None) if "app" in websocket.scope else None
        )
        admit = getattr(gateway, "admit", None)
        if admit is None:
            return ANONYMOUS
        try:
            return admit(websocket)
        except BusError as exc:  # AuthError (no or bad credentials), LimitError (rate)
            log.info("WebSocket object client refused: %s", exc)
            await websocket.close(_POLICY_VIOLATION)
            return None

    async def _receive_loop(
        self,
        websocket: WebSocket,
        server: ObjectServer,
        conn: Hashable,
        peer: _WebSocketPeer,
        sender: asyncio.Task[None],
    ) -> None:
        while not sender.done():
            try:
                message = await websocket.receive()
            except WebSocketDisconnect:
                return
            if message["type"] == "websocket.disconnect":
                return
            try:
                obj = self._decode(message)
            except (DecodeError, LimitError) as exc:
                peer.next_close_code = (
                    _TOO_BIG if isinstance(exc, LimitError) else _POLICY_VIOLATION
                )
                server.reject(conn, exc)
                await asyncio.wait({sender}, timeout=5.0)
                return
            if obj.event == "services/request" and self._unreachable(server, obj):
                self._answer_unlinked(peer, obj)
                continue
            server.receive(conn, obj)
            if obj.event == "routing/subscribe":
                self._touch(conn)
            if obj.event == "routing/subscribe" and obj.metadata.get("last") is True:
                peer.watching = set()  # the last value of each bus type, then live (5.15)
                peer.last_values = asyncio.create_task(
                    send_last_values(websocket.app, server, conn, peer, peer.principal)
                )

    def _unreachable(self, server: ObjectServer, obj: BusinessObject) -> bool:
        """No link up, and no client of this gateway serves the name: nobody can answer."""
        if any(link.connected.is_set() for link in self.links):
            return False
        name = obj.metadata.get("name")
        return not (isinstance(name, str) and server.router.services(name))

    def _answer_unlinked(self, peer: _WebSocketPeer, obj: BusinessObject) -> None:
        refused = next((link for link in self.links if link.refused is not None), None)
        if refused is not None:  # it is reached, and says no: the setting to change is there
            why = (
                f"the Object System hub at {refused.host}:{refused.port} refused its link: "
                f"{LINK_REFUSED_HINT}"
            )
        else:
            where = f"the Object System hub at {self.link_text}" if self.link_text else "no hub"
            why = f"{where}; {_LINK_ENV} sets it"
        reply: dict[str, Any] = {
            "event": "services/reply",
            "name": obj.metadata.get("name"),
            "error": f"service unavailable: this gateway is not linked ({why})",
            "rcd": 503,
        }
        if obj.id is not None:
            reply["in-reply-to"] = obj.id
        answer = BusinessObject(reply)
        peer.send(encode_object(answer), answer)

    def _decode(self, message: MutableMapping[str, Any]) -> BusinessObject:
        text = message.get("text")
        if text is not None:
            return decode_metadata(text, self.max_metadata)
        return decode_object(message.get("bytes") or b"", self.max_metadata, self.max_payload)

    async def _acquire(self, scope: Scope) -> ObjectServer:
        async with self._lock:
            if self.server is None:
                if self.link_to is not None:
                    links = _parse_link(self.link_to)
                else:
                    links = _default_links(scope)
                secret = os.environ.get(LINK_SECRET_ENV) or None
                server = ObjectServer(
                    Router(name="busgate-gateway", link_secret=secret),
                    max_metadata=self.max_metadata,
                    max_payload=self.max_payload,
                )
                self.links = [
                    server.link(t.host, t.port, link_context() if t.tls else None) for t in links
                ]
                self.link_text = ", ".join(str(target) for target in links)
                if self.links:
                    # Let the first client's objects reach the network, unless nobody listens.
                    try:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(self.link_wait):
                                await asyncio.gather(*(link.settled.wait() for link in self.links))
                    except BaseException:  # cancelled meanwhile: its links must not live on
                        self.links, self.link_text = [], ""
                        await server.stop()
                        raise
                self.server = server
            self._clients += 1
            return self.server

    async def _release(self) -> None:
        async with self._lock:
            self._clients -= 1
            if self._clients == 0 and self.server is not None:
                server, self.server = self.server, None
                await server.stop()

    async def stop(self) -> None:
        """Stop the gateway's object server now (clients are disconnected)."""
        async with self._lock:
            if self.server is not None:
                server, self.server = self.server, None
                await server.stop()


def create_route(link_to: str | None = None, path: str = "/ws") -> WebSocketRoute:
    """The ``/ws`` route with a fresh :class:`ObjectsEndpoint` (``link_to``: see the module doc)."""
    return WebSocketRoute(path, ObjectsEndpoint(link_to))
