"""A stand-in for the original Object System server (Objectoplex), for two-server tests.

Written from the original's documented behaviour (Biomine3000/Objectoplex, read for issue 14),
not from its code: what matters when our server links to it or it links to ours.

- Clients are unsubscribed until ``routing/subscribe``; their objects are dropped until then,
  and so is a ``ping`` (answered with ``pong`` once subscribed).
- A subscription with ``receive-mode`` is a *legacy* client subscription: its ``types`` is read
  (a missing one is the ``KeyError: 'types'`` the original logged, recorded in ``errors``) and
  then, as in the original, where that error interrupts the legacy handling, the object goes on
  to the routing step.
- ``role: server`` (without a route, or a route of one id) is a server subscription: the server
  subscribes back, replies, and sends ``routing/subscribe/notification`` (not *notify*) straight
  to every other connection, without a route.
- Routing: the sender's id (when ``route`` is empty) then its own id are appended; an object
  whose route holds its own id is dropped; a recipient already in a route longer than two is
  skipped; a ``routing/*`` event whose route holds the *sender's* id is passed on to nobody;
  servers get everything else; ``to`` restricts clients; the rule list decides. There is no
  duplicate detection: what arrives twice is delivered twice.
- A departed subscribed connection is announced with ``routing/disconnect``, routed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

from bus.objects.codec import BusinessObject, NeedData, ObjectDecoder, encode_object
from bus.objects.subscription import passes_rules


@dataclass(eq=False)
class _Conn:
    writer: asyncio.StreamWriter
    routing_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    subscribed: bool = False
    server: bool = False
    subscribed_to: bool = False
    rules: list[str] = field(default_factory=list)
    extra_ids: list[str] = field(default_factory=list)


class ObjectoplexLike:
    """One server; ``start()`` listens, ``link(port)`` links to another server."""

    def __init__(self) -> None:
        self.routing_id = str(uuid.uuid4())
        self.conns: list[_Conn] = []
        self.errors: list[str] = []  # what the original would have logged as an exception
        self.received: list[dict[str, Any]] = []  # every object's metadata, as it arrived
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def link(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = _Conn(writer, server=True)
        self.conns.append(conn)
        self._subscribe_to(conn)
        self._spawn(self._read(conn, reader))

    def servers(self) -> list[_Conn]:
        return [c for c in self.conns if c.server and c.subscribed]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.conns):
            conn.writer.transport.abort()
        await asyncio.gather(*self._tasks, return_exceptions=True)  # readers end at EOF
        if self._server is not None:
            await self._server.wait_closed()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)  # type: ignore[arg-type]
            task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]
        conn = _Conn(writer)
        self.conns.append(conn)
        await self._read(conn, reader)

    async def _read(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        decoder = ObjectDecoder()
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                decoder.receive_data(data)
                while not isinstance(obj := decoder.next_event(), NeedData):
                    self._handle(obj.metadata, obj.payload, conn)
        self.conns.remove(conn)
        conn.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await conn.writer.wait_closed()
        if conn.subscribed:
            self._route({"event": "routing/disconnect", "routing-id": conn.routing_id}, b"", None)

    def _send(self, conn: _Conn, metadata: dict[str, Any], payload: bytes = b"") -> None:
        metadata = {"id": f"<{next(self._ids)}@objectoplex-like>", **metadata}
        with contextlib.suppress(Exception):
            conn.writer.write(encode_object(BusinessObject(metadata, payload)))

    def _subscribe_to(self, conn: _Conn) -> None:
        if conn.subscribed_to:
            return
        conn.subscribed_to = True
        server_subscription = {
            "event": "routing/subscribe",
            "role": "server",
            "routing-id": self.routing_id,
            "subscriptions": ["*"],
            "name": "Objectoplex",
        }
        self._send(conn, server_subscription)

    def _handle(self, metadata: dict[str, Any], payload: bytes, sender: _Conn) -> None:
        self.received.append(metadata)
        event = metadata.get("event")
        if event == "ping" and sender.subscribed:
            pong = {"event": "pong", "routing-id": sender.routing_id}
            self._send(sender, {**pong, "in-reply-to": metadata.get("id")})
            return
        if event == "routing/subscribe" and (
            "receive-mode" in metadata or "receive_mode" in metadata
        ):
            if "types" not in metadata:
                self.errors.append("KeyError: 'types'")  # then on to routing, as the original
            else:
                self._client_subscription(metadata, sender)  # a legacy client
                return
        if event == "routing/subscribe":
            route = metadata.get("route")
            if metadata.get("role") == "server" and (not route or len(route) == 1):
                self._server_subscription(metadata, sender)
            else:
                self._client_subscription(metadata, sender)
            return
        self._route(metadata, payload, sender)

    def _server_subscription(self, metadata: dict[str, Any], sender: _Conn) -> None:
        sender.routing_id = metadata["routing-id"]
        sender.rules = list(metadata.get("subscriptions", ["*"]))
        sender.server = sender.subscribed = True
        self._subscribe_to(sender)
        reply = {"event": "routing/subscribe/reply", "routing-id": sender.routing_id}
        self._send(sender, {**reply, "in-reply-to": metadata.get("id"), "role": "server"})
        notice = {"event": "routing/subscribe/notification", "routing-id": sender.routing_id}
        for other in self.conns:
            if other is not sender:
                self._send(other, {**notice, "role": "server"})

    def _client_subscription(self, metadata: dict[str, Any], sender: _Conn) -> None:
        sender.rules = list(metadata.get("subscriptions", ["*"]))
        sender.subscribed = True
        reply = {"event": "routing/subscribe/reply", "routing-id": sender.routing_id}
        self._send(sender, {**reply, "in-reply-to": metadata.get("id")})
        notice = {"event": "routing/subscribe/notification", "routing-id": sender.routing_id}
        for other in self.conns:
            if other is not sender:
                self._send(other, notice)

    def _route(self, metadata: dict[str, Any], payload: bytes, sender: _Conn | None) -> None:
        if sender is not None and not sender.subscribed:
            return
        route = list(metadata.get("route") or [])
        if self.routing_id in route:
            return
        if not route and sender is not None:
            route.append(sender.routing_id)
        route.append(self.routing_id)
        obj = {"id": f"<{next(self._ids)}@objectoplex-like>", **metadata, "route": route}
        for recipient in list(self.conns):
            if self._should_route_to(obj, sender, recipient):
                self._send(recipient, obj, payload)

    def _should_route_to(self, obj: dict[str, Any], sender: _Conn | None, to: _Conn) -> bool:
        if not to.subscribed:
            return False
        route = obj["route"]
        if to.routing_id in route and len(route) > 2:
            return False
        event = obj.get("event") or ""
        if sender is not None and event.startswith("routing/") and sender.routing_id in route:
            return False
        if to.server:
            return True
        if event.startswith("routing/announcement/"):
            return False
        target = obj.get("to")
        if target is not None:
            targets = [target] if isinstance(target, str) else list(target)
            if to.routing_id not in targets and not set(targets) & set(to.extra_ids):
                return False
        return passes_rules(BusinessObject(obj), to.rules)
