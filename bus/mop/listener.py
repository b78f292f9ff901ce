"""The MOP listener: MOP post offices join the bus (asyncio driver; docs/PROTOCOL.md section 11).

A MOP post office (seed 001; the Java ``PostOffice`` of SlightlyLoony/MOP, or any program that
speaks its frames) connects to :class:`MopListener` as to MOP's central post office. Each TCP
connection runs a sans-I/O :class:`~bus.mop.protocol.MopConnection`; an accepted post office
gets a bus client under its own name and a :class:`~bus.mop.bridge.PostOfficeSession` that
carries its messages both ways. The driver only moves bytes and time.

:func:`start_mop` is what ``busgate broker --mop-port`` and ``busgate run`` call: it takes the
post office secrets, open mode and the throttle of failed logins from the running broker, so a
MOP post office authenticates with the secret of its ``--office NAME:SECRET`` (the UTF-8 bytes
of the text), and an address that keeps failing is refused on both ports for a while. A broker
with a TLS certificate has its MOP listener speak TLS only, with the same certificate
(PROTOCOL.md 4.7); the post offices' bus clients are in-process links into the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from bus.asyncio.client import Client
from bus.asyncio.transport import BrokerTransport
from bus.broker.admission import LoginThrottle, RefusalLog
from bus.errors import BusError, ConfigError, ConnectError
from bus.link import auth
from bus.link.tls import listener_context
from bus.mop.bridge import DEFAULT_MAIL_TIMEOUT, MopSubscription, PostOfficeSession
from bus.mop.codec import DEFAULT_MAX_MESSAGE_SIZE, MAX_FRAME_LENGTH, NEED_DATA, MopMessage
from bus.mop.follow import REQUESTOR, Change, Follower, mop_type
from bus.mop.protocol import (
    CENTRAL,
    Admission,
    Closed,
    ConnectRequested,
    MopConnection,
    Received,
    Skipped,
)

if TYPE_CHECKING:  # pragma: no cover
    from bus.broker import Broker

__all__ = [
    "DEFAULT_MAX_WRITE_BUFFER",
    "DEFAULT_MOP_PORT",
    "MopListener",
    "open_mop_listener",
    "start_mop",
]

log = logging.getLogger(__name__)

#: The MOP listener's port when none is given: MOP's own default, 4000, is the bus's port.
DEFAULT_MOP_PORT: Final = 4001
#: Unsent bytes a post office may hold before it is cut off as too slow.
DEFAULT_MAX_WRITE_BUFFER: Final = 4 * 1024 * 1024
_READ_SIZE: Final = 65536

#: Opens the bus client of a post office: ``(name, secret text or None) -> Client``.
ClientFactory = Callable[[str, str | None], Awaitable[Client]]
#: What the bus subscribes to: ``() -> (version, {pattern: post offices holding it})``; the
#: version changes whenever the patterns do (the broker's ``Router``).
BusPatterns = Callable[[], tuple[int, Mapping[str, frozenset[str]]]]
#: The operator's MOP source mailboxes to follow, comma-separated ``po.mailbox``.
SOURCES_ENV: Final = "BUSGATE_MOP_SOURCES"
#: MOP types always asked of every source, comma-separated (``sensor,alarm.fire``).
TYPES_ENV: Final = "BUSGATE_MOP_TYPES"


@dataclass
class _Link:
    conn: MopConnection
    writer: asyncio.StreamWriter
    id: Hashable
    peer: str  # the post office's address (failed logins are counted per address)
    session: PostOfficeSession | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def flush(self, max_buffer: int) -> None:
        data = self.conn.data_to_send()
        if not data or self.writer.is_closing():
            return
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > max_buffer:
            log.warning("MOP post office %s too slow: closing", self.conn.post_office)
            self.conn.close("too slow: its unsent output passed the limit")


class MopListener:
    """MOP's central post office, on the bus.

    Args:
        admission: secrets, open mode and the replay rule.
        open_client: makes a post office's bus client (see :func:`start_mop`).
        ping_interval: seconds between ``manage.ping`` (default 5, MOP's).
        connect_timeout: seconds for the connect message (default 5).
        max_message_size: largest JSON body, announced in the accept (default 1 MiB, at most
            2**24 - 1, the most a MOP frame can say).
        mail_timeout: see :data:`bus.mop.bridge.DEFAULT_MAIL_TIMEOUT`.
        max_write_buffer: unsent bytes per post office before it is cut off (default 4 MiB).
        throttle: failed logins per address (the broker's, shared with its bus port: an
            address refused there is refused here, and the other way round); None: none.
        bus_patterns: what the bus subscribes to (:data:`BusPatterns`); the listener asks each
            post office, with MOP's own ``manage.subscribe``, for the publications that match
            (PROTOCOL.md 11.4), and keeps asking as the patterns change. None: it asks nothing.
        sources: ``po.mailbox`` addresses of MOP mailboxes that publish, followed from the
            start (besides the ones the listener sees in use).
        types: MOP types always asked of every source, whatever the bus subscribes to.
        follow_interval: seconds between two looks at ``bus_patterns`` (default 0.25).
    """

    def __init__(
        self,
        admission: Admission,
        open_client: ClientFactory,
        *,
        ping_interval: float = 5.0,
        connect_timeout: float = 5.0,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        mail_timeout: float = DEFAULT_MAIL_TIMEOUT,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
        throttle: LoginThrottle | None = None,
        bus_patterns: BusPatterns | None = None,
        sources: Iterable[str] = (),
        types: Iterable[str] = (),
        follow_interval: float = 0.25,
    ) -> None:
        self.admission = admission
        self.throttle = throttle
        self._refusals = RefusalLog()
        self._open_client = open_client
        self.ping_interval = ping_interval
        self.connect_timeout = connect_timeout
        self.max_message_size = min(max_message_size, MAX_FRAME_LENGTH)
        self.mail_timeout = mail_timeout
        self.max_write_buffer = max_write_buffer
        #: The snooped MOP subscriptions, per subscribing post office (kept across its links).
        self.subscriptions: dict[str, set[MopSubscription]] = {}
        self._ids = auth.IdGenerator("cpo")
        self._links: dict[Hashable, _Link] = {}
        self._numbers = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[object]] = set()
        #: The MOP subscriptions the listener itself holds for the bus (PROTOCOL.md 11.4).
        self.follower = Follower(sources, types=types)
        self._bus_patterns = bus_patterns
        self.follow_interval = follow_interval
        self._watcher: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The TCP port the listener is bound to (useful with ``port=0``)."""
        if self._server is None:
            raise ConnectError("the MOP listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_MOP_PORT,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """Listen on ``host:port`` (0: any free port), over TLS only when given ``tls`` (a
        server context, :func:`bus.link.tls.server_context`); its handshake must finish within
        ``connect_timeout``.

        Raises:
            ConnectError: the address cannot be bound.
        """
        timeout = self.connect_timeout if tls is not None else None
        try:
            self._server = await asyncio.start_server(
                self._on_client, host, port, ssl=tls, ssl_handshake_timeout=timeout
            )
        except OSError as exc:
            raise ConnectError(f"cannot listen on {host}:{port}: {exc}") from exc
        if self._bus_patterns is not None:
            self._watcher = asyncio.create_task(self._watch(self._bus_patterns), name="mop-follow")

    async def stop(self) -> None:
        """Close the listener and every link; their post offices will reconnect elsewhere."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self._server is not None:
            self._server.close()
        for link in list(self._links.values()):
            link.conn.close("the central post office is stopping")
            link.writer.transport.abort()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=10.0)
        if self._server is not None:
            await self._server.wait_closed()

    # -- one connection ----------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        loop = asyncio.get_running_loop()
        peer = _address(writer)
        if self.throttle is not None and self.throttle.refused(peer, time.monotonic()):
            # refused at the door, as on the bus port (PROTOCOL.md 5.7, 11.2): MOP has no
            # refusal message, the post office sees its link closed and retries later
            if self._refusals.due(peer, time.monotonic()):
                log.warning(
                    "MOP sockets from %s refused: too many failed logins in a minute "
                    "(logged once a minute)",
                    peer,
                )
            writer.close()
            return
        conn = MopConnection(
            loop.time(),
            ping_interval=self.ping_interval,
            connect_timeout=self.connect_timeout,
            max_message_size=self.max_message_size,
            ids=self._ids,
        )
        link = _Link(conn, writer, next(self._numbers), peer)
        self._links[link.id] = link
        try:
            await self._serve(link, reader)
        except (ConnectionError, OSError) as exc:
            log.debug("MOP link %s lost: %s", link.id, exc)
        except Exception:  # a bug must cost this link only, never the listener
            log.exception("MOP link %s failed", link.id)
        finally:
            await self._end(link)

    async def _serve(self, link: _Link, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        tick = min(0.5, self.ping_interval / 4)
        while True:
            data: bytes | None = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick):
                    data = await reader.read(_READ_SIZE)
            now = loop.time()
            if data is not None:
                link.conn.receive_data(data, now)
            link.conn.tick(now)
            if not await self._drain(link):
                link.flush(self.max_write_buffer)
                return
            link.flush(self.max_write_buffer)

    async def _drain(self, link: _Link) -> bool:
        """Handle every event; False once the link is closed."""
        while (event := link.conn.next_event()) is not NEED_DATA:
            if isinstance(event, ConnectRequested):
                await self._connect(link, event)
            elif isinstance(event, Received):
                self.admission.observe(event.message.post_office, link.id, event.message.id)
                if link.session is not None:
                    self._learn(event.message)
                    link.session.handle(event.message)
            elif isinstance(event, Skipped):
                log.warning(
                    "MOP link %s (%s): skipped %d bytes, %s",
                    link.id,
                    link.conn.post_office or "not connected",
                    event.size,
                    event.reason,
                )
            elif isinstance(event, Closed):
                log.info(
                    "MOP link %s (%s) closed: %s", link.id, link.conn.post_office, event.reason
                )
                return False
        return True

    async def _connect(self, link: _Link, event: ConnectRequested) -> None:
        post_office = event.post_office
        refusal = self.admission.check(event.message, link.id)
        if refusal is not None and self.throttle is not None:  # a wrong or replayed login
            self.throttle.failed(link.peer, time.monotonic())
        if refusal is None:
            try:
                client = await self._open_client(post_office, self._secret_text(post_office))
            except BusError as exc:
                refusal = f"the bus is not reachable: {exc}"
        if refusal is not None:
            log.warning("MOP post office %r refused: %s", post_office, refusal)
            link.conn.refuse(refusal)
            return
        first, displaced = self.admission.accepted(event.message, link.id)
        if displaced is not None and displaced in self._links:
            self._links[displaced].conn.close("a newer link of the same post office connected")
            self._links[displaced].writer.transport.abort()
        link.conn.accept(first)
        link.session = PostOfficeSession(
            post_office,
            client,
            lambda message: self._send(link, message),
            self.subscriptions.setdefault(post_office, set()),
            self.admission.connected,
            self._ids,
            mail_timeout=self.mail_timeout,
            on_lost=lambda: link.conn.close("its bus link was lost"),
            held=self._held,
        )
        await link.session.start()
        if not event.reconnect:
            self._refresh(link, post_office)
            self.follower.restarted(post_office)  # it holds none of our subscriptions now
        self._ask(link, post_office)
        log.info("MOP post office %s connected (%s)", post_office, "first" if first else "again")

    def _secret_text(self, post_office: str) -> str | None:
        secret = self.admission.secret_of(post_office)
        return None if secret is None else secret.decode("utf-8")

    def _refresh(self, link: _Link, post_office: str) -> None:
        """A post office that (re)started learns who subscribes to its mailboxes (MOP's CPO)."""
        for subscriber, subs in sorted(self.subscriptions.items()):
            for sub in sorted(subs):
                if sub.source.partition(".")[0] != post_office or subscriber == post_office:
                    continue
                fields = {"source": sub.source, "type": sub.type, "requestor": sub.requestor}
                message = MopMessage(
                    f"{subscriber}.po",
                    self._ids.next(),
                    to=f"{post_office}.po",
                    type="manage.subscribe",
                    fields=fields,
                )
                link.conn.send(message)

    # -- following what the bus subscribes to (PROTOCOL.md 11.4) ------------------------------

    async def _watch(self, bus_patterns: BusPatterns) -> None:
        seen = -1
        while True:
            version, patterns = bus_patterns()
            if version != seen:
                seen = version
                ours = set(self.admission.connected())  # our post offices' own bus clients
                wanted = [p for p, offices in patterns.items() if not offices <= ours]
                if self.follower.follow(wanted):
                    for link in list(self._links.values()):
                        if link.session is not None and link.conn.post_office:
                            self._ask(link, link.conn.post_office)
            await asyncio.sleep(self.follow_interval)

    def _learn(self, message: MopMessage) -> None:
        """A post office's mailbox (or, in a subscription, another's) seen in use: a source."""
        found = [message.sender]
        if message.type == "manage.subscribe" and isinstance(message.fields.get("source"), str):
            found.append(str(message.fields["source"]))
        for address in found:
            if self.follower.learn(address):
                link = self._live_link(address.partition(".")[0])
                if link is not None:
                    self._ask(link, link.conn.post_office or "")

    def _live_link(self, post_office: str) -> _Link | None:
        for link in self._links.values():
            if link.session is not None and link.conn.post_office == post_office:
                return link
        return None

    def _held(self, source: str, type_: str) -> bool:
        """Whether the listener or a MOP subscriber holds (source, type) at its post office."""
        return self.follower.asked(source, type_) or self._snooped(source, type_)

    def _snooped(self, source: str, type_: str) -> bool:
        """Whether a MOP subscriber (a subscription the listener snooped) holds it."""
        return any(
            sub.source == source and sub.type == type_
            for subs in self.subscriptions.values()
            for sub in subs
        )

    def _ask(self, link: _Link, post_office: str) -> None:
        """Send a post office the subscriptions that bring it to what the bus wants."""
        changes = self.follower.changes(post_office, held=self._snooped)
        for change in changes:
            link.conn.send(_subscription(change, post_office, self._ids.next()))
        if changes:
            link.flush(self.max_write_buffer)
            log.info(
                "MOP post office %s asked for %d subscription change(s) for the bus",
                post_office,
                len(changes),
            )

    def _send(self, link: _Link, message: MopMessage) -> None:
        link.conn.send(message)
        link.flush(self.max_write_buffer)

    async def _end(self, link: _Link) -> None:
        self._links.pop(link.id, None)
        if link.conn.post_office:
            self.admission.gone(link.conn.post_office, link.id)
        if link.session is not None:
            with contextlib.suppress(Exception):
                await link.session.stop()
        link.writer.close()
        with contextlib.suppress(Exception):
            await link.writer.wait_closed()


def _subscription(change: Change, post_office: str, message_id: str) -> MopMessage:
    kind = "manage.subscribe" if change.subscribe else "manage.unsubscribe"
    fields = {"source": change.source, "type": change.type, "requestor": REQUESTOR}
    return MopMessage(CENTRAL, message_id, to=f"{post_office}.po", type=kind, fields=fields)


def follow_from_env() -> tuple[list[str], list[str]]:
    """The sources in :data:`SOURCES_ENV` and the types in :data:`TYPES_ENV` (comma-separated).

    Raises:
        ConfigError: a source is not ``po.mailbox``, a type not ``major`` or ``major.minor``.
    """
    sources = _words(SOURCES_ENV)
    for source in sources:
        office, _, mailbox = source.partition(".")
        if not office or not mailbox or "." in mailbox:
            raise ConfigError(f"{SOURCES_ENV}: a MOP source is po.mailbox, not {source!r}")
    types = _words(TYPES_ENV)
    for type_ in types:
        if mop_type(type_) != type_ or type_.count(".") > 1:
            raise ConfigError(f"{TYPES_ENV}: a MOP type is major or major.minor, not {type_!r}")
    return sources, types


def _words(name: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, "").split(",") if part.strip()]


