"""The broker's asyncio driver: sockets in, :mod:`bus.broker.protocol` and :mod:`.routing` inside.

Each accepted socket gets a :class:`BrokerConnection` (the sans-I/O handshake and keepalive)
and a :class:`Link`, the ``asyncio.Protocol`` that feeds it bytes and writes what it says.
Routed messages are forwarded as the exact bytes received (``docs/PROTOCOL.md`` section 5),
framed once however many connections get them.

Slow consumers: a link's transport holds at most ``_HIGH_WATER`` bytes; beyond that the link
queues in user space, and when that queue passes ``max_queue_bytes`` the link is evicted with
Disconnect(APPLICATION_ERROR). Publishers never wait for a slow consumer, and no other link
loses anything.

This module holds the broker's life, its links and routing; its mixins answer the rest:
``manage.*`` commands (:mod:`bus.broker.control`), confirmed publishes
(:mod:`bus.broker.confirming`) and durable subscriptions (:mod:`bus.broker.resuming`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Final

from bus.broker import management
from bus.broker.admission import LoginThrottle, PendingSockets, RefusalLog
from bus.broker.admitting import Admitting
from bus.broker.config import BrokerConfig
from bus.broker.confirm import Confirmations
from bus.broker.confirming import ConfirmedPublishing
from bus.broker.control import RCD_BAD_REQUEST, RCD_NO_SUCH_OFFICE, ControlCommands
from bus.broker.history_commands import HistoryCommands
from bus.broker.link import LINK_LOST, Link
from bus.broker.presence_links import PresenceLinks
from bus.broker.protocol import (
    Authenticated,
    Authority,
    BrokerConnection,
)
from bus.broker.replay import with_seq
from bus.broker.resuming import DurableSubscriptions
from bus.broker.routing import MAX_NAME, Router
from bus.discovery.names import RESERVED_PREFIXES
from bus.discovery.services import system_event_allowed
from bus.errors import BusError, ConfigError, RefusedError
from bus.frame.codec import Limits
from bus.frame.enums import CloseReason
from bus.link import wire
from bus.link.tls import server_context
from bus.message.message import Flag, Message, MessageType, decode_message, encode_message

__all__ = [
    "EVICTED",
    "LINK_LOST",
    "NO_RESPONDERS",
    "RCD_NO_RESPONDERS",
    "RCD_NO_SUCH_OFFICE",
    "Broker",
]

log = logging.getLogger("bus.broker")

RCD_NO_RESPONDERS: Final = 503
NO_RESPONDERS: Final = "no responders"
#: MSG of the NAK 503 for a request discarded with a slow consumer's queue.
EVICTED: Final = "not delivered: its consumer was evicted as a slow consumer"
_PUBSUB: Final = frozenset({MessageType.EVT.value, MessageType.HBT.value})
_EVT: Final = MessageType.EVT.value
_OAM: Final = MessageType.OAM.value
_ALL: Final = int(Flag.ALL)
_TOO_LONG: Final = f"GRP or TGT longer than {MAX_NAME} characters: not routed"
#: Connections the kernel queues before the broker accepts them (asyncio's default is 100):
#: under a flood of connects a short queue drops everyone's SYNs, a login's too (1 s, 3 s, ...
#: retransmissions), while the broker refuses the flood at once.
_BACKLOG: Final = 1024


class Broker(
    Admitting,
    ConfirmedPublishing,
    DurableSubscriptions,
    HistoryCommands,
    PresenceLinks,
    ControlCommands,
):
    """The central post office.

    Args:
        config: every setting (see :class:`BrokerConfig`).
        journal: a writer with ``append(raw: bytes, now: float)``; default: one opened from
            ``config.journal`` when set (``bus.journal.Journal``).
        nonce: server nonce source for the challenge (default: :func:`bus.link.auth.new_nonce`).

    Use ``await broker.start()`` then ``await broker.stop()``, or ``async with Broker(...)``.
    """

    def __init__(
        self,
        config: BrokerConfig | None = None,
        *,
        journal: Any = None,
        nonce: Callable[[], bytes] | None = None,
    ) -> None:
        self.config = config or BrokerConfig()
        self.router = Router(self.config.max_subscriptions)
        self.authority = Authority(
            self.config.offices, self.config.open, self.config.replay_memory, self.config.gateways
        )
        self.journal = journal
        self._own_journal = False  # opened from config.journal: closed on stop
        self._nonce = nonce
        self._links: dict[int, Link] = {}
        # links still in their handshake (by address: PendingSockets), and how many are logged in
        self._pending = PendingSockets(
            self.config.max_pending_connections, self.config.max_pending_per_address
        )
        self._refusals = RefusalLog()  # refusals at the door: logged once a minute per address
        self._registered = 0
        self.throttle = LoginThrottle(self.config.max_auth_failures)
        self.confirms = Confirmations()
        self._sync_timer: asyncio.Handle | None = None
        #: fsync always, once per input batch (ConfirmedPublishing._commit)
        self._group_commit = False
        #: one write() per input batch (ConfirmedPublishing._write_journal)
        self._batch_writes = False
        self._dirty: list[Link] = []  # links with coalesced output to write
        #: bytes in every link's queue, their peak since memory was last given back, and the
        #: traffic then (PROTOCOL.md 5.7: memory comes back after a burst)
        self.queued_total = 0
        self.queued_peak = 0
        self._released_at = (0.0, 0)
        self._traffic_seen = 0
        self._numbers = 0
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._stopping = False
        self._bound = 0
        self.started = time.time()
        self.stats: dict[str, int] = dict.fromkeys(management.COUNTERS, 0)
        self._replay_cursors = {}
        self._read_ahead_bytes = 0
        self._last_values = None  # the last event of each type, read when asked (5.15)
        self._last_lock = None
        self._history_tasks = set()
        self._history_cursors = {}  # history pages read forward: where the next one starts
        self._relays = set()  # presence (5.16): subscriptions made as relays
        self._present = {}  # presence: each link's entry

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on ``config.host:config.port`` (``port`` 0: any free port, see :attr:`port`).

        Raises:
            ConfigError: the address cannot be bound.
        """
        if self.config.open:
            log.warning("broker runs in OPEN mode: clients may connect without a secret")
        if self.journal is None and self.config.journal is not None:
            self.journal = _open_journal(self.config)
            self._own_journal = True
            self._recover_confirms()
        self._group_commit = bool(getattr(self.journal, "group_commit", False))
        self._batch_writes = bool(getattr(self.journal, "batch_writes", False))
        loop = asyncio.get_running_loop()
        config = self.config
        tls = None
        if config.tls_cert is not None and config.tls_key is not None:
            tls = server_context(config.tls_cert, config.tls_key, config.tls_ca)
        try:
            self._server = await loop.create_server(
                lambda: Link(self),
                config.host,
                config.port,
                reuse_address=True,
                backlog=_BACKLOG,
                ssl=tls,
                ssl_handshake_timeout=config.connect_timeout_ms / 1000 if tls else None,
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self.config.host}:{self.config.port}: {exc}"
            ) from exc
        self.started = time.time()
        self._bound = self.port
        self._ticker = asyncio.create_task(self._tick_forever(), name="broker-ticker")
        log.info(
            "broker listening on %s:%d%s", self.config.host, self.port, " (TLS)" if tls else ""
        )

    @property
    def port(self) -> int:
        """The TCP port listened on (useful after starting on port 0; kept after stop)."""
        if self._server is not None and self._server.sockets:
            self._bound = int(self._server.sockets[0].getsockname()[1])
        return self._bound or self.config.port

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, send Disconnect(SERVER_SHUTDOWN) after each link's queued output,
        and wait (at most ``timeout`` seconds) for the links to close."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        links = list(self._links.values())
        for link in links:
            if link.conn is not None:
                link.conn.close(CloseReason.SERVER_SHUTDOWN, "the broker is shutting down")
                link.drain_events()
        if links:
            await asyncio.wait([link.lost for link in links], timeout=timeout)
        for link in links:
            if link.transport is not None:
                link.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
        await self._confirms_settled()
        for task in list(self._history_tasks):  # history reads in flight: nobody to answer
            task.cancel()
        if self._history_tasks:
            await asyncio.wait(list(self._history_tasks), timeout=timeout)
        if self._own_journal:
            self.journal.close()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _tick_forever(self) -> None:
        interval = self.config.ping_interval_ms / 1000
        step = min(
            interval / 4,
            self.config.connect_timeout_ms / 4000,
            self.config.write_deadline_ms / 4000,
        )
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            if self.journal is not None:  # the interval policy's fsync after a burst's end
                self._sync_journal()
            self._release_memory(now)
            deadline = self.config.write_deadline_ms / 1000
            for link in list(self._links.values()):
                if link.paused and link.stalled_since and now - link.stalled_since > deadline:
                    self._evict(link, f"its socket took nothing for {deadline:g} s")
                    continue
                if link.conn is not None and not link.closing:
                    try:
                        link.conn.tick(now)
                        link.drain_events()
                    except Exception:  # one broken link must not stop keepalive for all
                        log.exception("link %d: tick failed; closing it", link.number)
                        link.abort()

    # -- links -------------------------------------------------------------------------------

    def _flush_dirty(self) -> None:
        if self._batch_writes or self._group_commit:  # the batch's records on disk first
            self._commit()
        dirty, self._dirty = self._dirty, []
        for link in dirty:
            link.write_batch()

    def _next_number(self) -> int:
        self._numbers += 1
        return self._numbers

    def _new_connection(self, certificate: str | None = None) -> BrokerConnection:
        extra = {} if self._nonce is None else {"nonce": self._nonce}
        return BrokerConnection(
            self.authority,
            time.monotonic(),
            ping_interval=self.config.ping_interval_ms / 1000,
            connect_timeout=self.config.connect_timeout_ms / 1000,
            max_message_size=self.config.max_message_size,
            max_handshake_bytes=self.config.max_handshake_bytes,
            certificate_name=certificate,
            **extra,
        )

    def _register(self, link: Link, event: Authenticated) -> None:
        conn = link.conn
        assert conn is not None
        self._pending.remove(link.number)
        if self._registered >= self.config.max_connections:
            self.stats["refused_connections"] += 1
            conn.refuse(
                None,
                f"the broker is full: {self.config.max_connections} links logged in",
                rcd=RCD_NO_RESPONDERS,
                reason=CloseReason.CONNECTION_REFUSED,
            )
            return
        holder = self.router.consumers(event.inbox)
        for number in holder:  # a reconnecting client takes its inbox back (same office only)
            old = self._links.get(number)
            if old is not None and old.conn is not None and old.conn.office == event.office:
                old.conn.close(CloseReason.SERVER_CLOSING, "replaced by a new connection")
                old.drain_events()
        try:
            self.router.add_connection(link.number, event.office, event.inbox)
        except RefusedError as exc:
            conn.refuse(None, exc.reason, rcd=409)
            return
        link.registered = True
        self._registered += 1
        conn.accept()
        log.info("link %d: %s connected (%s)", link.number, event.office, event.mode.value)

    def _forget(self, link: Link) -> None:
        if link.registered:
            self.router.remove_connection(link.number)
            link.registered = False
            self._registered -= 1
        self._pending.remove(link.number)
        self._links.pop(link.number, None)
        self._forget_catch_ups(link.number)
        self._presence_gone(link.number)

    def _evict(self, link: Link, why: str = "output queue full") -> None:
        """Drop a slow consumer: its queue is discarded, Disconnect(APPLICATION_ERROR) follows
        what the transport already holds."""
        self.stats["slow_consumers"] += 1
        log.warning(
            "link %d (%s) evicted: slow consumer (%s), %d bytes queued",
            link.number,
            link.conn.office if link.conn else "",
            why,
            link.queued,
        )
        queued = list(link.queue)
        link.queue.clear()
        self.queued_total -= link.queued
        link.queued = 0
        if link.conn is not None:
            link.conn.close(CloseReason.APPLICATION_ERROR, f"slow consumer: {why}")
            link.drain_events()
        self._fail_requests(queued, EVICTED)

    def _fail_requests(self, frames: list[bytes], text: str) -> None:
        """Answer NAK 503 to every request in output discarded with a link (its callers would
        otherwise wait for their timeout). A request for all consumers is left out: the other
        consumers answer it."""
        decoder = wire.WireDecoder(max_message=self.config.max_message_size)
        limits = Limits(max_size=self.config.max_message_size)
        try:
            for data in frames:
                decoder.receive_data(data)
            for event in decoder.events():
                if not isinstance(event, wire.MessageReceived):
                    continue
                message = decode_message(event.data, limits)
                if message.typ == MessageType.RQS.value and not message.to_all:
                    self.stats["failed_requests"] += 1
                    self._answer_failure(message, RCD_NO_RESPONDERS, text)
        except BusError as exc:  # our own output: cannot happen unless a bug
            log.error("could not read back discarded output: %s", exc)

    # -- routing -----------------------------------------------------------------------------

    def _dispatch(self, link: Link, message: Message, raw: bytes) -> None:
        # The routing fields as items of the header tuple (not one descriptor call each):
        # every message passes here.
        head = message.header
        typ = head.typ
        if typ == _EVT:  # taken, whatever its fate below: the link's receipts count it (5.12)
            link.events_in += 1
        elif typ == _OAM:
            cmd = message.cmd or ""
            if cmd.startswith("manage."):
                self._control(link, message, cmd)
                return
        grp = head.grp or ""
        tgt = head.tgt
        if len(grp) > MAX_NAME or (tgt is not None and len(tgt) > MAX_NAME):
            self.stats["dropped"] += 1
            self._answer_failure(message, RCD_BAD_REQUEST, _TOO_LONG)
            return
        if typ in _PUBSUB:
            if grp.startswith(RESERVED_PREFIXES) and not system_event_allowed(typ, grp):
                self.stats["refused_system"] += 1
                log.info("link %d: %s on the system's %r refused", link.number, typ, grp[:64])
                return
        confirm = typ == _EVT and head.rpy is not None  # a confirmed publish (5.12)
        if confirm and self._duplicate(link, message):
            return
        self.stats["routed"] += 1
        seq = self._journal(raw) if self.journal is not None else None
        if typ in _PUBSUB:
            if seq is not None and typ == _EVT:  # its place in the journal travels with it (5.14)
                raw = with_seq(raw, head.enc, seq)
            numbers = self.router.subscribers(grp)
            if numbers:
                self._deliver(numbers, raw)
            else:
                self.stats["dropped"] += 1
            if confirm:
                self._confirm(link, message, seq)
        elif tgt:
            self._mail(link, message, raw)
        elif grp:
            self._to_group(message, raw, grp, bool((head.flg or 0) & _ALL))
        else:
            self._answer_failure(message, RCD_BAD_REQUEST, "no GRP or TGT: cannot route")

    def _journal(self, raw: bytes) -> int | None:
        try:
            seq: int | None = self.journal.append(raw, time.time())
        except BusError as exc:  # the bus keeps running; the journal reports its own damage
            self.stats["journal_errors"] += 1
            log.error("journal append failed: %s", exc)
            self._answer_lost()  # a rotation writes what is pending first: that may have failed
            return None
        return seq

    def _deliver(self, numbers: list[int], raw: bytes) -> None:
        framed = wire.encode_message(raw)
        for number in numbers:
            link = self._links.get(number)
            if link is not None:
                link.write(framed)

    def _to_group(self, message: Message, raw: bytes, group: str, to_all: bool) -> None:
        if to_all:
            numbers = self.router.consumers(group)
        else:
            chosen = self.router.choose(group)
            numbers = [] if chosen is None else [chosen]
        if numbers:
            self._deliver(numbers, raw)
            return
        if message.typ == MessageType.RQS.value:
            self.stats["no_responders"] += 1
            self._answer_failure(message, RCD_NO_RESPONDERS, NO_RESPONDERS)
        else:
            self.stats["dropped"] += 1

    def _mail(self, link: Link, message: Message, raw: bytes) -> None:
        office = (message.tgt or "").partition(".")[0]
        number = self.router.office(office)
        if number is not None:
            self._deliver([number], raw)
            return
        self.stats["dropped"] += 1
        self._answer_failure(message, RCD_NO_SUCH_OFFICE, f"no post office {office!r}")

    def _answer_failure(self, message: Message, rcd: int, text: str) -> None:
        """NAK a request the broker cannot route, to its RPY (nothing when it has none).
        The NAK is journaled like every message the broker routes."""
        if message.typ != MessageType.RQS.value or not message.rpy:
            return
        nak = message.nak(text, rcd)
        nak.src = management.CENTRAL
        raw = encode_message(nak)
        if self.journal is not None:
            self._journal(raw)
        chosen = self.router.choose(message.rpy)
        if chosen is not None:
            self._deliver([chosen], raw)


def _open_journal(config: BrokerConfig) -> Any:
    from bus.journal import Journal, JournalFilter

    setting = config.journal
    assert setting is not None
    return Journal(
        os.fspath(setting.directory),
        filter=JournalFilter(groups=setting.group_patterns, types=setting.type_set),
        max_segment_bytes=setting.max_segment_bytes,
        max_segment_age=setting.max_segment_age_ms / 1000,
        fsync=setting.fsync,
        fsync_interval=setting.fsync_interval_ms / 1000,
        group_commit=True,  # fsync always: once per input batch, before its output leaves
        batch_writes=True,  # one write() per input batch, before its output leaves
        retain_bytes=setting.max_bytes,
        retain_age=setting.max_age_ms / 1000,
    )
