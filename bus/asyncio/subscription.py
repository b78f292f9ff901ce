"""A subscription: an async iterator of the messages of one pattern, group or mailbox
(PROTOCOL.md 5.5-5.7).

The client's tables of subscriptions, which hand each incoming message to the subscriptions it
belongs to, are in :mod:`bus.asyncio.subscriptions`; what a durable subscription adds, catching
up from the broker's journal, is in :mod:`bus.asyncio.durable`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Final, Protocol

from bus.message.message import Message

__all__ = ["DEFAULT_QUEUE_SIZE", "Owner", "Subscription"]

log = logging.getLogger("bus.client")

#: Messages waiting in one subscription before the newest are dropped.
DEFAULT_QUEUE_SIZE: Final = 10_000


class _End:
    """Queued to end a subscription; carries the error to raise, if any."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class Owner(Protocol):
    """What a subscription needs of its client (:class:`bus.asyncio.client.Client`).

    A protocol, so this module does not import the client that mixes it in.
    """

    async def send(self, message: Message) -> None: ...

    async def _drop(self, sub: Subscription) -> None: ...


class Subscription:
    """An async iterator of the messages of one pattern, group or mailbox.

    Attributes:
        kind: ``"subscribe"``, ``"consume"`` or ``"mailbox"``.
        key: the pattern, group or mailbox name.
        dropped: messages lost because the queue was full.
        gaps: times the link was lost while subscribed (``subscribe`` only): events published
            until the reconnection were not delivered here (``busgate journal`` has them). A
            durable subscription counts one only when it could not resume (the broker came
            back without a journal).
        last_gap: why the last gap happened (the link's loss, e.g. an eviction as a slow
            consumer).
        durable: a subscription that resumes (``subscribe(..., resume=True)`` or ``since``):
            after a reconnection or an eviction it is given what it missed from the broker's
            journal first, then live events, none twice (PROTOCOL.md 5.14).
        position: the journal sequence number of the last event it was given (durable only;
            None until it knows one).
        resumes: times it caught up from the journal.
    """

    def __init__(self, client: Owner, kind: str, key: str, queue_size: int) -> None:
        self.client = client
        self.kind = kind
        self.key = key
        self.dropped = 0
        self.gaps = 0
        self.last_gap = ""
        self.drained = False  # a manager drained the group (manage.drain): the iterator ended
        self.durable = False
        self.relay = False  # it forwards to others, who count themselves (PROTOCOL.md 5.16)
        self.position: int | None = None
        self.catching_up = False  # live events wait: the journal brings them, in order
        self.resumes = 0
        self.catch_up: asyncio.Task[None] | None = None
        self.start_time: float | None = None  # where it starts while it has no position
        self._held: list[Message] = []  # live events that came while catching up
        self._held_overflow = False
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

    def next_ready(self) -> Message | None:
        """The next message when one is queued, without waiting; None when none is (or the
        subscription ended: iterating says which)."""
        items = self._items
        if not items or type(items[0]) is _End:
            return None
        item = items.popleft()
        return item  # type: ignore[return-value]

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
