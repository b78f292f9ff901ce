"""The asyncio bus client: requests, streams of responses, publish/subscribe, groups, direct mail.

::

    client = await connect("bus://127.0.0.1:4000", name="gateway", secret="s3cret")
    ack = await client.request("demo", "echo", {"x": 1}, timeout=5.0)
    async for resp in client.request_stream("demo", "count", {"n": 3}):
        ...
    await client.publish("sensor.temp", {"c": 18.2})
    sub = await client.subscribe("sensor.*")      # async iterator of Message
    grp = await client.consume("demo")            # competing consumer (what a Service uses)
    reply = await client.mail("po.mailbox", {"pump": "off"}, expect=True)
    await client.close()

How it behaves when the link drops (``docs/PROTOCOL.md`` 5.8):

- It reconnects with jittered exponential backoff (``backoff_initial`` doubling up to
  ``backoff_max``, each delay drawn uniformly from its upper half), with ``manage.reconnect``
  and the same inbox, and restores every subscription, consumed group and mailbox.
- While disconnected, what you send waits in a bounded buffer (``buffer_size`` messages) and is
  sent in order once the link is back; when it is full, :class:`~bus.errors.BufferFullError`
  is raised at once: nothing is dropped silently.
- A published event is kept until the broker's receipt covers it, resent after the
  reconnection unless the broker already journaled it, and reported when it can no longer be
  delivered (``on_publish_failed``, else :class:`~bus.errors.PublishFailedError` from the next
  ``publish()`` or ``flush()``; PROTOCOL.md 5.12, :mod:`bus.asyncio.receipts`).
- A request already *sent* when the link drops fails at once with
  :class:`~bus.errors.DisconnectedError`: it is never re-sent on its own, because only the
  caller knows whether running it twice is safe. A request still in the buffer was never sent,
  so it goes out after the reconnection and is answered normally.
- Incoming messages wait in each subscription's bounded queue (``queue_size``). A subscription
  that is not read fast enough loses the newest events (counted in ``Subscription.dropped``);
  a consumer that is full answers a request NAK 503 ``consumer overloaded`` itself.

This module holds the link's life (connecting, restoring, reconnecting, closing) and sending;
:class:`Client` gets the rest from its mixins: requests and mail (:mod:`bus.asyncio.requests`),
subscriptions (:mod:`bus.asyncio.subscription`), receipts (:mod:`bus.asyncio.receipts`),
publish/flush (:mod:`bus.asyncio.publishing`) and history (:mod:`bus.asyncio.history`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from bus.asyncio.deadlines import Deadlines
from bus.asyncio.history import History
from bus.asyncio.links import TransportFactory, transport_factory
from bus.asyncio.publishing import Publishing
from bus.asyncio.receipts import FailureHandler, Receipts
from bus.asyncio.requests import DEFAULT_TIMEOUT, Requests, _Pending
from bus.asyncio.subscription import DEFAULT_QUEUE_SIZE, Subscription
from bus.asyncio.subscriptions import Subscriptions
from bus.asyncio.transport import SessionInfo, Transport
from bus.discovery.topics import INBOX_PREFIX
from bus.errors import (
    BufferFullError,
    BusError,
    ClosedError,
    DisconnectedError,
    LimitError,
)
from bus.frame.enums import CloseReason
from bus.link.backoff import Backoff
from bus.link.receipts import DEFAULT_WINDOW
from bus.message.message import Message, encode_message, new_id

__all__ = [
    "Backoff",
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_QUEUE_SIZE",
    "DEFAULT_TIMEOUT",
    "Client",
    "Subscription",
    "connect",
]

log = logging.getLogger("bus.client")

#: Messages buffered while disconnected before BufferFullError.
DEFAULT_BUFFER_SIZE: Final = 1000
#: Seconds a link must have lived for a reconnection to another server to start at once.
FLAP_SECONDS: Final = 1.0


class Client(Requests, Subscriptions, Receipts, Publishing, History):
    """A connection to the bus that survives reconnections. Make one with :func:`connect`.

    Args:
        factory: makes a transport: ``factory(inbox, reconnecting)``.
        reconnect: reconnect after losing the link (default True).
        buffer_size: messages buffered while disconnected.
        queue_size: messages each subscription holds.
        timeout: default request timeout, seconds.
        backoff_initial: first reconnection delay, seconds (MOP: 0.5).
        backoff_max: longest reconnection delay, seconds.
        name: the post office name (for SRC of mail).
        receipts: keep each published event until the broker receipts it, resend it after a
            reconnection, report it when it cannot be delivered (PROTOCOL.md 5.12).
        receipt_window: bytes of unreceipted events kept at most before a publish waits.
        on_publish_failed: called with the events that cannot be delivered; without it the
            next ``publish()`` or ``flush()`` raises :class:`~bus.errors.PublishFailedError`.
        give_up_after: seconds without a link after which the client stops reconnecting and
            ends as if closed, reporting what it holds (default None: it never gives up).

    Attributes:
        backoff_schedule: the :class:`Backoff` of the reconnections (reset after each success).
        down_since: the loop time the link was lost at, while the client reconnects (None while
            it is up); a gateway waits briefly for a link lost a moment ago.

    Raises:
        ConfigError: ``backoff_initial`` <= 0 or ``backoff_max`` < ``backoff_initial``.
    """

    def __init__(
        self,
        factory: TransportFactory,
        *,
        reconnect: bool = True,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        timeout: float = DEFAULT_TIMEOUT,
        backoff_initial: float = 0.5,
        backoff_max: float = 5.0,
        name: str | None = None,
        receipts: bool = True,
        receipt_window: int = DEFAULT_WINDOW,
        on_publish_failed: FailureHandler | None = None,
        give_up_after: float | None = None,
    ) -> None:
        self._factory = factory
        self.give_up_after = give_up_after
        self.reconnect = reconnect
        self.buffer_size = buffer_size
        self.queue_size = queue_size
        self.timeout = timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.backoff_schedule = Backoff(backoff_initial, backoff_max)
        self.name = name or ""
        self.inbox = INBOX_PREFIX + new_id().replace("-", "")
        self.reconnects = 0
        self.info: SessionInfo | None = None
        self._transport: Transport | None = None
        self._connected = False
        self._closed = False
        self._pending: dict[str, _Pending] = {}
        self._deadlines = Deadlines()  # the requests' timers (bus/asyncio/deadlines.py)
        self._buffer: deque[Message] = deque()
        self._subs: dict[str, list[Subscription]] = {}
        self._durables = 0  # durable subscriptions among them (5.14)
        self._groups: dict[str, list[Subscription]] = {}
        self._mailboxes: dict[str, Subscription] = {}
        #: groups whose manage.leave is on its way: requests still routed here go back
        self._leaving: set[str] = set()
        self._reconnector: asyncio.Task[None] | None = None
        #: loop time the link was lost at, while reconnecting (None: up, or never up)
        self.down_since: float | None = None
        self._up_since = 0.0
        self._up = asyncio.Event()
        self._ever_up = False
        self._init_receipts(receipts, receipt_window, on_publish_failed)

    # -- the link ----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while the link is up."""
        return self._connected

    @property
    def transport(self) -> Transport | None:
        """The current link (a new one after each reconnection; None before the first)."""
        return self._transport

    @property
    def streams(self) -> bool:
        """True when durable subscriptions are fed by the transport's own stream (NATS with
        JetStream): only their events carry ``SEQ`` (PROTOCOL.md 10.1)."""
        return self._transport is not None and self._transport.streams

    async def open(self) -> Client:
        """Make the first connection: what :func:`connect` does with the client it builds; for
        a client made on transports of its own (an in-process link,
        :meth:`bus.broker.Broker.local_link`).

        Raises:
            ConnectError, AuthError: as :func:`connect`.
        """
        await self._open(reconnecting=False)
        return self

    async def _open(self, reconnecting: bool) -> None:
        transport = self._factory(self.inbox, reconnecting)
        info = await transport.open(self._on_message, self._on_lost)
        self._transport = transport
        self.info = info
        self.name = info.name
        for sub in self._subs_durable():  # live events wait for the catch-up (5.14): the
            sub.catching_up = True  # restore below takes round trips before it starts
        await self._restore(transport)
        self._connected = True
        self._ever_up = True
        self.down_since = None
        self._up_since = asyncio.get_running_loop().time()
        self._up.set()
        if reconnecting and self._durables:
            self._resume_durables()

    async def _restore(self, transport: Transport) -> None:
        """Resubscribe everything, then send the buffer, before anyone else may send."""
        done: set[tuple[str, str]] = set()
        while True:  # until nothing added meanwhile is missing
            missing = [("manage.subscribe", "pattern", key) for key in self._subs]
            missing += [("manage.consume", "group", key) for key in self._groups]
            missing = [item for item in missing if (item[0], item[2]) not in done]
            if not missing:
                break
            for cmd, arg, key in missing:
                done.add((cmd, key))
                relay = cmd == "manage.subscribe" and self._relayed(key)
                args: dict[str, Any] = {arg: key, "relay": True} if relay else {arg: key}
                await self._quiet_call(transport, cmd, args)
        await self._restore_receipts(transport)  # what the lost link left unreceipted (5.12)
        while self._buffer:
            message = self._buffer[0]
            try:
                await transport.send(message)
            except LimitError as exc:  # the new broker takes smaller messages: fail this one
                self._buffer.popleft()
                failed = self._pending.pop(message.mid or "", None)
                if failed is not None:
                    failed.put(exc)
                continue
            self._buffer.popleft()
            self._mark_sent(message)

    def _subs_durable(self) -> list[Subscription]:
        return [
            sub for subs in self._subs.values() for sub in subs if sub.durable and not sub._ended
        ]

    def _resume_durables(self) -> None:
        """After a reconnection: each durable subscription catches up from its position."""
        for sub in self._subs_durable():
            if sub.catch_up is not None:
                sub.catch_up.cancel()  # one asked on the lost link: ask again here
            sub.catching_up = False
            self._start_catch_up(sub)

    async def _quiet_call(self, transport: Transport, cmd: str, args: Mapping[str, Any]) -> None:
        try:
            await transport.call(cmd, args, self.timeout)
        except DisconnectedError:
            raise
        except BusError as exc:
            log.error("could not restore %s %s: %s", cmd, dict(args), exc)

    def _on_lost(self, error: DisconnectedError) -> None:
        if not self._ever_up:
            return  # the first connection failed: connect() raises
        self._connected = False
        self.down_since = asyncio.get_running_loop().time()
        self._up.clear()
        self._room.set()  # a publish waiting for receipts buffers instead
        for mid, pending in list(self._pending.items()):
            if pending.sent:
                pending.put(error)
                del self._pending[mid]
        if self._closed:
            return
        if not self.reconnect:
            self._finish(error)
            return
        evicted = error.close_reason is CloseReason.APPLICATION_ERROR
        why = "evicted by the broker as a slow consumer" if evicted else "bus link lost"
        subscribed = [sub for subs in self._subs.values() for sub in subs if not sub.durable]
        for sub in subscribed:  # what is published until the reconnection misses them
            sub.gaps += 1
            sub.last_gap = f"{why} ({error})"
        gap = "; events published until the reconnection are missed" if subscribed else ""
        log.warning("%s (%s)%s; reconnecting", why, error, gap)
        if self._reconnector is None or self._reconnector.done():
            self._reconnector = asyncio.create_task(self._reconnect(), name="bus-reconnect")

    async def _reconnect(self) -> None:
        backoff = self.backoff_schedule
        attempt = 0
        lost = asyncio.get_running_loop().time()
        # Another server to go to (a NATS cluster): the first attempt at once, as NATS's own
        # clients do, unless the lost link had lived less than a second (no busy loop).
        at_once = self._transport is not None and self._transport.alternatives
        at_once = at_once and lost - self._up_since >= FLAP_SECONDS
        while not self._closed:
            budget = self.give_up_after
            if budget is not None and asyncio.get_running_loop().time() - lost >= budget:
                why = f"no link for {budget:g} s: the client gave up reconnecting"
                log.error("%s after %d attempt(s)", why, attempt)
                self._finish(DisconnectedError(why, CloseReason.SOCKET_ERROR))
                return
            if not (at_once and attempt == 0):
                await asyncio.sleep(backoff.next_delay())
            attempt += 1
            try:
                await self._open(reconnecting=True)
            except BusError as exc:
                log.info("reconnect attempt %d failed: %s", attempt, exc)
                if self._transport is not None:
                    await self._transport.close()
                continue
            self.reconnects += 1
            backoff.reset()  # the next outage starts from backoff_initial again
            log.info("bus link restored after %d attempt(s)", attempt)
            return

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the link is up.

        Raises:
            TimeoutError: still down after ``timeout`` seconds.
            ClosedError: the client is closed.
        """
        self._check_open()
        async with asyncio.timeout(timeout):
            await self._up.wait()

    async def close(self) -> None:
        """Close the link and end every subscription; pending requests fail. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._reconnector is not None:
            self._reconnector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnector
        if self._connected and self.unreceipted:  # their receipts first, while they come
            await self._drain_receipts()
        self._connected = False
        if self._transport is not None:
            await self._transport.close()
        self._finish(DisconnectedError("the client was closed", CloseReason.CLIENT_CLOSING))

    def fail_pending(self, error: BusError) -> int:
        """Fail every request still waiting for an answer (its owner is shutting down), so its
        caller hears why; the link and the subscriptions stay. Returns how many there were."""
        pending = list(self._pending.values())
        self._pending.clear()
        for waiting in pending:
            waiting.put(error)
        return len(pending)

    def _finish(self, error: DisconnectedError) -> None:
        self._closed = True
        for pending in self._pending.values():
            pending.put(error)
        self._pending.clear()
        self._fail_all(f"the client ended before the broker took them ({error})")
        self._buffer.clear()
        self._room.set()
        clean = error.close_reason is CloseReason.CLIENT_CLOSING
        for sub in self._all_subscriptions():
            sub._end(None if clean else error)

    def _all_subscriptions(self) -> list[Subscription]:
        subs = [sub for subs in self._subs.values() for sub in subs]
        subs += [sub for subs in self._groups.values() for sub in subs]
        return subs + list(self._mailboxes.values())

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the bus client is closed")

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- sending -----------------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        """Send a message as it is (responses, mail, anything already built).

        Raises:
            BufferFullError: disconnected and the buffer is full.
            LimitError: larger than the broker's max message size.
            ClosedError: the client is closed.
        """
        self._check_open()
        if self._connected and self._transport is not None:
            # Marked before the write: if the link drops while the write waits, the request
            # fails with DisconnectedError (it may have left) instead of waiting for a timeout.
            pending = self._pending.get(message.mid or "")
            if pending is not None:
                pending.sent = True
            try:
                await self._transport.send(message)
                return
            except DisconnectedError:  # nothing was written
                if pending is not None:
                    pending.sent = False
                if not self.reconnect:
                    raise
        self._hold(message)

    def write_now(self, frames: bytes) -> bool:
        """Write one message's wire frames if the link takes them at once; False: nothing was
        sent (closed, disconnected, its buffer full, a transport without frames): send() it."""
        transport = self._transport
        if self._closed or not self._connected or transport is None:
            return False
        return transport.write_now(frames)

    def _hold(self, message: Message) -> None:
        if not self.reconnect:
            raise DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        if len(self._buffer) >= self.buffer_size:
            raise BufferFullError(
                f"disconnected and the outbound buffer is full ({self.buffer_size} messages)"
            )
        # What cannot travel (EncodeError: nested deeper than max_depth, a value out of range)
        # is refused now, not when the link is back and nobody is there to hear it.
        encode_message(message)
        self._buffer.append(message)

    def _mark_sent(self, message: Message) -> None:
        pending = self._pending.get(message.mid or "")
        if pending is not None:
            pending.sent = True


