"""The asyncio bus client: requests, streams of responses, publish/subscribe, groups, direct mail.

::

    client = await bus.client.connect("bus://127.0.0.1:4000", name="gateway", secret="s3cret")
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
- A request already *sent* when the link drops fails at once with
  :class:`~bus.errors.DisconnectedError`: it is never re-sent on its own, because only the
  caller knows whether running it twice is safe. A request still in the buffer was never sent,
  so it goes out after the reconnection and is answered normally.
- Incoming messages wait in each subscription's bounded queue (``queue_size``). A subscription
  that is not read fast enough loses the newest events (counted in ``Subscription.dropped``);
  a consumer that is full answers a request NAK 503 ``consumer overloaded`` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from bus.broker.routing import INBOX_PREFIX, check_pattern, matches
from bus.enums import CloseReason, Encoding
from bus.errors import (
    BufferFullError,
    BusError,
    ClosedError,
    ConfigError,
    DisconnectedError,
    LimitError,
    NakError,
    NoRespondersError,
    RequestTimeout,
)
from bus.frame import DataFrame
from bus.message import Message, MessageType, new_id
from bus.transport import BrokerTransport, SessionInfo, Transport

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

#: Kestrel's default request timeout (seed 000), seconds.
DEFAULT_TIMEOUT: Final = 5.0
#: Messages buffered while disconnected before BufferFullError.
DEFAULT_BUFFER_SIZE: Final = 1000
#: Messages waiting in one subscription before the newest are dropped.
DEFAULT_QUEUE_SIZE: Final = 10_000
_NO_RESPONDERS: Final = "no responders"
_ANSWERS: Final = frozenset({MessageType.ACK.value, MessageType.NAK.value})
_EVENTS: Final = frozenset({MessageType.EVT.value, MessageType.HBT.value})

TransportFactory = Callable[[str, bool], Transport]


class Backoff:
    """Reconnection delays: exponential with jitter, sans-I/O (the random draw is an argument).

    The ``n``-th delay (from 0) is drawn uniformly from ``[c/2, c]`` where
    ``c = min(maximum, initial * 2**n)``: the upper half, so clients that lost the same broker
    do not all come back at the same instant, and never less than half the schedule.

    Args:
        initial: the first ceiling, seconds (MOP's reconnect delay, 0.5).
        maximum: the largest ceiling, seconds.

    Raises:
        ConfigError: ``initial`` <= 0 or ``maximum`` < ``initial``.
    """

    def __init__(self, initial: float = 0.5, maximum: float = 5.0) -> None:
        if initial <= 0 or maximum < initial:
            raise ConfigError(f"bad backoff: initial {initial} must be > 0 and <= max {maximum}")
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0

    def ceiling(self) -> float:
        """The upper bound of the next delay."""
        # 2.0**1000 is a float: a days-long outage never overflows the schedule.
        return min(self.maximum, self.initial * 2.0 ** min(self.attempt, 1000))

    def next_delay(self, draw: Callable[[float, float], float] = random.uniform) -> float:
        """The next delay, seconds; each call moves one step up the schedule.

        Args:
            draw: ``draw(low, high)`` picks a number in ``[low, high]`` (default uniform).
        """
        ceiling = self.ceiling()
        self.attempt += 1
        return draw(ceiling / 2, ceiling)

    def reset(self) -> None:
        """Start the schedule over (after a successful connection)."""
        self.attempt = 0


class _End:
    """Queued to end a subscription; carries the error to raise, if any."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class Subscription:
    """An async iterator of the messages of one pattern, group or mailbox.

    Attributes:
        kind: ``"subscribe"``, ``"consume"`` or ``"mailbox"``.
        key: the pattern, group or mailbox name.
        dropped: messages lost because the queue was full.
    """

    def __init__(self, client: Client, kind: str, key: str, queue_size: int) -> None:
        self.client = client
        self.kind = kind
        self.key = key
        self.dropped = 0
        self.queue_size = queue_size
        # A deque and the readers' futures, not an asyncio.Queue: every received message
        # passes here, and this costs a third of the Queue's put and get.
        self._items: deque[Message | _End] = deque()
        self._readers: deque[asyncio.Future[None]] = deque()
        self._ended = False

    def _wake(self) -> None:
        readers = self._readers
        while readers:
            reader = readers.popleft()
            if not reader.done():
                reader.set_result(None)
                return

    def _put(self, message: Message) -> bool:
        if self._ended:
            return False
        if len(self._items) >= self.queue_size:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("%s %r is not read fast enough: dropping", self.kind, self.key)
            return False
        self._items.append(message)
        if self._readers:
            self._wake()
        return True

    def _end(self, error: BaseException | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self._items.append(_End(error))  # after what is queued: it is read first
        for reader in self._readers:
            if not reader.done():
                reader.set_result(None)
        self._readers.clear()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        items = self._items
        while not items:
            reader = asyncio.get_running_loop().create_future()
            self._readers.append(reader)
            try:
                await reader
            except asyncio.CancelledError:
                if reader.done() and not reader.cancelled() and items:
                    self._wake()  # it was woken for an item it will not take: pass it on
                raise
        item = items[0]
        if isinstance(item, _End):  # left in place: later calls end too
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        items.popleft()
        if items and self._readers:
            self._wake()
        return item

    async def get(self, timeout: float | None = None) -> Message:
        """The next message.

        Raises:
            TimeoutError: none within ``timeout``.
            StopAsyncIteration: the subscription ended.
        """
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    def pending(self) -> int:
        """Messages waiting to be read."""
        items = self._items
        return len(items) - (1 if items and isinstance(items[-1], _End) else 0)

    async def unsubscribe(self) -> None:
        """Stop receiving; the iterator ends after what is already queued."""
        await self.client._drop(self)

    leave = unsubscribe


class _Pending:
    """A request waiting for its answers: one (a future) or a stream of them (a queue)."""

    __slots__ = ("future", "group", "queue", "sent", "timeout")

    def __init__(self, group: str, timeout: float, stream: bool = False) -> None:
        self.group = group
        self.timeout = timeout
        self.sent = False
        self.queue: asyncio.Queue[Message | BaseException] | None = None
        self.future: asyncio.Future[Message | BaseException] | None = None
        if stream:
            self.queue = asyncio.Queue()
        else:
            self.future = asyncio.get_running_loop().create_future()

    def put(self, item: Message | BaseException) -> None:
        """Hand over an answer (or the error the waiter raises); a single one keeps the first."""
        if self.queue is not None:
            self.queue.put_nowait(item)
        elif self.future is not None and not self.future.done():
            self.future.set_result(item)

    async def get(self) -> Message | BaseException:
        """The next answer or error; raises TimeoutError after ``timeout`` seconds."""
        future = self.future
        if future is None:
            assert self.queue is not None
            async with asyncio.timeout(self.timeout):
                return await self.queue.get()
        # One timer, no Timeout context: most requests are answered once.
        timer = asyncio.get_running_loop().call_later(self.timeout, self.put, _TIMED_OUT)
        try:
            item = await future
        finally:
            timer.cancel()
        if item is _TIMED_OUT:
            raise TimeoutError
        return item


_TIMED_OUT: Final = TimeoutError("the request timed out")


class Client:
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

    Attributes:
        backoff_schedule: the :class:`Backoff` of the reconnections (reset after each success).

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
    ) -> None:
        self._factory = factory
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
        self._buffer: deque[Message] = deque()
        self._subs: dict[str, list[Subscription]] = {}
        self._groups: dict[str, list[Subscription]] = {}
        self._mailboxes: dict[str, Subscription] = {}
        #: groups whose manage.leave is on its way: requests still routed here go back
        self._leaving: set[str] = set()
        self._reconnector: asyncio.Task[None] | None = None
        self._up = asyncio.Event()
        self._ever_up = False

    # -- the link ----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while the link is up."""
        return self._connected

    async def _open(self, reconnecting: bool) -> None:
        transport = self._factory(self.inbox, reconnecting)
        info = await transport.open(self._on_message, self._on_lost)
        self._transport = transport
        self.info = info
        self.name = info.name
        await self._restore(transport)
        self._connected = True
        self._ever_up = True
        self._up.set()

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
                await self._quiet_call(transport, cmd, {arg: key})
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
        self._up.clear()
        for mid, pending in list(self._pending.items()):
            if pending.sent:
                pending.put(error)
                del self._pending[mid]
        if self._closed:
            return
        if not self.reconnect:
            self._finish(error)
            return
        log.warning("bus link lost (%s); reconnecting", error)
        if self._reconnector is None or self._reconnector.done():
            self._reconnector = asyncio.create_task(self._reconnect(), name="bus-reconnect")

    async def _reconnect(self) -> None:
        backoff = self.backoff_schedule
        attempt = 0
        while not self._closed:
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
        self._connected = False
        if self._transport is not None:
            await self._transport.close()
        self._finish(DisconnectedError("the client was closed", CloseReason.CLIENT_CLOSING))

    def _finish(self, error: DisconnectedError) -> None:
        self._closed = True
        for pending in self._pending.values():
            pending.put(error)
        self._pending.clear()
        self._buffer.clear()
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

    def _hold(self, message: Message) -> None:
        if not self.reconnect:
            raise DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        if len(self._buffer) >= self.buffer_size:
            raise BufferFullError(
                f"disconnected and the outbound buffer is full ({self.buffer_size} messages)"
            )
        self._buffer.append(message)

    def _mark_sent(self, message: Message) -> None:
        pending = self._pending.get(message.mid or "")
        if pending is not None:
            pending.sent = True

    async def publish(
        self, type: str, payload: Mapping[str, Any] | DataFrame | None = None
    ) -> None:
        """Publish an event (TYP=EVT) of a ``major.minor`` type to its subscribers.

        Raises:
            BufferFullError, LimitError, ClosedError: as :meth:`send`.
        """
        await self.send(Message.event(type, payload if payload is not None else {}))

    # -- requests ----------------------------------------------------------------------------

    async def _start(
        self,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None,
        timeout: float | None,
        to_all: bool,
        enc: Encoding | str,
        xpy: int | None,
        stream: bool = False,
    ) -> tuple[Message, _Pending]:
        message = Message.request(
            group, cmd, args, reply_to=self.inbox, enc=enc, xpy=xpy, to_all=to_all
        )
        return message, await self._send_request(message, timeout, stream)

    async def _send_request(
        self, message: Message, timeout: float | None, stream: bool
    ) -> _Pending:
        mid = message.mid
        if mid is None:
            raise ConfigError("a request needs a MID to be answered")
        pending = _Pending(message.grp or "", self.timeout if timeout is None else timeout, stream)
        self._pending[mid] = pending
        try:
            await self.send(message)
        except BaseException:
            self._pending.pop(mid, None)
            raise
        return pending

    async def call(self, message: Message, *, timeout: float | None = None) -> Message:
        """Send a request built by the caller (its RPY must be :attr:`inbox`) and return its
        first ACK, as :meth:`request` does.

        The gateway uses it to send a request whose JSON payload it passes on as it came
        (``Message.json_request``).

        Raises:
            NakError, NoRespondersError, RequestTimeout, DisconnectedError, BufferFullError:
                as :meth:`request`.
            ConfigError: the message has no MID.
        """
        pending = await self._send_request(message, timeout, False)
        try:
            response = await self._next(message, pending)
        finally:
            self._pending.pop(message.mid or "", None)
        if response.typ == MessageType.NAK.value:
            raise NakError(response.msg or "", response.rcd, response)
        return response

    async def _next(self, message: Message, pending: _Pending) -> Message:
        try:
            item = await pending.get()
        except TimeoutError as exc:
            self._pending.pop(message.mid or "", None)
            self._buffer_remove(message)
            raise RequestTimeout(pending.group, pending.timeout) from exc
        if isinstance(item, BaseException):
            raise item
        if item.typ == MessageType.NAK.value and _is_no_responders(item):
            self._pending.pop(message.mid or "", None)
            raise NoRespondersError(pending.group)
        if not item.more:
            self._pending.pop(message.mid or "", None)
        return item

    def _buffer_remove(self, message: Message) -> None:
        with contextlib.suppress(ValueError):
            self._buffer.remove(message)  # it timed out before the link came back

    async def request(
        self,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None = None,
        *,
        timeout: float | None = None,
        to_all: bool = False,
        enc: Encoding | str = Encoding.FRAM,
        xpy: int | None = None,
        retry: bool = False,
        **fields: Any,
    ) -> Message:
        """Send a request to one consumer of ``group`` and return its (first) ACK.

        ``client.request("demo", "echo", {"x": 1})`` and ``client.request("demo", "echo", x=1)``
        send the same request.

        Args:
            group: the group (GRP).
            cmd: the command (CMD).
            args: the arguments (the rest of PLD).
            **fields: more arguments as keywords (added to ``args``, which must then be a
                mapping or None).
            timeout: seconds to wait (default: the client's, 5 s).
            to_all: every consumer gets it (``Flag.ALL``); the first answer is returned.
            enc: how it travels (FRAM, or JSON as a non-framework client would).
            xpy: expiry, epoch seconds.
            retry: the caller declares the command safe to run twice (idempotent): when the
                link drops after sending, it is sent again after the reconnection, within the
                same ``timeout``, instead of raising DisconnectedError.

        Returns:
            The ACK message (``.payload`` holds the result).

        Raises:
            NakError: answered with a NAK (``.msg``, ``.rcd``, ``.response``).
            NoRespondersError: nobody consumes the group (answered at once by the broker).
            RequestTimeout: no answer within ``timeout``.
            DisconnectedError: the link dropped after the request was sent (not ``retry``).
            BufferFullError: disconnected and the buffer is full.
            ConfigError: keyword arguments with a DataFrame ``args``.
        """
        args = _with_fields(args, fields)
        loop = asyncio.get_running_loop()
        total = budget = self.timeout if timeout is None else timeout
        deadline = loop.time() + total
        while True:
            message, pending = await self._start(group, cmd, args, budget, to_all, enc, xpy)
            try:
                response = await self._next(message, pending)
                break
            except DisconnectedError:
                budget = deadline - loop.time()
                if not retry or self._closed:
                    raise
                if budget <= 0:
                    raise RequestTimeout(group, total) from None
                log.info("request %s to %r: link lost, sending it again", cmd, group)
        self._pending.pop(message.mid or "", None)  # the first answer is the one we return
        if response.typ == MessageType.NAK.value:
            raise NakError(response.msg or "", response.rcd, response)
        return response

    async def request_stream(
        self,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None = None,
        *,
        timeout: float | None = None,
        to_all: bool = False,
        enc: Encoding | str = Encoding.FRAM,
        xpy: int | None = None,
        **fields: Any,
    ) -> AsyncIterator[Message]:
        """Send a request and yield every response (ACK or NAK) until one without Flag.MORE.

        ``timeout`` bounds the wait for each response; ``**fields`` are more arguments, as in
        :meth:`request`. Raises as :meth:`request`, except that a NAK is yielded rather than
        raised (but "no responders" raises NoRespondersError).
        """
        args = _with_fields(args, fields)
        message = Message.request(
            group, cmd, args, reply_to=self.inbox, enc=enc, xpy=xpy, to_all=to_all
        )
        async with contextlib.aclosing(self.call_stream(message, timeout=timeout)) as responses:
            async for response in responses:
                yield response

    async def call_stream(
        self, message: Message, *, timeout: float | None = None
    ) -> AsyncGenerator[Message, None]:
        """Send a request built by the caller and yield its responses, as
        :meth:`request_stream` does."""
        pending = await self._send_request(message, timeout, True)
        try:
            while True:
                response = await self._next(message, pending)
                yield response
                if not response.more:
                    return
        finally:
            self._pending.pop(message.mid or "", None)

    # -- subscriptions -----------------------------------------------------------------------

    async def subscribe(self, pattern: str) -> Subscription:
        """Receive events whose type matches ``pattern`` (``sensor``, ``sensor.*``, ``>``).

        Raises:
            ConfigError: a malformed pattern.
            LimitError: the broker's max subscriptions per connection.
        """
        check_pattern(pattern)
        return await self._add("subscribe", pattern, self._subs, "manage.subscribe", "pattern")

    async def consume(self, group: str) -> Subscription:
        """Become a competing consumer of ``group``: each request goes to one of its consumers.

        Raises:
            ConfigError: a malformed group name.
            RefusedError: an inbox group.
            LimitError: the broker's max subscriptions per connection.
        """
        check_pattern(group)
        return await self._add("consume", group, self._groups, "manage.consume", "group")

    async def _add(
        self, kind: str, key: str, table: dict[str, list[Subscription]], cmd: str, arg: str
    ) -> Subscription:
        self._check_open()
        sub = Subscription(self, kind, key, self.queue_size)
        first = key not in table
        table.setdefault(key, []).append(sub)
        if first and self._connected and self._transport is not None:
            try:
                await self._transport.call(cmd, {arg: key}, self.timeout)
            except DisconnectedError:
                pass  # restored on reconnection
            except BaseException:
                table[key].remove(sub)
                if not table[key]:
                    del table[key]
                raise
        return sub

    async def mailbox(self, name: str = "po") -> Subscription:
        """Receive direct mail sent to ``<this post office>.<name>`` (``"*"``: every mailbox
        without one of its own, as the MOP listener uses it)."""
        self._check_open()
        if name in self._mailboxes:
            raise ConfigError(f"mailbox {name!r} is already open")
        sub = Subscription(self, "mailbox", name, self.queue_size)
        self._mailboxes[name] = sub
        return sub

    async def _drop(self, sub: Subscription) -> None:
        sub._end()
        if sub.kind == "mailbox":
            self._mailboxes.pop(sub.key, None)
            return
        table, cmd, arg = (
            (self._subs, "manage.unsubscribe", "pattern")
            if sub.kind == "subscribe"
            else (self._groups, "manage.leave", "group")
        )
        subs = table.get(sub.key, [])
        if sub in subs:
            subs.remove(sub)
        if subs or sub.key not in table:
            return
        del table[sub.key]
        if self._connected and self._transport is not None and not self._closed:
            leaving = sub.kind == "consume"
            if leaving:
                self._leaving.add(sub.key)
            try:
                with contextlib.suppress(DisconnectedError):
                    await self._transport.call(cmd, {arg: sub.key}, self.timeout)
            finally:
                if leaving:
                    self._leaving.discard(sub.key)

    # -- direct mail -------------------------------------------------------------------------

    async def mail(
        self,
        target: str,
        payload: Mapping[str, Any] | DataFrame | None = None,
        *,
        expect: bool = False,
        cmd: str | None = None,
        mailbox: str = "po",
        timeout: float | None = None,
    ) -> Message | None:
        """Send direct mail to ``postoffice.mailbox`` (seed 001).

        Args:
            target: ``postoffice.mailbox``.
            payload: the content (PLD).
            expect: wait for a reply (MOP's ``expect``).
            cmd: an optional CMD.
            mailbox: our sending mailbox (SRC is ``<our post office>.<mailbox>``).
            timeout: seconds to wait for the reply.

        Returns:
            The reply when ``expect``, else None.

        Raises:
            NakError: the reply is a NAK (RCD 404 when the post office is not connected).
            RequestTimeout, DisconnectedError, BufferFullError: as :meth:`request`.
        """
        frame = DataFrame()
        frame.add("MID", new_id())
        frame.add("TGT", target)
        frame.add("SRC", f"{self.name}.{mailbox}")
        frame.add("TYP", MessageType.RQS.value)
        if expect:
            frame.add("RPY", self.inbox)
        if cmd is not None:
            frame.add("CMD", cmd)
        frame.add("ENC", Encoding.FRAM.value)
        frame.add("PLD", payload if isinstance(payload, DataFrame) else DataFrame(payload or {}))
        message = Message(frame)
        if not expect:
            await self.send(message)
            return None
        assert message.mid is not None
        pending = _Pending(target, self.timeout if timeout is None else timeout)
        self._pending[message.mid] = pending
        try:
            await self.send(message)
        except BaseException:
            self._pending.pop(message.mid, None)
            raise
        reply = await self._next(message, pending)
        self._pending.pop(message.mid, None)
        if reply.typ == MessageType.NAK.value:
            raise NakError(reply.msg or "", reply.rcd, reply)
        return reply

    # -- management --------------------------------------------------------------------------

    async def manage(
        self, cmd: str, args: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Message:
        """Call a broker command (``manage.status``, ``manage.add``, ...; managers only).

        Returns:
            The ACK; its payload holds the answer.

        Raises:
            RefusedError: this post office is not a manager (NAK 403).
            NakError: another refusal. DisconnectedError: the link is down.
        """
        self._check_open()
        if not self._connected or self._transport is None:
            raise DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        name = cmd if cmd.startswith("manage.") else f"manage.{cmd}"
        return await self._transport.call(
            name, args or {}, self.timeout if timeout is None else timeout
        )

    async def status(self) -> dict[str, Any]:
        """The broker's ``manage.status`` answer as a dict (managers only)."""
        reply = await self.manage("manage.status")
        result: dict[str, Any] = reply.payload.to_dict()
        return result

    # -- receiving ---------------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        typ = message.typ
        if typ in _ANSWERS:
            pending = self._pending.get(message.rid or "")
            if pending is not None:
                pending.put(message)
                return
            if message.grp == self.inbox:
                log.debug("late answer %s dropped", message.rid)
                return
        if typ in _EVENTS:
            grp = message.grp or ""
            for pattern, subs in self._subs.items():
                if matches(pattern, grp):
                    for sub in subs:
                        sub._put(message)
            return
        if message.tgt:
            self._on_mail(message)
            return
        consumers = self._groups.get(message.grp or "")
        if consumers:
            consumers.append(consumers.pop(0))  # local round-robin when one client consumes twice
            if not consumers[-1]._put(message):
                self._refuse(message, 503, "consumer overloaded")
        elif message.grp != self.inbox:
            self._bounce(message)

    def _bounce(self, message: Message) -> None:
        """A request for a group this client no longer consumes (it was routed here before the
        broker saw our ``manage.leave``): while the leave is on its way, send it back to the
        bus, which gives it to another consumer or answers "no responders" (our leave was
        written first, so it cannot come back here); otherwise answer NAK 503 itself."""
        group = message.grp or ""
        consumers = self._groups.get(group)
        if consumers and consumers[0]._put(message):
            return
        if message.typ != MessageType.RQS.value:
            log.debug("%s for group %r not consumed here: dropped", message.typ, group)
            return
        if group in self._leaving and not message.to_all and self._connected:
            task = asyncio.get_running_loop().create_task(self.send(message))
            task.add_done_callback(functools.partial(self._bounce_failed, message))
            return
        self._refuse(message, 503, f"this consumer left group {group!r}")

    def _bounce_failed(self, message: Message, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._refuse(message, 503, f"this consumer left group {message.grp!r}")

    def _on_mail(self, message: Message) -> None:
        _, _, box = (message.tgt or "").partition(".")
        sub = self._mailboxes.get(box or "po") or self._mailboxes.get("*")
        if sub is None:
            self._refuse(message, 404, f"no mailbox {box!r}")
        elif not sub._put(message):
            self._refuse(message, 503, "mailbox overloaded")

    def _refuse(self, message: Message, rcd: int, text: str) -> None:
        if message.typ != MessageType.RQS.value or not message.rpy:
            return
        with contextlib.suppress(BusError):
            task = asyncio.get_running_loop().create_task(self.send(message.nak(text, rcd)))
            task.add_done_callback(_log_failure)


def _with_fields(
    args: Mapping[str, Any] | DataFrame | None, fields: Mapping[str, Any]
) -> Mapping[str, Any] | DataFrame | None:
    """A request's arguments plus those given as keywords."""
    if not fields:
        return args
    if isinstance(args, DataFrame):
        raise ConfigError("give the arguments as a DataFrame or as keywords, not both")
    return {**(args or {}), **fields}


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not answer: %s", task.exception())


def _is_no_responders(message: Message) -> bool:
    return message.rcd == 503 and message.msg == _NO_RESPONDERS and message.src == "central"


def _parse_url(url: str) -> tuple[str, str, int, str | None, str | None]:
    parts = urlsplit(url if "://" in url else f"bus://{url}")
    scheme = parts.scheme or "bus"
    if scheme not in ("bus", "tcp", "nats"):
        raise ConfigError(f"unknown bus URL scheme {scheme!r} (bus://host:port or nats://...)")
    try:
        port = parts.port or (4222 if scheme == "nats" else 4000)
    except ValueError as exc:
        raise ConfigError(f"bad port in bus URL {url!r}") from exc
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return scheme, parts.hostname or "127.0.0.1", port, user, password


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
) -> Client:
    """Connect and authenticate to the bus.

    Args:
        url: ``bus://[name:secret@]host:port`` (default port 4000) or ``nats://host:port``.
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

    Returns:
        The connected client.

    Raises:
        ConnectError: cannot connect within ``connect_timeout`` (or refused: too many links).
        AuthError: authentication refused (wrong secret, unknown post office, ...).
        ConfigError: a bad URL.
    """
    scheme, host, port, user, password = _parse_url(url)
    name = name or user
    secret = secret if secret is not None else password

    def factory(inbox: str, reconnecting: bool) -> Transport:
        if scheme == "nats":
            return _nats_transport(
                url, name=name, secret=secret, inbox=inbox, connect_timeout=connect_timeout
            )
        return BrokerTransport(
            host,
            port,
            name=name,
            secret=secret,
            mode=mode,
            inbox=inbox,
            reconnect=reconnecting,
            connect_timeout=connect_timeout,
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
    )
    await client._open(reconnecting=False)
    return client


def _nats_transport(url: str, **kwargs: Any) -> Transport:
    try:
        from bus import transport_nats  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        raise ConfigError("nats:// needs bus.transport_nats, which is not installed") from exc
    transport: Transport = transport_nats.NatsTransport(url, **kwargs)
    return transport
