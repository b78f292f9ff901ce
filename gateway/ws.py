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

Mount it with ``WebSocketRoute("/ws", ObjectsEndpoint())`` or ``create_route()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Hashable, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.routing import WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from bus.errors import BusError, ConfigError, DecodeError, LimitError
from bus.objects.bridge import LINK_SECRET_ENV
from bus.objects.codec import (
    DEFAULT_MAX_METADATA,
    DEFAULT_MAX_PAYLOAD,
    BusinessObject,
    decode_metadata,
    decode_object,
)
from bus.objects.router import Router
from bus.objects.tcp import DEFAULT_PORT, ObjectServer, parse_link

__all__ = ["DEFAULT_MAX_QUEUE", "ObjectsEndpoint", "create_route"]

log = logging.getLogger("busgate.gateway.ws")

#: Objects waiting to be sent to one WebSocket client before it is closed as too slow.
DEFAULT_MAX_QUEUE: Final = 1000
_POLICY_VIOLATION: Final = 1008
_TOO_BIG: Final = 1009
_INTERNAL_ERROR: Final = 1011
_LINK_ENV: Final = "BUSGATE_OBJECTS_LINK"


class _WebSocketPeer:
    """One WebSocket client: a bounded queue drained by a sender task."""

    def __init__(self, websocket: WebSocket, max_queue: int) -> None:
        self.websocket = websocket
        self.queue: asyncio.Queue[tuple[bytes, BusinessObject] | int] = asyncio.Queue(max_queue)
        self.close_code: int | None = None
        self.next_close_code = _POLICY_VIOLATION

    def send(self, data: bytes, obj: BusinessObject) -> None:
        if self.close_code is not None:
            return
        try:
            self.queue.put_nowait((data, obj))
        except asyncio.QueueFull:
            log.warning("WebSocket object client too slow: closing")
            self.close_code = _POLICY_VIOLATION
            self._force_close_marker()

    def close(self, reason: str) -> None:
        if self.close_code is None:
            self.close_code = self.next_close_code
            self._force_close_marker()

    def _force_close_marker(self) -> None:
        while True:
            try:
                self.queue.put_nowait(self.close_code or _POLICY_VIOLATION)
                return
            except asyncio.QueueFull:
                self.queue.get_nowait()

    async def run_sender(self) -> None:
        """Send queued objects (text without payload, binary with) until a close marker."""
        while True:
            item = await self.queue.get()
            if isinstance(item, int):
                with contextlib.suppress(Exception):
                    await self.websocket.close(item)
                return
            data, obj = item
            if obj.payload:
                await self.websocket.send_bytes(data)
            else:
                await self.websocket.send_text(data[:-1].decode("utf-8"))


def _settings(scope: Scope) -> Any:
    app = scope.get("app")
    gateway = getattr(getattr(app, "state", None), "gateway", None)
    return getattr(gateway, "settings", None)


def _default_links(scope: Scope) -> list[tuple[str, int]]:
    configured = getattr(_settings(scope), "objects_links", ())
    if configured:
        return [parse_link(text) for text in configured]
    text = os.environ.get(_LINK_ENV)
    if text is not None:
        return _parse_link(text)
    bus_url = getattr(_settings(scope), "bus_url", None)
    host = urlsplit(bus_url).hostname if isinstance(bus_url, str) else None
    return [(host or "127.0.0.1", DEFAULT_PORT)]


def _parse_link(text: str) -> list[tuple[str, int]]:
    if not text:
        return []
    try:
        return [parse_link(text if text.rpartition(":")[0] else f"127.0.0.1{text}")]
    except ConfigError as exc:
        raise ConfigError(f"{_LINK_ENV} / link_to must be host:port, got {text!r}") from exc


class ObjectsEndpoint:
    """The ``/ws`` ASGI endpoint and the gateway's own object server.

    Args:
        link_to: ``host:port`` of the server to link to (``""``: none; ``None``: see module doc).
        max_metadata: metadata limit per object (default 8192 bytes).
        max_payload: payload limit per object (default 8 MiB).
        max_queue: objects queued per client before it is closed as too slow (default 1000).
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
        self._clients = 0
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        if not await self._admit(websocket):
            return
        await websocket.accept()
        try:
            server = await self._acquire(scope)
        except ConfigError as exc:
            log.error("WebSocket object client refused: %s", exc)
            await websocket.close(_INTERNAL_ERROR)
            return
        peer = _WebSocketPeer(websocket, self.max_queue)
        allowed = bool(getattr(_settings(scope), "ws_allow_server_role", False))
        conn = server.attach(peer, trusted=allowed)
        sender = asyncio.create_task(peer.run_sender())
        try:
            await self._receive_loop(websocket, server, conn, peer, sender)
        finally:
            server.detach(conn)
            if not sender.done():
                peer.close("gone")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sender, 5.0)
            await self._release()

    async def _admit(self, websocket: WebSocket) -> bool:
        gateway = (
            getattr(websocket.app.state, "gateway", None) if "app" in websocket.scope else None
        )
        admit = getattr(gateway, "admit", None)
        if admit is None:
            return True
        try:
            admit(websocket)
        except BusError as exc:  # AuthError (no or bad credentials), LimitError (rate)
            log.info("WebSocket object client refused: %s", exc)
            await websocket.close(_POLICY_VIOLATION)
            return False
        return True

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
                await asyncio.wait_for(sender, 5.0)
                return
            server.receive(conn, obj)

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
                started = [server.link(host, port) for host, port in links]
                if started:
                    # Let the first client's objects reach the network, unless nobody listens.
                    with contextlib.suppress(TimeoutError):
                        settled = [link.settled.wait() for link in started]
                        await asyncio.wait_for(asyncio.gather(*settled), self.link_wait)
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
