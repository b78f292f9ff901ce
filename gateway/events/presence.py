"""The gateway's presence: its own subscribers announced on the bus, everyone else's followed
(PROTOCOL.md 5.16 and 9.11).

Each gateway process is an origin of :mod:`bus.presence` (``gw-<random>``). Its SSE clients
(joined and left by :class:`gateway.events.hub.EventHub`) and its ``/ws`` clients that subscribe to
bus types (``bus/...`` content types, read from the ``/ws`` endpoint once a second) are
announced on :data:`bus.presence.PRESENCE_TYPE`: ``join`` and ``leave`` within
:data:`COALESCE` seconds (those of a burst in one announcement each, not one message per
client), ``alive`` with their count every :data:`INTERVAL` seconds (while it has clients: a
gateway without any says nothing), a ``snapshot`` when it connects and when another origin
probes, ``bye`` at stop. A snapshot lists every client, so it is not what keeps an origin
alive: at 20,000 clients that was megabytes every few seconds, built and read by every gateway.
An ``alive`` that tells of clients this gateway does not hold (it missed a snapshot or a delta)
makes it probe (once per such difference: see :meth:`bus.presence.PresenceBoard.missing`).
It follows every other origin's announcements, and the broker's own links through
``manage.presence`` (asked at each connection; on NATS there is no broker, so bus clients are
not listed). Every change goes to :attr:`Presence.on_change` (the hub, for ``?presence=1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import secrets
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Final

from bus.asyncio.loop import until_tick
from bus.discovery.topics import check_pattern
from bus.errors import BusError, ConfigError, NakError
from bus.message.message import Message, MessageType
from bus.presence import (
    CENTRAL,
    MAX_CLIENTS,
    PRESENCE_TYPE,
    Announcement,
    Change,
    Kind,
    PresenceBoard,
    Present,
    announcement_payload,
    read_announcement,
)

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["INTERVAL", "Presence", "ws_patterns"]

log = logging.getLogger("busgate.gateway")

#: Seconds between this gateway's snapshots.
INTERVAL: Final = 5.0
#: Seconds between two reads of the ``/ws`` clients' subscriptions.
WS_SCAN: Final = 1.0
#: Seconds this gateway's joins and leaves are gathered before they are announced together.
COALESCE: Final = 0.05


def ws_patterns(types: Sequence[str] | None) -> tuple[str, ...]:
    """The bus patterns of a ``/ws`` client's content types (``bus/sensor.*`` is ``sensor.>``:
    a trailing ``*`` matches any rest there; PROTOCOL.md 7.2); other types are not the bus's."""
    found = []
    for text in types or ():
        if not text.startswith("bus/"):
            continue
        rest = text[4:]
        if rest == "*":
            rest = ">"
        elif rest.endswith(".*"):
            rest = rest[:-1] + ">"
        try:
            check_pattern(rest)
        except ConfigError:
            continue
        found.append(rest)
    return tuple(dict.fromkeys(found))


