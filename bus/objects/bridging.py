"""Running the bridge of an Object System server to the bus (docs/PROTOCOL.md 7.4).

:func:`open_bridge` starts an :class:`~bus.objects.tcp.ObjectServer` (its listener and links)
and a :class:`~bus.objects.bridge.Bridge` to the bus, and keeps trying the bus until it is
there: a bridge that cannot connect is not given up but retried (0.5 s doubling to 5 s), and
meanwhile every ``services/request`` that no Object System client serves is answered at once
with ``services/reply`` ``{"rcd": 503, "error": ...}`` saying why, as the gateway's ``/ws``
does while it is not linked. :class:`RunningBridge` holds what it started.

The broker's own server (``busgate broker --objects-port``, ``busgate run``) reaches its
broker in process (:meth:`bus.broker.Broker.local_link`), as the post office
:data:`BRIDGE_OFFICE` that the broker's process vouches for: neither the broker's TLS
(whatever CA signed its certificate) nor its open mode or secrets stand between them.
``BUSGATE_OBJECTS_BUS_URL`` bridges it to another bus instead (NATS, another broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from bus.asyncio.client import Client, connect
from bus.asyncio.transport import BrokerTransport
from bus.errors import BusError, ConfigError
from bus.link.backoff import Backoff
from bus.link.tls import TLS_SCHEME, link_context
from bus.masking import mask_url
from bus.objects.address import parse_link_target
from bus.objects.bridge import LINK_SECRET_ENV, PING_ENV, Bridge
from bus.objects.codec import BusinessObject
from bus.objects.links import LINK_DOWN_REPEAT
from bus.objects.router import PING_ANSWER, PING_BEFORE_SUBSCRIBE, Router
from bus.objects.tcp import (
    DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_PORT,
    ClientKeepalive,
    Link,
    ObjectServer,
)

__all__ = ["BRIDGE_OFFICE", "BUS_URL_ENV", "RunningBridge", "open_bridge", "start_bridge"]

log = logging.getLogger("bus.objects.bridge")  # where the bridge's state was always logged

#: The post office of a broker's own bridge on its in-process link (no secret: the broker's
#: process vouches for it, as a client certificate would name it).
BRIDGE_OFFICE: Final = "busgate-objects"
#: Bridges the server to this bus instead (``bus://name:secret@host:4000``, ``nats://...``).
BUS_URL_ENV: Final = "BUSGATE_OBJECTS_BUS_URL"

#: Makes the bridge's bus client (raises a BusError when the bus cannot be reached).
Connector = Callable[[], Awaitable[Client]]
#: Makes an in-process link into a broker: ``local_link(office)`` (Broker.local_link).
LocalLink = Callable[[str | None], Awaitable[socket.socket]]


class RunningBridge:
    """What :func:`open_bridge` started: the server, its links, and the bridge to the bus.

    Attributes:
        server: the Object System server.
        links: its links to other servers.
        bridge, client: the bridge and its bus client once the bus was reached (None until
            then: the server answers ``services/request`` with rcd 503 and the bus is retried).
        down: why the server is not bridged, while it is not ("" once it is).
    """

    def __init__(
        self, server: ObjectServer, links: tuple[Link, ...], connect_bus: Connector, shown: str
    ) -> None:
        self.server = server
        self.links = links
        self.bridge: Bridge | None = None
        self.client: Client | None = None
        self.down = "not started"
        self._connect = connect_bus
        self._shown = shown  # where the bus is, masked
        self._retrying: asyncio.Task[None] | None = None
        self._backoff = Backoff(0.5, 5.0)

    async def start(self) -> None:
        """Try the bus once; if it is not there, answer for it and keep trying."""
        if await self._attempt():
            return
        self.server.answer_unserved = self._unserved
        self._retrying = asyncio.create_task(self._retry(), name="objects-bridge-retry")

    async def _attempt(self) -> bool:
        try:
            client = await self._connect()
        except BusError as exc:
            self.down = str(exc) or type(exc).__name__
            return False
        try:
            bridge = Bridge(self.server, client)
            await bridge.start()
        except BusError as exc:
            self.down = str(exc) or type(exc).__name__
            await client.close()
            return False
        self.client, self.bridge, self.down = client, bridge, ""
        self.server.answer_unserved = None
        log.info("Object System server (%s), bridged to %s", self._where(), self._shown)
        return True

    async def _retry(self) -> None:
        warned = -LINK_DOWN_REPEAT
        while True:
            now = time.monotonic()
            if now - warned >= LINK_DOWN_REPEAT:
                warned = now
                log.warning(
                    "Object System server (%s) is not bridged to the bus at %s (%s); retrying, "
                    "and its services/request are answered rcd 503 meanwhile",
                    self._where(),
                    self._shown,
                    self.down,
                )
            await asyncio.sleep(self._backoff.next_delay())
            if await self._attempt():
                return

    def _where(self) -> str:
        server = self.server
        try:
            return f"port {server.port}"
        except BusError:  # no listener: links only
            return "no listener"

    def _unserved(self, request: BusinessObject) -> BusinessObject | None:
        """The answer to a ``services/request`` while there is no bridge: rcd 503, unless an
        Object System client serves the name (then it is routed to it)."""
        name = request.metadata.get("name")
        if isinstance(name, str) and self.server.router.services(name):
            return None
        reply: dict[str, object] = {
            "event": "services/reply",
            "name": name,
            "rcd": 503,
            "error": f"service unavailable: this Object System server is not bridged to the "
            f"bus ({self.down}); it keeps trying",
        }
        if request.id is not None:
            reply["in-reply-to"] = request.id
        return BusinessObject(reply)

    async def stop(self) -> None:
        """Stop trying, then the bridge, its bus client and the server."""
        if self._retrying is not None:
            self._retrying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retrying
        if self.bridge is not None:
            await self.bridge.stop()
        if self.client is not None:
            await self.client.close()
        await self.server.stop()


async def start_bridge(
    bus_url: str, host: str = "127.0.0.1", port: int | None = DEFAULT_PORT, **options: Any
) -> Callable[[], Awaitable[None]]:
    """:func:`open_bridge` (same arguments), returning the async function that stops it."""
    return (await open_bridge(bus_url, host, port, **options)).stop


async def open_bridge(
    bus_url: str,
    host: str = "127.0.0.1",
    port: int | None = DEFAULT_PORT,
    *,
    links: Iterable[str] = (),
    server_peers: Iterable[str] = (),
    tls: ssl.SSLContext | None = None,
    link_ca: str | None = None,
    tls_handshake_timeout: float = 10.0,
    local_link: LocalLink | None = None,
) -> RunningBridge:
    """Run an Object System server bridged to the bus at ``bus_url`` (see the module doc).

    ``BUSGATE_OBJECTS_BUS_URL`` overrides the bus (and ``local_link``).
    ``BUSGATE_OBJECTS_CLIENT_KEEPALIVE`` (``off``, ``auto``, ``require``; default ``auto``) and
    ``BUSGATE_OBJECTS_KEEPALIVE_INTERVAL`` (seconds, default 30) set the keepalive policy;
    ``BUSGATE_OBJECTS_LINK_SECRET`` is the link secret of :class:`~bus.objects.router.Router`;
    ``BUSGATE_OBJECTS_PING_BEFORE_SUBSCRIBE=ignore`` leaves a ping sent before subscribing
    unanswered, as Objectoplex does (default ``answer``).

    Args:
        bus_url: the bus to bridge to.
        host: the listener's address.
        port: the listener's port (0: any free port; ``None``: no listener, links only).
        links: ``HOST:PORT`` (plain) or ``tls://HOST:PORT`` (TLS) of other Object System
            servers (Objectoplex or busgate) to link to, each kept up with a WARNING while it
            is down.
        server_peers: addresses or networks whose inbound connections may take the server role.
        tls: the listener's server context (:func:`bus.link.tls.server_context`): it then speaks
            TLS only. None: plain TCP.
        link_ca: a CA file the ``tls://`` links and a ``bus+tls://`` bus link trust besides
            ``BUSGATE_BUS_TLS_CA`` and the system's (:func:`bus.link.tls.link_context`; the broker
            passes its ``--tls-ca``).
        tls_handshake_timeout: seconds a TLS handshake may take (listener and links).
        local_link: the in-process link of the broker that runs this server
            (:meth:`bus.broker.Broker.local_link`): the bridge reaches ``bus_url`` through it.

    Returns:
        The running server, links and bridge (``await running.stop()`` stops them); if the bus
        cannot be reached yet, the bridge comes when it can.

    Raises:
        ConnectError: the listener's address cannot be bound.
        ConfigError: a keepalive variable, a link or a server peer is malformed.
    """
    policy, interval = _keepalive_from_env()
    early_pings = _early_pings_from_env()
    targets = [parse_link_target(text) for text in links]
    url = os.environ.get(BUS_URL_ENV) or bus_url
    tls_links = any(target.tls for target in targets) or url.startswith(f"{TLS_SCHEME}://")
    client_tls = link_context(link_ca) if tls_links else None
    secret = os.environ.get(LINK_SECRET_ENV) or None
    server = ObjectServer(
        Router(link_secret=secret, ping_before_subscribe=early_pings),
        keepalive_interval=interval,
        client_keepalive=policy,
        server_peers=server_peers,
        tls_handshake_timeout=tls_handshake_timeout,
    )
    if port is not None:
        await server.start(host, port, tls)
    started_links = tuple(
        server.link(target.host, target.port, client_tls if target.tls else None)
        for target in targets
    )
    if local_link is not None and not os.environ.get(BUS_URL_ENV):
        connect_bus: Connector = functools.partial(_in_process, local_link)
        shown = f"{mask_url(url)} (in process)"
    else:
        connect_bus = functools.partial(connect, url, name=None, tls=client_tls)
        shown = mask_url(url)
    running = RunningBridge(server, started_links, connect_bus, shown)
    await running.start()
    return running


async def _in_process(local_link: LocalLink) -> Client:
    """The bridge's client on an in-process link, as :data:`BRIDGE_OFFICE`. It reconnects (a
    new in-process link) when the broker closes its link: a manager's ``manage.disconnect``,
    the slow-consumer bound."""

    def factory(inbox: str, reconnecting: bool) -> BrokerTransport:
        return BrokerTransport(
            "in-process", 0, name=BRIDGE_OFFICE, secret=None, mode="tls", inbox=inbox,
            reconnect=reconnecting, socket_source=functools.partial(local_link, BRIDGE_OFFICE),
        )  # fmt: skip

    return await Client(factory, name=BRIDGE_OFFICE).open()


def _early_pings_from_env() -> str:
    text = os.environ.get(PING_ENV, PING_ANSWER).strip().lower()
    if text not in PING_BEFORE_SUBSCRIBE:
        choices = ", ".join(PING_BEFORE_SUBSCRIBE)
        raise ConfigError(f"{PING_ENV}={text!r}: expected one of {choices}")
    return text


def _keepalive_from_env() -> tuple[ClientKeepalive, float]:
    policy_text = os.environ.get("BUSGATE_OBJECTS_CLIENT_KEEPALIVE", ClientKeepalive.AUTO)
    interval_text = os.environ.get(
        "BUSGATE_OBJECTS_KEEPALIVE_INTERVAL", str(DEFAULT_KEEPALIVE_INTERVAL)
    )
    try:
        policy = ClientKeepalive(policy_text.strip().lower())
    except ValueError as exc:
        choices = ", ".join(p.value for p in ClientKeepalive)
        raise ConfigError(
            f"BUSGATE_OBJECTS_CLIENT_KEEPALIVE={policy_text!r}: expected one of {choices}"
        ) from exc
    try:
        interval = float(interval_text)
    except ValueError as exc:
        raise ConfigError(
            f"BUSGATE_OBJECTS_KEEPALIVE_INTERVAL={interval_text!r}: expected seconds"
        ) from exc
    if not interval > 0:
        raise ConfigError(f"BUSGATE_OBJECTS_KEEPALIVE_INTERVAL={interval_text!r}: must be > 0")
    return policy, interval