async def connect(
    url: str = "bus://127.0.0.1:4000",
    name: str | None = None,
    secret: str | None = None,
    *,
    mode: str | None = None,
    reconnect: bool = True,
    connect_timeout: float = 5.0,
    timeout: float = DEFAULT_TIMEOUT,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    queue_size: int = DEFAULT_QUEUE_SIZE,
    backoff_initial: float = 0.5,
    backoff_max: float = 5.0,
    tls: ssl.SSLContext | None = None,
    receipts: bool = True,
    on_publish_failed: FailureHandler | None = None,
    give_up_after: float | None = None,
) -> Client:
    """Connect and authenticate to the bus.

    Args:
        url: ``bus://[name:secret@]host:port`` (default port 4000), the same over TLS as
            ``bus+tls://...``, or ``nats://host:port``.
        name: post office name (with a secret; open mode: any name or none).
        secret: the post office's secret; without one the broker must run in open mode.
        mode: ``hmac-sha256`` (default with a secret), ``sha256`` (MOP) or ``open``.
        reconnect: reconnect after a lost link (see the module doc).
        connect_timeout: seconds for the first connection and for each reconnection attempt.
        timeout: default request timeout.
        buffer_size: messages buffered while disconnected.
        queue_size: messages each subscription holds.
        backoff_initial: first reconnection delay; doubles up to ``backoff_max``.
        backoff_max: longest reconnection delay.
        tls: the TLS context of a ``bus+tls://`` link (default :func:`bus.link.tls.client_context`:
            the CA and client certificate of ``BUSGATE_BUS_TLS_*``, else the system's CAs).
            With a client certificate, ``mode="tls"`` logs in as the office it names.
        receipts: keep published events until the broker receipts them (5.12).
        on_publish_failed: called with published events that cannot be delivered.
        give_up_after: seconds without a link before the client stops reconnecting and ends.

    Returns:
        The connected client.

    Raises:
        ConnectError: cannot connect within ``connect_timeout`` (or refused: too many links).
        AuthError: authentication refused (wrong secret, unknown post office, ...).
        ConfigError: a bad URL.
    """
    factory, name = transport_factory(
        url, name, secret, mode=mode, connect_timeout=connect_timeout, tls=tls
    )
    client = Client(
        factory,
        reconnect=reconnect,
        buffer_size=buffer_size,
        queue_size=queue_size,
        timeout=timeout,
        backoff_initial=backoff_initial,
        backoff_max=backoff_max,
        name=name,
        receipts=receipts,
        on_publish_failed=on_publish_failed,
        give_up_after=give_up_after,
    )
    await client._open(reconnecting=False)
    return client
