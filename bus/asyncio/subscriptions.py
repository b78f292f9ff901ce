"""The client's subscriptions: the receiving half of the client (PROTOCOL.md 5.5-5.7).

:class:`Subscriptions` is mixed into :class:`bus.asyncio.client.Client`: it keeps the tables
of patterns, consumed groups and mailboxes, and hands every incoming message to the request
waiting for it or to the subscriptions (:class:`bus.asyncio.subscription.Subscription`) it
belongs to (``_on_message``). What a durable subscription adds, catching up from the broker's
journal, is in :mod:`bus.asyncio.durable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import TYPE_CHECKING, Final

from bus.asyncio.durable import Resuming, retryable
from bus.asyncio.requests import _Pending
from bus.asyncio.subscription import Subscription
from bus.asyncio.transport import Transport
from bus.discovery.topics import check_pattern, matches
from bus.errors import BusError, ConfigError, DisconnectedError, NakError, NotJournaledError
from bus.message.message import Message, MessageType

__all__ = ["Subscriptions"]

log = logging.getLogger("bus.client")

_ANSWERS: Final = frozenset({MessageType.ACK.value, MessageType.NAK.value})
_EVENTS: Final = frozenset({MessageType.EVT.value, MessageType.HBT.value})
_NOTICE: Final = MessageType.OAM.value


class Subscriptions(Resuming):
    """Patterns, groups and mailboxes of a client (a mixin of :class:`~bus.asyncio.Client`)."""

    inbox: str
    timeout: float
    queue_size: int
    _pending: dict[str, _Pending]
    _subs: dict[str, list[Subscription]]
    _groups: dict[str, list[Subscription]]
    _mailboxes: dict[str, Subscription]
    _leaving: set[str]
    _durables: int
    _connected: bool
    _closed: bool
    _transport: Transport | None

    if TYPE_CHECKING:  # provided by Client

        async def send(self, message: Message) -> None: ...

        def _check_open(self) -> None: ...

    async def subscribe(
        self,
        pattern: str,
        *,
        resume: bool = False,
        since: int | None = None,
        since_time: float | None = None,
        last: bool = False,
        relay: bool = False,
    ) -> Subscription:
        """Receive events whose type matches ``pattern`` (``sensor``, ``sensor.*``, ``>``).

        Args:
            pattern: the types.
            resume: keep a position: after a reconnection or an eviction, first what was
                missed from the broker's journal, then live events, none twice (events the
                broker does not journal are live only; PROTOCOL.md 5.14). Refused where
                nothing can be resumed; should a later reconnection find no journal, the
                subscription goes on live and counts the gap (``gaps``, ``last_gap``).
            since: also start with the journaled events after this sequence number (implies
                ``resume``).
            since_time: also start with the journaled events from this time, epoch seconds
                (implies ``resume``).
            last: start with the last journaled event of each type of the pattern, then live
                ones (implies ``resume``; PROTOCOL.md 5.15).
            relay: this subscription forwards events to others who are counted themselves (a
                gateway's): the broker's presence leaves it out (PROTOCOL.md 5.16).

        Raises:
            ConfigError: a malformed pattern or position.
            LimitError: the broker's max subscriptions per connection.
            NotJournaledError: with ``resume``, ``since``, ``since_time`` or ``last``, the bus
                keeps none of the pattern's events (no journal, a journal filter that leaves
                them out, NATS without JetStream): nothing could ever be resumed.
        """
        check_pattern(pattern)
        if not (resume or last or since is not None or since_time is not None):
            return await self._add(
                "subscribe", pattern, self._subs, "manage.subscribe", "pattern", relay
            )
        if since is not None and (isinstance(since, bool) or since < 0):
            raise ConfigError("since must be a sequence number >= 0")
        self._check_open()
        sub = Subscription(self, "subscribe", pattern, self.queue_size)
        sub.durable = True
        sub.relay = relay
        sub.catching_up = True
        self._durables += 1
        self._subs.setdefault(pattern, []).append(sub)
        live = since is None and since_time is None and not last
        # Where a resume starts until the subscription has a position: the time asked for, or
        # for one that starts live (or with last values), now: an answer that never came must
        # not replay it all.
        sub.start_time = time.time() if since is None and since_time is None else since_time
        if self._connected and self._transport is not None:
            try:
                await self._catch_up(
                    sub, since or 0, since_time, first=True, from_end=live, last=last
                )
            except DisconnectedError:
                sub.position = since  # resumed on reconnection
            except BusError as exc:
                if not retryable(exc):
                    self._forget(sub)
                    if isinstance(exc, NakError):
                        raise NotJournaledError.of(exc) from None
                    raise
                # the bus does not answer now (a JetStream electing a leader): it is retried
                sub.position = since
                log.warning(
                    "could not subscribe to %r durably yet (%s): trying again", pattern, exc
                )
                sub.catching_up = False
                self._start_catch_up(sub)
            except BaseException:
                self._forget(sub)
                raise
        else:
            sub.position = since
        return sub

    def _relayed(self, pattern: str) -> bool:
        """Whether every subscription of ``pattern`` here is a relay (PROTOCOL.md 5.16)."""
        subs = self._subs.get(pattern)
        return bool(subs) and all(sub.relay for sub in subs or ())

    def _forget(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.key, [])
        if sub in subs:
            subs.remove(sub)
            if sub.durable:
                self._durables -= 1
        if not subs:
            self._subs.pop(sub.key, None)

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
        self,
        kind: str,
        key: str,
        table: dict[str, list[Subscription]],
        cmd: str,
        arg: str,
        relay: bool = False,
    ) -> Subscription:
        self._check_open()
        sub = Subscription(self, kind, key, self.queue_size)
        sub.relay = relay
        first = key not in table
        table.setdefault(key, []).append(sub)
        if first and self._connected and self._transport is not None:
            args: dict[str, object] = {arg: key, "relay": True} if relay else {arg: key}
            try:
                await self._transport.call(cmd, args, self.timeout)
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
        if sub.catch_up is not None:
            sub.catch_up.cancel()
        if sub.durable and sub in self._subs.get(sub.key, []):
            self._durables -= 1
            sub.durable = False
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
            if self._durables:
                self._on_event_resuming(message)
                return
            grp = message.grp or ""
            for pattern, subs in self._subs.items():
                if matches(pattern, grp):
                    for sub in subs:
                        sub._put(message)
            return
        if message.tgt:
            self._on_mail(message)
            return
        if typ == _NOTICE and message.grp == self.inbox:
            self._on_notice(message)
            return
        consumers = self._groups.get(message.grp or "")
        if consumers:
            consumers.append(consumers.pop(0))  # local round-robin when one client consumes twice
            if not consumers[-1]._put(message):
                self._refuse(message, 503, "consumer overloaded")
        elif message.grp != self.inbox:
            self._bounce(message)

    def _on_notice(self, notice: Message) -> None:
        """The broker's word to this link (PROTOCOL.md 5.6): ``drained``, a manager drained a
        group this client consumed: its subscriptions end (``drained`` set), no new requests
        come, and it is not consumed again after a reconnection."""
        if notice.cmd != "drained":
            log.debug("broker notice %r ignored", notice.cmd)
            return
        group = notice.payload.get("group")
        subs = self._groups.pop(group, []) if isinstance(group, str) else []
        if subs:
            log.warning("group %r was drained by a manager: no more requests come here", group)
        for sub in subs:
            sub.drained = True
            sub._end(None)

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


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not answer: %s", task.exception())
