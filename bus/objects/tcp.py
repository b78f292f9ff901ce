"""The asyncio driver of the Object System: a TCP listener, server links, local peers.

:class:`ObjectServer` owns one :class:`~bus.objects.router.Router` and the connections it routes
between: TCP clients of its listener (default port 7890, Objectoplex's), outbound links to other
servers (:meth:`ObjectServer.link`, they subscribe with ``role: server``), and any other
transport that implements :class:`Peer` (the WebSocket endpoint of ``gateway/websocket/ws.py``, the
bus
bridge). The driver only moves bytes: it feeds the codec, hands objects to the router and
writes what the router says.

Server role (issue 19): only a link this server opened (:meth:`ObjectServer.link`) or an inbound
connection from an allowed server peer (``server_peers``: addresses or networks, and the
addresses of the servers it links to) may subscribe with ``role: server``; anyone else claiming
it is answered with an error object and logged.

Its parts live beside it: :mod:`bus.objects.stream` (:class:`Peer`, the TCP peer and TCP
keepalive), :mod:`bus.objects.links` (:class:`Link`, reconnecting, logging a link that is down),
:mod:`bus.objects.keepalive` (what a silent connection costs, :class:`ClientKeepalive`) and
:mod:`bus.objects.halfclose` (the answers a half-closed client still waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import itertools
import logging
import ssl
import time
from collections.abc import Callable, Coroutine, Hashable, Iterable
from typing import Any, Final

from bus.errors import ConnectError, DecodeError, LimitError
from bus.objects.address import parse_link, parse_server_peers
from bus.objects.codec import (
    DEFAULT_MAX_METADATA,
    DEFAULT_MAX_PAYLOAD,
    BusinessObject,
    ObjectDecoder,
    encode_object,
)
from bus.objects.content_lane import lane_for
from bus.objects.halfclose import DEFAULT_HALF_CLOSE_TIMEOUT, OwedAnswers
from bus.objects.keepalive import DEFAULT_KEEPALIVE_INTERVAL, ClientKeepalive, Silence, on_silence
from bus.objects.links import LINK_DOWN_REPEAT, LINK_REFUSED_HINT, Link, keep_linked
from bus.objects.outputs import Close, Deliver, Output
from bus.objects.router import Router
from bus.objects.stream import Peer, StreamPeer, enable_tcp_keepalive

__all__ = [
    "ClientKeepalive",
    "DEFAULT_ANNOUNCE_INTERVAL",
    "DEFAULT_HALF_CLOSE_TIMEOUT",
    "DEFAULT_KEEPALIVE_INTERVAL",
    "DEFAULT_MAX_WRITE_BUFFER",
    "DEFAULT_PORT",
    "LINK_DOWN_REPEAT",
    "Link",
    "ObjectServer",
    "Peer",
    "parse_link",
    "parse_server_peers",
]

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 7890
DEFAULT_MAX_WRITE_BUFFER: Final = 8 * 1024 * 1024
DEFAULT_ANNOUNCE_INTERVAL: Final = 300.0
_READ_SIZE: Final = 65536
#: Seconds of routing one read's objects after which what is routed so far is written (the
#: bus's client and broker hold their coalesced output no longer either).
COALESCE_SECONDS: Final = 0.00025
_RUN: Final = 16  # content objects routed in one call: a small part of COALESCE_SECONDS


class ObjectServer:
    """One Object System server: a router and the connections it serves.

    Args:
        router: the routing core (a new :class:`Router` when ``None``).
        max_metadata: per-object metadata limit of the codec (default 8192 bytes).
        max_payload: per-object payload limit of the codec (default 8 MiB).
        keepalive_interval: seconds of silence before a connection is pinged, and again before
            it is closed (if held to keepalive); also the TCP keepalive idle time (default 30 s).
        client_keepalive: which clients are pinged and closed for silence (default ``auto``:
            those that answered a ping once; see :class:`ClientKeepalive`).
        max_write_buffer: unsent bytes a TCP peer may hold before it is cut off (default 8 MiB).
        retry_delay: seconds between attempts to (re)open a link (default 1 s).
        announce_interval: seconds between ``routing/announcement/neighbors`` to the linked
            servers (default 300 s, Objectoplex's five minutes).
        server_peers: addresses or networks whose inbound connections may subscribe with
            ``role: server`` (default none: only the links this server opens, and connections
            from the addresses of the servers it links to). See :func:`parse_server_peers`.
        half_close_timeout: seconds a client that half-closed its connection waits at most for
            the answers to its pending ``services/request`` objects (default 60 s).
        tls_handshake_timeout: seconds a TLS handshake may take, on the listener and on the
            links (default 10 s; a plain client at a TLS listener that sends nothing is closed
            then).

    Raises:
        ConfigError: a ``server_peers`` entry is not an address or a network.
    """

    def __init__(
        self,
        router: Router | None = None,
        *,
        max_metadata: int = DEFAULT_MAX_METADATA,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
        client_keepalive: ClientKeepalive = ClientKeepalive.AUTO,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
        retry_delay: float = 1.0,
        announce_interval: float = DEFAULT_ANNOUNCE_INTERVAL,
        server_peers: Iterable[str] = (),
        half_close_timeout: float = DEFAULT_HALF_CLOSE_TIMEOUT,
        tls_handshake_timeout: float = 10.0,
    ) -> None:
        self.router = router or Router()
        self._lane = lane_for(self.router)
        self.server_peers = parse_server_peers(server_peers)
        self._link_addresses: set[str] = set()  # where our links reached: they may link back
        self.max_metadata = max_metadata
        self.max_payload = max_payload
        self.keepalive_interval = keepalive_interval
        self.client_keepalive = ClientKeepalive(client_keepalive)
        self.max_write_buffer = max_write_buffer
        self.retry_delay = retry_delay
        self.announce_interval = announce_interval
        self.half_close_timeout = half_close_timeout
        self.tls_handshake_timeout = tls_handshake_timeout
        self._owed = OwedAnswers()  # what half-closed clients still wait for
        self._announcer: asyncio.Task[None] | None = None
        self._peers: dict[Hashable, Peer] = {}
        self._dirty: list[StreamPeer] = []  # TCP peers with output queued (see flush)
        self._ids = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # links
        self._handlers: set[asyncio.Task[Any]] = set()  # listener's client handlers
        self._links: list[Link] = []
        self._stopping = False
        #: Asked about each ``services/request`` before it is routed: an answer to send back
        #: to its sender instead (the bridge to the bus is down and nobody here serves the
        #: name: :class:`~bus.objects.bridge.RunningBridge`), or None to route it.
        self.answer_unserved: Callable[[BusinessObject], BusinessObject | None] | None = None

    @property
    def port(self) -> int:
        """The TCP port the listener is bound to (useful with ``port=0``)."""
        if self._server is None:
            raise ConnectError("the Object System listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(
        self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, tls: ssl.SSLContext | None = None
    ) -> None:
        """Listen for Object System clients and servers on ``host:port`` (0: any free port),
        over TLS only when given ``tls`` (a server context, :func:`bus.link.tls.server_context`).

        Raises:
            ConnectError: the address cannot be bound.
        """
        timeout = self.tls_handshake_timeout if tls is not None else None
        try:
            self._server = await asyncio.start_server(
                self._on_client, host, port, ssl=tls, ssl_handshake_timeout=timeout
            )
        except OSError as exc:
            raise ConnectError(f"cannot listen on {host}:{port}: {exc}") from exc
        self._start_announcer()

    def link(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> Link:
        """Link to another server at ``host:port`` as ``role: server``, reconnecting when lost;
        over TLS with ``tls`` (a client context, :func:`bus.link.tls.link_context`)."""
        link = Link(host, port, tls)
        link.task = self._spawn(
            keep_linked(
                link,
                functools.partial(self._serve_link, link),
                lambda: self._stopping,
                retry_delay=self.retry_delay,
                tls_handshake_timeout=self.tls_handshake_timeout,
            )
        )
        self._links.append(link)
        self._start_announcer()
        return link

    def _start_announcer(self) -> None:
        if self._announcer is None:
            self._announcer = self._spawn(self._announce_loop())

    async def _announce_loop(self) -> None:
        while True:
            await asyncio.sleep(self.announce_interval)
            self.dispatch(self.router.announce())

    async def stop(self) -> None:
        """Close the listener, the links and every connection; wait for their tasks."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        # Clients first, while the links still carry their routing/disconnect to the network.
        links = {info.conn for info in self.router.peers() if info.server}
        for conn in sorted(self._peers, key=lambda conn: conn in links):
            peer = self._peers[conn]
            self.detach(conn)
            if isinstance(peer, StreamPeer):
                peer.abort()  # every read returns: no task stays blocked on a socket
            else:
                peer.close("server stopping")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Client handlers end by themselves once their socket is gone; asyncio's own callback
        # on those tasks must not see a cancellation.
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=5.0)
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ peers

    def attach(self, peer: Peer, *, link: bool = False, trusted: bool = False) -> Hashable:
        """Add a connection; returns its id for :meth:`receive`, :meth:`reject`, :meth:`detach`.

        Args:
            peer: the connection's way out.
            link: we opened it to another server (we subscribe as ``role: server``).
            trusted: it may subscribe with ``role: server`` (a link is trusted anyway).
        """
        conn = next(self._ids)
        self._peers[conn] = peer
        self.dispatch(self.router.connect(conn, link=link, trusted=trusted))
        return conn

    def may_serve(self, address: str | None) -> bool:
        """Whether an inbound connection from ``address`` may take the server role."""
        if address is None:
            return False
        if address in self._link_addresses:
            return True
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self.server_peers)

    def receive(self, conn: Hashable, obj: BusinessObject) -> None:
        """An object arrived on connection ``conn``."""
        self._owed.received(conn, obj)
        unserved = self.answer_unserved
        if unserved is not None and obj.metadata.get("event") == "services/request":
            answer = unserved(obj)
            if answer is not None:
                self.dispatch([Deliver(conn, answer, encode_object(answer))])
                return
        self.dispatch(self.router.receive(conn, obj))

    def receive_batch(self, conn: Hashable, objects: list[BusinessObject]) -> None:
        """Objects that arrived together on connection ``conn`` (one read): :meth:`receive`
        for each, and what is routed so far is written whenever the batch has taken
        :data:`COALESCE_SECONDS` since the last write, so no object waits behind a long one.

        Content objects go to the router a run at a time (:meth:`Router.receive_batch`); an
        event goes alone, as :meth:`receive` takes it (it may be a request owed an answer,
        or an answer).
        """
        route, since = self.router.receive_batch, time.monotonic()
        run: list[BusinessObject] = []
        for obj in objects:
            if "event" in obj.metadata:
                if run:
                    self.dispatch(route(conn, run))
                    run = []
                self.receive(conn, obj)
            else:
                run.append(obj)
                if len(run) < _RUN:
                    continue
                self.dispatch(route(conn, run))
                run = []
            if time.monotonic() - since > COALESCE_SECONDS:
                self.flush()
                since = time.monotonic()
        if run:
            self.dispatch(route(conn, run))

    def flush(self) -> None:
        """Write what is queued for the TCP peers now (else: once the loop's callback ends)."""
        dirty, self._dirty = self._dirty, []
        for peer in dirty:
            try:
                peer.flush()  # never raises for a dead connection (see StreamPeer.flush)
            except (
                Exception
            ):  # a bug must cost that peer alone: the others are flushed all the same
                log.exception("object peer flush failed")

    def _queued(self, peer: StreamPeer) -> None:
        """A TCP peer queued its first bytes: flushed with the others, at the latest once the
        loop's current callback ends."""
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self.flush)
        self._dirty.append(peer)

    def reject(self, conn: Hashable, error: DecodeError | LimitError) -> None:
        """Connection ``conn`` sent something unreadable: error object, close, announce."""
        self.dispatch(self.router.reject(conn, error))

    def detach(self, conn: Hashable) -> None:
        """Connection ``conn`` is gone; the network hears ``routing/disconnect``."""
        self._owed.forget(conn)
        if self._peers.pop(conn, None) is not None:
            self.dispatch(self.router.disconnect(conn))

    def dispatch(self, outputs: list[Output]) -> None:
        """Carry out the router's outputs."""
        peers, owed = self._peers, self._owed
        for out in outputs:
            peer = peers.get(out.conn)
            if peer is None:
                continue
            if isinstance(out, Deliver):
                peer.send(out.data, out.obj)
                if owed.pending:
                    owed.delivered(out.conn, out.obj)
            elif isinstance(out, Close):
                peer.close(out.reason)

    # ------------------------------------------------------------------ TCP

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        await self._serve_stream(reader, writer, link=None)

    async def _serve_link(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peername = writer.get_extra_info("peername")
        if peername:
            self._link_addresses.add(str(peername[0]))
        await self._serve_stream(reader, writer, link=link)

    async def _serve_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link | None
    ) -> None:
        enable_tcp_keepalive(writer, self.keepalive_interval)
        peername = writer.get_extra_info("peername")
        trusted = link is None and self.may_serve(str(peername[0]) if peername else None)
        peer = StreamPeer(writer, self.max_write_buffer, self._queued)
        conn = self.attach(peer, link=link is not None, trusted=trusted)
        decoder = ObjectDecoder(self.max_metadata, self.max_payload)
        try:
            await self._read_loop(conn, reader, decoder, link)
        except (ConnectionError, OSError) as exc:
            log.debug("object connection %s lost: %s", conn, exc)
        except Exception:  # a bug must cost this connection only, never the server
            log.exception("object connection %s failed", conn)
        finally:
            self.detach(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_loop(
        self,
        conn: Hashable,
        reader: asyncio.StreamReader,
        decoder: ObjectDecoder,
        link: Link | None,
    ) -> None:
        pinged = False
        while conn in self._peers and not self._stopping:
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
                # that races with a read completing, and stop() would then wait forever.
                async with asyncio.timeout(self.keepalive_interval):
                    data = await reader.read(_READ_SIZE)
            except TimeoutError:
                if not self._keepalive(conn, pinged):
                    return
                pinged = True
                continue
            if not data:
                if link is None:
                    await self._owed.wait(conn, self.half_close_timeout)
                return
            pinged = False
            decoder.receive_data(data)
            if not self._drain(conn, decoder):
                return
            if link is not None and not link.connected.is_set():
                info = self.router.peer(conn)
                if info is not None and info.subscribed:
                    link.connected.set()
                    link.settled.set()
                    link.up_since = time.monotonic()
                    link.refused = None
                    log.info("Object System link to %s:%d is up", link.host, link.port)
                elif info is not None and info.refused is not None and link.refused is None:
                    link.refused = info.refused
                    link.settled.set()  # nobody need wait for it: it will not come up so
                    log.warning(
                        "Object System link to %s:%d refused: %s; %s",
                        link.host,
                        link.port,
                        info.refused,
                        LINK_REFUSED_HINT,
                    )

    def _keepalive(self, conn: Hashable, pinged: bool) -> bool:
        """A silent connection gets a ping, then, if held to keepalive, is closed.

        Returns:
            False when the connection was closed.
        """
        info = self.router.peer(conn)
        if info is None:
            return True
        action = on_silence(info, self.client_keepalive, pinged)
        if action is Silence.PING:
            self.dispatch(self.router.ping(conn))
        if action is not Silence.CLOSE:
            return True
        log.warning("object connection %s silent: closing", info.routing_id)
        peer = self._peers.get(conn)
        if peer is not None:
            if isinstance(peer, StreamPeer):
                peer.abort()  # nothing more will be read from it: no graceful close to wait for
            else:
                peer.close("keepalive timeout")
        return False

    def _drain(self, conn: Hashable, decoder: ObjectDecoder) -> bool:
        """Route every complete object. Returns False when the connection was refused.

        A client's content objects go the content lane's way, a run at a time
        (:mod:`bus.objects.content_lane`); an object the lane leaves goes alone the general
        way, and the lane takes the ones after it.
        """
        lane, since = self._lane, time.monotonic()
        while True:
            outputs = None if lane is None else lane(conn, decoder)
            if outputs:
                self.dispatch(outputs)
                if time.monotonic() - since > COALESCE_SECONDS:
                    self.flush()
                    since = time.monotonic()
                continue
            try:
                if outputs is None:  # not a subscribed client: everything the general way
                    objects = decoder.next_events()
                else:  # the object the lane left
                    obj = decoder.next_event()
                    objects = [obj] if isinstance(obj, BusinessObject) else []
            except (DecodeError, LimitError) as exc:
                log.info("object connection %s refused: %s", conn, exc)
                self.reject(conn, exc)
                return False
            if not objects:
                return True
            self.receive_batch(conn, objects)