class Presence:
    """One gateway's presence: its board, its announcements, its following of the others.

    Args:
        interval: seconds between snapshots.
        clock: the wall clock (epoch seconds).
    """

    def __init__(self, interval: float = INTERVAL, clock: Callable[[], float] = time.time) -> None:
        self.origin = f"gw-{secrets.token_hex(4)}"
        self.board = PresenceBoard(self.origin)
        self.interval = interval
        self.clock = clock
        self.on_change: Callable[[list[Change]], None] = lambda changes: None
        self.ws: Any = None  # the /ws endpoint (gateway.websocket.ws.ObjectsEndpoint), if any
        self._numbers = itertools.count(1)
        self._client: Client | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ws_ids: dict[Hashable, str] = {}
        #: our joins and leaves not yet announced: client id -> (kind, client), the last wins
        self._pending: dict[str, tuple[Kind, Present]] = {}
        self._flush: asyncio.TimerHandle | None = None

    # -- this gateway's SSE clients ----------------------------------------------------------

    def sse_joined(self, caller: str, patterns: Sequence[str]) -> str:
        """A new SSE client; returns its presence id."""
        client = Present(
            f"sse-{self.origin}-{next(self._numbers)}", "sse", caller, self.clock(),
            tuple(patterns),
        )  # fmt: skip
        self._local(self.board.join(client), Kind.JOIN)
        return client.id

    def sse_left(self, client_id: str) -> None:
        """An SSE client went."""
        self._local(self.board.leave(client_id), Kind.LEAVE)

    def clients(self, pattern: str | None = None) -> list[Present]:
        """Who subscribes to types matching ``pattern``, on every gateway and the bus."""
        return self.board.clients(pattern)

    # -- life -----------------------------------------------------------------------------------

    async def start(self, client: Client) -> None:
        """Follow the others and announce ours on ``client``'s bus (once connected)."""
        self._client = client
        subscription = await client.subscribe(PRESENCE_TYPE, relay=True)
        self._tasks = [
            asyncio.create_task(self._follow(subscription), name="presence-follow"),
            asyncio.create_task(self._keep(client), name="presence-keep"),
        ]
        await self._join_bus(client)

    async def stop(self) -> None:
        """Say ``bye`` and stop."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._pending.clear()  # bye says every client is gone
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self._client is not None and self._client.connected:
            with contextlib.suppress(BusError):
                await self._send(Announcement(self.origin, Kind.BYE, (), self.interval))
        self._client = None

    async def _join_bus(self, client: Client) -> None:
        """At each connection: the broker's links as they are now, our snapshot, a probe."""
        self._apply(self.board.forget(CENTRAL))
        try:
            answer = await client.manage("manage.presence")
        except NakError:
            pass  # NATS: no broker, no bus clients to list
        except BusError as exc:
            log.info("presence: the broker's links not read: %s", exc)
        else:
            snapshot = read_announcement(answer.payload_data())
            if snapshot is not None:
                self._apply(self.board.receive(snapshot, self.clock()))
        with contextlib.suppress(BusError):
            await self._send(Announcement(self.origin, Kind.PROBE, (), self.interval))
            if self.board.local:
                await self._send(self.board.snapshot(self.interval))

    async def _follow(self, subscription: Any) -> None:
        async for message in subscription:
            if message.typ != MessageType.HBT.value:
                continue  # presence is a heartbeat: an event made to look like one is not
            try:
                announcement = read_announcement(message.payload_data())
            except BusError:
                continue
            if announcement is None:
                continue
            probed = announcement.kind is Kind.PROBE and announcement.origin != self.origin
            if probed and self.board.local:
                await asyncio.sleep(random.uniform(0.0, 0.2))  # not all gateways at once
                self._announce_pending()  # what the snapshot holds goes before it
                with contextlib.suppress(BusError):
                    await self._send(self.board.snapshot(self.interval))
            if self.board.missing(announcement):  # we lack some of its clients: snapshots
                self._post(Announcement(self.origin, Kind.PROBE, (), self.interval))
            self._apply(self.board.receive(announcement, self.clock()))

    async def _keep(self, client: Client) -> None:
        reconnects = client.reconnects
        waited = 0.0
        while True:
            await asyncio.sleep(until_tick(WS_SCAN))  # with the process's other chores
            self._scan_ws()
            if client.reconnects != reconnects and client.connected:
                reconnects = client.reconnects
                await self._join_bus(client)
            waited += WS_SCAN
            if waited >= self.interval:
                waited = 0.0
                self._apply(self.board.expire(self.clock()))
                if client.connected and self.board.local:  # none: nothing to keep alive
                    self._announce_pending()  # the count says what these told
                    self._post(self.board.alive(self.interval))

    def _scan_ws(self) -> None:
        """Join and leave the ``/ws`` clients whose bus subscriptions changed: those the
        endpoint marked as touched since the last look (all of them, the first time), not a
        walk over every client (at 20,000 clients, a second's joins would walk them all)."""
        endpoint = self.ws
        if endpoint is None:
            return
        clients: dict[Hashable, tuple[float, str]] = endpoint.present
        touched: set[Hashable] | None = endpoint.touched
        if touched is None:
            endpoint.touched = set()  # from now on it marks them
            looked_at: set[Hashable] = set(clients) | set(self._ws_ids)
        else:
            looked_at, endpoint.touched = touched, set()
        server = endpoint.server
        for conn in looked_at:
            entry = clients.get(conn)
            patterns: tuple[str, ...] = ()
            if entry is not None and server is not None:
                patterns = ws_patterns(server.router.content_types(conn))
            if entry is None or not patterns:
                client_id = self._ws_ids.pop(conn, None)
                if client_id is not None:
                    self._local(self.board.leave(client_id), Kind.LEAVE)
                continue
            since, caller = entry
            client_id = self._ws_ids.setdefault(conn, f"ws-{self.origin}-{next(self._numbers)}")
            self._local(self.board.join(Present(client_id, "ws", caller, since, patterns)),
                        Kind.JOIN)  # fmt: skip

    # -- announcing -----------------------------------------------------------------------------

    def _local(self, changes: list[Change], kind: Kind) -> None:
        """One of our own clients changed: tell our listeners at once, the bus within
        :data:`COALESCE` seconds (with whatever else changed meanwhile)."""
        if not changes:
            return
        self._apply(changes)
        if self._client is None:
            return  # not on the bus yet: the snapshot sent when it connects holds them
        for change in changes:
            present = change.after or change.before
            if present is not None:
                self._pending[present.id] = (kind, present)
        if self._flush is None:
            loop = asyncio.get_running_loop()
            self._flush = loop.call_later(COALESCE, self._announce_pending)

    def _announce_pending(self) -> None:
        """Announce the joins and leaves gathered: one ``join`` and one ``leave`` (per
        :data:`~bus.presence.MAX_CLIENTS`), in the order they were sent in."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        pending, self._pending = self._pending, {}
        client = self._client
        if not pending or client is None or not client.connected:
            return  # a reconnection sends the snapshot, which holds them
        for kind in (Kind.JOIN, Kind.LEAVE):
            clients = [present for (k, present) in pending.values() if k is kind]
            for start in range(0, len(clients), MAX_CLIENTS):
                chunk = tuple(clients[start : start + MAX_CLIENTS])
                self._post(Announcement(self.origin, kind, chunk, self.interval))

    def _post(self, announcement: Announcement) -> None:
        """Send an announcement in the background, after those posted before it."""
        task = asyncio.get_running_loop().create_task(self._send(announcement))
        task.add_done_callback(_quietly)

    def _apply(self, changes: list[Change]) -> None:
        if changes:
            self.on_change(changes)

    async def _send(self, announcement: Announcement) -> None:
        client = self._client
        if client is None:
            return
        message = Message.event(PRESENCE_TYPE, announcement_payload(announcement))
        message.frame["TYP"] = MessageType.HBT.value
        await client.send(message)


def _quietly(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("presence not announced: %s", task.exception())