async def open_mop_listener(
    broker: Broker,
    host: str = "127.0.0.1",
    port: int = DEFAULT_MOP_PORT,
    **options: float,
) -> MopListener:
    """Start a MOP listener on ``host:port`` for the post offices of a running broker.

    Secrets, open mode and the throttle of failed logins are the broker's (as they are at each
    connect); each post office's bus client logs in with its own secret (busgate's
    ``hmac-sha256`` mode) over an in-process link (:meth:`bus.broker.Broker.local_link`). A
    broker with a TLS certificate: the listener speaks TLS only (its certificate, and with
    ``tls_ca`` client certificates required).

    Args:
        broker: the running broker.
        host: the listener's address.
        port: its port (0: any free port; :data:`DEFAULT_MOP_PORT` usually).
        **options: :class:`MopListener` keyword arguments.

    Returns:
        The started listener (``await listener.stop()`` stops it).

    Raises:
        ConnectError: the address cannot be bound.
        ConfigError: a TLS file is missing or unreadable, or BUSGATE_MOP_SOURCES or
            BUSGATE_MOP_TYPES is malformed.
    """
    authority = broker.authority
    config = broker.config
    tls = listener_context(config.tls_cert, config.tls_key, config.tls_ca)

    async def open_client(name: str, secret: str | None) -> Client:
        # over an in-process link: neither the broker's TLS nor the failed logins of others on
        # its host (the door's throttle of 127.0.0.1) stand between an accepted post office
        # and its bus client
        def factory(inbox: str, reconnecting: bool) -> BrokerTransport:
            return BrokerTransport(
                "in-process", broker.port, name=name, secret=secret, inbox=inbox,
                reconnect=reconnecting, socket_source=broker.local_link,
            )  # fmt: skip

        return await Client(factory, reconnect=False, name=name).open()

    admission = Admission(authority.secret, lambda: bool(authority.open_mode))
    sources, types = follow_from_env()
    router = broker.router

    def bus_patterns() -> tuple[int, Mapping[str, frozenset[str]]]:
        return router.pattern_version, router.patterns()

    listener = MopListener(
        admission,
        open_client,
        ping_interval=config.ping_interval_ms / 1000,
        connect_timeout=config.connect_timeout_ms / 1000,
        max_message_size=config.max_message_size,
        throttle=broker.throttle,
        bus_patterns=bus_patterns,
        sources=sources,
        types=types,
        **options,  # type: ignore[arg-type]
    )
    await listener.start(host, port, tls)
    log.info(
        "MOP listener on %s:%d%s for the post offices of the broker on port %d",
        host,
        listener.port,
        " (TLS)" if tls else "",
        broker.port,
    )
    return listener


async def start_mop(
    broker: Broker, host: str = "127.0.0.1", port: int = DEFAULT_MOP_PORT
) -> Callable[[], Awaitable[None]]:
    """:func:`open_mop_listener` for the CLI: returns the function that stops it.

    Raises:
        ConnectError: the address cannot be bound.
    """
    listener = await open_mop_listener(broker, host, port)
    return listener.stop


def _address(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "local"
