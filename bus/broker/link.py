"""One broker socket as an ``asyncio.Protocol``: feeds its sans-I/O connection, writes its output.

A :class:`Link` hands every event of its :class:`~bus.broker.protocol.BrokerConnection` to its
owner (:class:`bus.broker.server.Broker`, seen here through :class:`Owner`) and holds what the
socket cannot take yet: the OS transport holds ``_HIGH_WATER`` bytes, then the link queues in
user space until the owner evicts it as a slow consumer (PROTOCOL.md 5.7).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Final, Protocol, cast

from bus.accelerators import accelerator
from bus.broker.admission import IN_PROCESS, LoginThrottle
from bus.broker.config import BrokerConfig
from bus.broker.protocol import Authenticated, BrokerConnection, Closed, Inbound, State
from bus.broker.replay import with_seq
from bus.broker.routing import MAX_NAME, Router
from bus.errors import BusError
from bus.frame.enums import CloseReason
from bus.link import wire
from bus.link.receipts import encode_receipt
from bus.link.tls import certificate_name
from bus.message.message import Message

__all__ = ["LINK_LOST", "Link", "Owner"]

log = logging.getLogger("bus.broker")

#: MSG of the NAK 503 for a request still queued when its consumer's link was lost.
LINK_LOST: Final = "not delivered: its consumer's link was lost"
#: Bytes the OS transport may hold for one link before we queue in user space.
_HIGH_WATER: Final = 64 * 1024
#: The longest a routed message waits for the rest of its input batch before it is written.
COALESCE_SECONDS: Final = 0.0005
_READY: Final = State.READY  # looked up once: read for every message
#: The C routing path (bus/native/_hotpath.c ``route``; None: the broker's Python path for every
#: message, the reference it mirrors).
_ROUTE: Final[Any] = getattr(accelerator("bus.native._hotpath"), "route", None)
#: Messages the C path routes per call, at most: then the coalescing clock is read.
_FAST_RUN: Final = 64
#: Seconds an evicted or closing link gets to take its last bytes before it is aborted.
_CLOSE_GRACE: Final = 2.0
#: Seconds a closing link gets to take its queued output before it is aborted.
_DRAIN_GRACE: Final = 5.0


class Owner(Protocol):
    """What a link needs of the broker that owns it (:class:`bus.broker.server.Broker`)."""

    config: BrokerConfig
    journal: Any
    router: Router
    stats: dict[str, int]
    throttle: LoginThrottle
    #: bytes in every link's queue, and the most they came to since memory was last released
    queued_total: int
    queued_peak: int
    _links: dict[int, Link]
    _dirty: list[Link]

    def _next_number(self) -> int: ...
    def _admits(self, peer: str) -> bool: ...
    def _new_connection(self, certificate: str | None = None) -> BrokerConnection: ...
    def _pending_handshake(self, link: Link) -> None: ...
    def _dispatch(self, link: Link, message: Message, raw: bytes) -> None: ...
    def _journal(self, raw: bytes) -> int | None: ...
    def _route_confirmed(self, link: Link, raw: bytes) -> bool: ...
    def _confirm_run(self, link: Link, bodies: list[bytes], start: int, limit: int) -> int: ...
    def _register(self, link: Link, event: Authenticated) -> None: ...
    def _flush_dirty(self) -> None: ...
    def _commit(self) -> None: ...
    def _forget(self, link: Link) -> None: ...
    def _evict(self, link: Link, why: str = ...) -> None: ...
    def _over_total(self) -> Link | None: ...
    def _fail_requests(self, frames: list[bytes], text: str) -> None: ...


class Link(asyncio.Protocol):
    """One socket: feeds its :class:`BrokerConnection`, writes its output, holds its queue."""

    def __init__(self, broker: Owner, *, local: bool = False, vouched: str | None = None) -> None:
        self.broker = broker
        self.local = local  # a link from inside the broker's process (Broker.local_link)
        self.vouched = vouched  # the post office the broker's own process says it is (local)
        self.number = broker._next_number()
        self.conn: BrokerConnection | None = None
        self.transport: asyncio.Transport | None = None
        self.queue: deque[bytes] = deque()
        self.batch: list[bytes] = []
        self.queued = 0  # bytes in self.queue
        self.paused = False
        self.stalled_since = 0.0  # when the transport paused, with nothing moving since
        self.closing = False
        self.registered = False
        self.peer = ""  # the client's address (failed logins are counted per address)
        self.lost = asyncio.get_running_loop().create_future()
        self.opened = time.time()
        # What this link moved (manage.connections): messages and bytes, each way.
        self.messages_in = self.messages_out = self.bytes_in = self.bytes_out = 0
        # Publish receipts (PROTOCOL.md 5.12): events (TYP=EVT) taken from this link, and the
        # count of the last receipt written; sent only once the client asked (manage.receipts).
        self.events_in = self.receipted = 0
        self.receipts = False
        # Whether the last body read was a confirmed publish: the next read tries the confirm
        # lane first (a publisher's confirms come in runs), without probing the C route.
        self.confirming = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport = transport
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        if self.local:
            self.peer = IN_PROCESS
        else:
            self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "local"
        broker = self.broker
        if not broker._admits(self.peer):
            broker.stats["refused_connections"] += 1
            transport.write(wire.encode_disconnect(CloseReason.CONNECTION_REFUSED))
            self._close_transport()
            return
        broker._links[self.number] = self
        # over TLS with --tls-ca, the verified client certificate names a post office; an
        # in-process link may be vouched for by the broker's own process (its bridge)
        named = self.vouched if self.local else None
        self.conn = broker._new_connection(
            named or certificate_name(transport.get_extra_info("peercert"))
        )
        broker._pending_handshake(self)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None:
            return
        self.broker.stats["bytes_in"] += len(data)
        self.bytes_in += len(data)
        conn.receive_data(data, time.monotonic())
        self.drain_events()

    def eof_received(self) -> bool | None:
        if self.conn is not None:
            self.conn.receive_data(b"", time.monotonic())
            self.drain_events()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.broker._forget(self)
        if self.queue:  # never written: its requests are answered, not left to time out
            queued = list(self.queue)
            self.queue.clear()
            self.broker.queued_total -= self.queued
            self.queued = 0
            self.broker._fail_requests(queued, LINK_LOST)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True
        self.stalled_since = time.monotonic()

    def resume_writing(self) -> None:
        self.paused = False
        self.stalled_since = 0.0
        while self.queue and not self.paused and self.transport is not None:
            data = self.queue.popleft()
            self.queued -= len(data)
            self.broker.queued_total -= len(data)
            self.transport.write(data)
        if not self.queue and self.closing:
            # Not from inside this callback: the standard loop's transport, resuming us from
            # its write callback, would report the loss of a transport closed here twice.
            asyncio.get_running_loop().call_soon(self._close_transport)

    # -- events ------------------------------------------------------------------------------

    def drain_events(self) -> None:
        """Handle every buffered event, then write what the connection produced."""
        conn = self.conn
        assert conn is not None
        broker = self.broker
        since = time.monotonic()
        while True:
            bodies = conn.next_messages()  # the usual input: messages, without an event each
            if bodies:
                since = self._route_bodies(conn, bodies, since)
                continue
            event = conn.next_event()
            if event is wire.NEED_DATA:
                break
            if isinstance(event, Inbound):
                self._route(event.message, event.raw)
                if time.monotonic() - since > COALESCE_SECONDS:
                    # A long batch: what is routed so far goes on now, so the consumers work
                    # on it while the rest is routed (the client's transport does the same).
                    broker._flush_dirty()
                    since = time.monotonic()
            elif isinstance(event, Authenticated):
                broker._register(self, event)
            elif isinstance(event, Closed):
                self.flush()
                self._finish(event)
                broker._flush_dirty()
                return
        if self.receipts and self.events_in != self.receipted:
            self._receipt()
        self.flush()
        broker._flush_dirty()

    def _route_bodies(self, conn: BrokerConnection, bodies: list[bytes], since: float) -> float:
        """Route the bodies of one read (:meth:`BrokerConnection.next_messages`); returns when
        the output was last handed on (see the coalescing in :meth:`drain_events`).

        The usual message (its sender already named; a request or an answer to a group whose
        consumer takes it at once, or an event someone subscribes to, journaled and given its
        SEQ when the broker has a journal) is routed by the C accelerator, a run of them per call
        (:meth:`_route_fast`); a confirmed publish by the broker's confirm lane, a run of them
        per call (:meth:`_confirm_run`; a retry or a JSON body one by one,
        :meth:`_route_confirmed`), which is tried first after one (they come in runs); any
        other goes through the broker one by one.
        """
        broker = self.broker
        stamper = conn.stamper
        office = None if _ROUTE is None or stamper is None else stamper.latin1
        at, count = 0, len(bodies)
        confirming = self.confirming  # the last body (of this read or the last) was a confirm
        # (raw.find(b"RPY"), not ``b"RPY" in raw``: under CPython 3.11, ``in`` on bytes first
        # tries the needle as an integer, and formats and clears a TypeError each time)
        while at < count:
            raw = bodies[at]
            if confirming and raw.find(b"RPY") >= 0 and (end := self._confirm_run(bodies, at)) > at:
                at = end  # a run of confirmed publishes
            elif confirming and raw.find(b"RPY") >= 0 and self._route_confirmed(raw):
                at += 1  # one the run left to the one-by-one lane (a retry, JSON, ...)
            elif office is not None and (end := self._route_fast(conn, office, bodies, at)) > at:
                at = end  # a run routed by C
                confirming = False
            elif raw.find(b"RPY") >= 0 and (end := self._confirm_run(bodies, at)) > at:
                at = end  # confirmed publishes, read from their headers alone
                confirming = True
            elif raw.find(b"RPY") >= 0 and self._route_confirmed(raw):
                at += 1  # a confirmed publish, read from its header alone
                confirming = True
            else:
                confirming = False
                routable = conn.read_routable(raw)
                at += 1
                if routable is None:
                    break  # the connection closed: next_event says so
                self._route(*routable)
            if conn.state is not _READY:
                break  # routing closed it (an eviction): the rest is not read
            if time.monotonic() - since > COALESCE_SECONDS:
                broker._flush_dirty()  # as in drain_events
                since = time.monotonic()
        self.confirming = confirming
        return since

    def _route_fast(
        self, conn: BrokerConnection, office: bytes, bodies: list[bytes], start: int
    ) -> int:
        """Route ``bodies[start:]`` in C while each is the usual message, at most
        :data:`_FAST_RUN` of them (then the caller checks the coalescing clock); returns the
        index of the first body left to the broker's Python path. ``office`` is the sender's
        name as a header's bytes read it."""
        assert _ROUTE is not None and conn.stamper is not None
        broker = self.broker
        journal = broker._journal if broker.journal is not None else None
        router, limits = broker.router, conn.limits
        end, written, events = _ROUTE(
            bodies, start, _FAST_RUN, office, conn.stamper.trusted, limits.max_size,
            limits.max_depth, limits.max_fields, MAX_NAME, router.group_table, broker._links,
            broker._dirty, journal, router.subscribers, with_seq,
        )  # fmt: skip
        if end > start:
            routed = end - start
            self.messages_in += routed
            self.events_in += events  # taken: the receipts count them (PROTOCOL.md 5.12)
            stats = broker.stats
            stats["routed"] += routed
            stats["bytes_out"] += written
        return int(end)

    def _route(self, message: Message, raw: bytes) -> None:
        self.messages_in += 1
        try:
            self.broker._dispatch(self, message, raw)
        except BusError as exc:  # e.g. an answer that cannot be encoded
            log.warning("link %d: message not routed: %s", self.number, exc)
            self.broker.stats["dropped"] += 1

    def _confirm_run(self, bodies: list[bytes], start: int) -> int:
        """A run of confirmed publishes routed by the broker's confirm lane, at most
        :data:`_FAST_RUN`; returns the index of the first body left."""
        return self.broker._confirm_run(self, bodies, start, _FAST_RUN)

    def _route_confirmed(self, raw: bytes) -> bool:
        """A confirmed publish routed by the broker's own lane (no Message built); False when
        ``raw`` is not one that lane takes."""
        try:
            return self.broker._route_confirmed(self, raw)
        except BusError as exc:  # e.g. an answer that cannot be encoded
            log.warning("link %d: message not routed: %s", self.number, exc)
            self.broker.stats["dropped"] += 1
            return True

    def _receipt(self) -> None:
        """One receipt for this batch: every event read so far is routed and journaled."""
        self.receipted = count = self.events_in
        journal = self.broker.journal
        self.write(encode_receipt(count, journal.last_seq if journal is not None else 0), True)

    def flush(self) -> None:
        """Write the connection's own output (control replies, pings, Disconnect)."""
        if self.conn is not None:
            data = self.conn.data_to_send()
            if data:
                self.write(data, control=True)

    def write(self, data: bytes, control: bool = False) -> bool:
        """Write or queue bytes. Returns False when this overflowed the queue (link evicted)."""
        transport = self.transport
        if transport is None or (self.closing and not control):
            return True
        self.broker.stats["bytes_out"] += len(data)
        self.bytes_out += len(data)
        if not control:
            self.messages_out += 1
        if not self.paused and not self.queue:
            # Coalesced: written once per input batch by Broker._flush_dirty (fewer syscalls).
            if not self.batch:
                self.broker._dirty.append(self)
            self.batch.append(data)
            return True
        self.queue.append(data)
        self.queued += len(data)
        broker = self.broker
        broker.queued_total += len(data)
        if broker.queued_total > broker.queued_peak:
            broker.queued_peak = broker.queued_total
        if control:
            return True
        if self.queued > broker.config.max_queue_bytes:
            broker._evict(self)
            return False
        if broker.queued_total > broker.config.max_total_queue_bytes:
            return broker._over_total() is not self  # the link holding the most goes
        return True

    def write_batch(self) -> None:
        """Hand the coalesced output of this input batch to the transport."""
        batch, transport = self.batch, self.transport
        if not batch or transport is None or transport.is_closing():
            batch.clear()
            return
        data = batch[0] if len(batch) == 1 else b"".join(batch)
        batch.clear()
        transport.write(data)

    def _finish(self, event: Closed) -> None:
        level = logging.DEBUG if event.reason is CloseReason.CLIENT_CLOSING else logging.INFO
        office = self.conn.office if self.conn else ""
        log.log(
            level,
            "link %d (%s) closed: %s (%s)",
            self.number,
            office,
            event.detail,
            event.reason.name,
        )
        if event.reason is CloseReason.AUTHENTICATION_FAILURE:
            self.broker.stats["refused_auth"] += 1
            if not self.local:
                self.broker.throttle.failed(self.peer, time.monotonic())
        self.broker._forget(self)
        self.closing = True
        if not self.queue:
            self._close_transport()
        elif self.transport is not None:  # resume_writing closes once the queue is out
            asyncio.get_running_loop().call_later(_DRAIN_GRACE, self._abort_unless_lost)

    def abort(self) -> None:
        """Drop the socket at once (no Disconnect): for a link in an impossible state."""
        self.broker._forget(self)
        if self.transport is not None:
            self.transport.abort()

    def _close_transport(self) -> None:
        self.broker._commit()  # what the batch carries is on disk first (fsync always)
        self.write_batch()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.close()
        # A peer that reads nothing would keep a closing transport forever.
        asyncio.get_running_loop().call_later(_CLOSE_GRACE, self._abort_unless_lost)

    def _abort_unless_lost(self) -> None:
        """The grace after a close is over: drop the socket, unless it is already gone. The
        standard loop's transport reports its loss a second time when aborted after its close
        drained the buffer (an "Exception in callback ..._call_connection_lost" traceback in the
        log of every evicted slow consumer)."""
        if self.transport is not None and not self.lost.done():
            self.transport.abort()
