"""How a service answers its requests (the reply rule of ``docs/PROTOCOL.md`` 2.3, seed 000):
the part of :class:`bus.asyncio.service.Service` that runs a request's handler in a slot and
sends its ACK or NAK (the rules are listed in :mod:`bus.asyncio.service`).

The usual request (a free slot, an ``async def`` handler that answers without waiting, a link
that takes the answer at once) is answered by :meth:`Serving._serve` itself, called by the
consume loop: the handler's coroutine is run one step (``coro.send(None)``) and its ACK written,
with no coroutine or task of the service's own. A handler that waits goes on in a task
(:class:`bus.asyncio.eager.Resumed`); anything unusual (no free slot, an expiry, an idempotent
MID, OpenTelemetry spans, an unknown command, a stream, an error) takes the reference path,
:meth:`Serving._handle`, which every request once took and which answers the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from contextvars import Context, copy_context
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from bus import otel
from bus.asyncio import eager
from bus.asyncio.handler import (
    RCD_HANDLER_ERROR,
    RCD_UNAVAILABLE,
    RCD_UNKNOWN_COMMAND,
    Handler,
    Reply,
    Request,
    ServiceError,
    ack_for,
    expired,
    nak_for,
)
from bus.asyncio.idempotent import RecentAnswers
from bus.asyncio.micro import MicroAnswers
from bus.errors import BusError, EncodeError, LimitError
from bus.idempotency import CONFLICT
from bus.link import wire
from bus.message import trace as bus_trace
from bus.message.message import Message, MessageType, encode_message

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["Serving"]

log = logging.getLogger("bus.asyncio.service")  # the service's own log, where it always was


class Serving:
    """Running a service's requests (a mixin of :class:`bus.asyncio.service.Service`, which
    sets these up)."""

    client: Client
    group: str
    concurrency: int
    in_flight: int
    max_in_flight: int
    queued: int
    handled: int
    failed: int
    expired: int
    recent: RecentAnswers
    command_stats: dict[str, tuple[int, int]]
    _micro: MicroAnswers | None
    _handlers: dict[str, Handler]
    _plain: dict[str, Handler]
    _allowed: dict[str, frozenset[str]]
    _validators: dict[str, Any]
    _waiting: deque[asyncio.Future[None]]
    _requests: set[asyncio.Task[None]]
    #: the link writes a message's frames as they are (Transport.writes_frames)
    _frames: bool

    if TYPE_CHECKING:  # provided by Commands

        def _check(self, req: Request, cmd: str) -> None: ...
        def _unknown(self, cmd: str) -> str: ...

    def _serve(self, message: Message) -> None:
        """Answer one request. The usual one (a free slot, an ``async def`` handler that answers
        without waiting, a link that takes the answer at once) is answered here, with no
        coroutine or task of ours: the handler's coroutine is run one step and its ACK written.
        A handler that waits goes on in a task (:meth:`_finish`); anything unusual (no free
        slot, an expiry, an idempotent MID, OpenTelemetry spans, an unknown command, a stream)
        takes the reference path, :meth:`_handle`, which behaves the same."""
        cmd = message.cmd or ""
        handler = self._plain.get(cmd)
        if (
            handler is None
            or self.in_flight >= self.concurrency
            or self._waiting
            or message.xpy is not None
        ):
            self._spawn(message)
            return
        mid = message.mid
        if mid is not None and len(mid) == 36 and mid[14] == "5":
            self._spawn(message)  # a derived MID: run once (PROTOCOL.md 5.17)
            return
        trace = message.trc
        context: Context | None = None
        if trace is not None:
            if otel.active():
                self._spawn(message)
                return
            # The handler's own requests carry a child of the request's trace (PROTOCOL.md
            # 5.11): it runs in a context of its own where that is current.
            context = copy_context()
            context.run(bus_trace.use, bus_trace.child(trace))
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        req = Request(message, self.group)
        try:
            if cmd in self._allowed or cmd in self._validators:
                self._check(req, cmd)
            coro = handler(req)
            if type(coro) is not CoroutineType:  # an awaitable of another kind: awaited there
                self._later(req, coro, context)
                return
            awaited = coro.send(None) if context is None else context.run(coro.send, None)
        except StopIteration as done:
            value = done.value
        except Exception as exc:  # answered by the reference path: the same NAK, logged alike
            self._later(req, eager.Failed(exc), context)
            return
        except BaseException:
            self._release()
            raise
        else:  # it waits: the rest of it runs in a task, which answers
            self._later(req, eager.Resumed(coro, awaited), context)
            return
        try:
            sent = self._write_now(message, value)
        except Exception:  # noqa: BLE001 - the answer cannot travel: the reference path NAKs
            sent = False
        if not sent:  # the link cannot take it now: sent (and waited for) by the reference path
            self._later(req, eager.Done(value), context)
            return
        self.handled += 1
        if self._micro is not None:
            self._count(cmd, 0)
        self._release()

    def _spawn(self, message: Message) -> None:
        """The reference path: :meth:`_handle` run at once, in a task only if it waits
        (bus/asyncio/eager.py). A traced request runs in a context of its own: its trace is
        current there."""
        if message.trc is None:
            task = eager.start(self._handle(message))
        else:
            task = eager.start(self._handle(message), context=copy_context())
        if task is not None:
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    def _later(self, req: Request, result: Any, context: Context | None) -> None:
        """Answer ``req`` from ``result`` by the reference path (its slot is taken: that frees
        it): at once, in a task only if it waits (a handler that waits does)."""
        finish = self._finish(req, result)
        task: asyncio.Task[None] | None
        if type(result) is eager.Resumed:
            task = asyncio.get_running_loop().create_task(finish, context=context)
        else:
            task = eager.start(finish, context=context)
            if task is None:
                return
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _finish(self, req: Request, result: Any) -> None:
        """:meth:`_handle` for a request whose handler already ran (its slot taken)."""
        try:
            await self._answer_result(req, result)
        except asyncio.CancelledError:  # stop() gave up waiting: tell the requester why
            await self._answer_stopping(req.message)
            raise
        finally:
            self._release()

    async def _handle(self, message: Message) -> None:
        """Answer one request: a slot (waiting for one if all are taken), its handler, its
        answer. One coroutine for the usual request: every layer of ``await`` is paid per
        request."""
        if self.in_flight < self.concurrency and not self._waiting:
            self.in_flight += 1
        else:
            await self._slot(message)
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        try:
            if message.xpy is not None and expired(message):
                self.expired += 1
                return
            req = Request(message, self.group)
            trace = message.trc
            if trace is not None:
                # The handler's own requests carry a child of the request's trace (PROTOCOL.md
                # 5.11); with OpenTelemetry on, the child is this service's span (bus/otel.py).
                if otel.active():
                    await self._answer_in_span(req, trace)
                    return
                bus_trace.use(bus_trace.child(trace))  # every request from a gateway is traced
            await self._answer(req)
        except asyncio.CancelledError:  # stop() gave up waiting: tell the requester why
            await self._answer_stopping(message)
            raise
        finally:
            self._release()

    async def _slot(self, message: Message) -> None:
        """Wait for a free slot, in arrival order (:meth:`_release` hands it over)."""
        self.queued += 1
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:  # stop() gave up waiting: tell the requester why
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot was handed over already: it passes on
            await self._answer_stopping(message)
            raise
        finally:
            self.queued -= 1

    async def _answer_stopping(self, message: Message) -> None:
        """stop() gave up waiting for this request: a NAK 503 tells its requester why."""
        self.failed += 1
        await self._send(
            nak_for(message, f"service {self.group} stopping", RCD_UNAVAILABLE, self._src)
        )

    def _release(self) -> None:
        """A handler is done: its slot goes to the first request waiting, else it is free."""
        waiting = self._waiting
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)  # in_flight stays: the slot is the waiter's now
                return
        self.in_flight -= 1

    async def _answer_in_span(self, req: Request, trace: str) -> None:
        with otel.span(f"{self.group} {req.cmd}", trace, server=True) as own:
            bus_trace.use(own or bus_trace.child(trace))
            await self._answer(req)

    async def _answer(self, req: Request, record: list[Message] | None = None) -> None:
        message = req.message
        mid = message.mid
        if record is None and mid is not None and len(mid) == 36 and mid[14] == "5":
            await self._idempotent(req)  # a derived MID: run once (PROTOCOL.md 5.17)
            return
        try:
            cmd = req.cmd
            handler = self._handlers.get(cmd)
            if handler is None:
                raise ServiceError(self._unknown(cmd), RCD_UNKNOWN_COMMAND)
            if self._allowed or self._validators:
                self._check(req, cmd)
            result = handler(req)
        except Exception as exc:  # noqa: BLE001 - answered as the handler's own error is
            result = eager.Failed(exc)
        await self._answer_result(req, result, record)

    async def _answer_result(
        self, req: Request, result: Any, record: list[Message] | None = None
    ) -> None:
        """Answer ``req`` with what its handler gave: the awaitable of its answer, or a stream
        (an ACK, the responses of a stream, or a NAK for an error)."""
        message = req.message
        try:
            if type(result) is not CoroutineType and isinstance(result, AsyncIterator):
                await self._stream(req, result, record)
            else:
                ack = ack_for(message, await result, more=False, src=self._src)
                await self._send(ack, record)
        except ServiceError as exc:
            self.failed += 1
            await self._send(nak_for(message, exc.msg, exc.rcd, self._src), record)
        except Exception as exc:
            self.failed += 1
            log.exception("handler %s.%s failed", self.group, req.cmd)
            text = str(exc) or type(exc).__name__
            await self._send(nak_for(message, text, RCD_HANDLER_ERROR, self._src), record)
        else:
            self.handled += 1
            if self._micro is not None:
                self._count(req.cmd, 0)
            return
        if self._micro is not None:
            self._count(req.cmd, 1)

    def _count(self, cmd: str, failed: int) -> None:
        """One more request (and failure) of ``cmd``, for micro's ``$SRV.STATS``."""
        if cmd not in self._handlers:
            return  # an unknown command: callers choose those, the counters stay bounded
        runs, errors = self.command_stats.get(cmd, (0, 0))
        self.command_stats[cmd] = (runs + 1, errors + failed)

    async def _idempotent(self, req: Request) -> None:
        """A request whose MID a gateway made from an idempotency key: run once, its answers
        kept; a repeat (from any gateway) gets them again, a repeat with another payload 409."""
        message = req.message
        entry, repeat = self.recent.begin(message)
        if repeat is None:
            self.failed += 1
            await self._send(nak_for(message, CONFLICT, 409, self._src))
            return
        if repeat:
            await entry.done.wait()
            for answer in self.recent.again(entry, message):
                await self._send(answer)
            return
        try:
            await self._answer(req, entry.responses)
        finally:
            self.recent.finish(entry)

    async def _stream(
        self, req: Request, items: AsyncIterator[Reply], record: list[Message] | None = None
    ) -> None:
        # Each response goes out as soon as it is yielded, with Flag.MORE: a generator cannot
        # say which item is its last, and holding one back would delay every response by one
        # step. When the generator ends, an ACK with Flag.END (and no data) closes the stream;
        # an exception closes it with a NAK instead (docs/PROTOCOL.md 2.3).
        try:
            async for item in items:
                await self._send(ack_for(req.message, item, more=True, src=self._src), record)
        finally:
            await _quietly(_aclose(items))
        if req.message.rpy:
            await self._send(req.message.ack(end=True, src=self._src), record)

    @property
    def _src(self) -> str | None:
        """Who answers: this instance's post office (SRC on every answer, PROTOCOL.md 5.11)."""
        return self.client.sender

    def _write_now(self, request: Message, value: Reply) -> bool:
        """Write the ACK of ``value`` to the link as frames when it takes them at once (the
        JSON lane writes the usual one straight to bytes: :meth:`Message.ack_frame`); False:
        nothing was sent, the reference path sends it (and says why it cannot travel).

        Raises:
            EncodeError: the ACK cannot be encoded (nothing was sent).
        """
        info = self.client.info
        if not self._frames or info is None:
            return False
        limit = info.max_message_size
        frames = request.ack_frame(value, info.name, limit)
        if frames is None:
            reply = ack_for(request, value, more=False, src=info.name)
            if reply is None:
                return True  # a request that wants no answer
            raw = encode_message(reply)
            if len(raw) > limit:
                return False
            frames = wire.encode_message(raw)
        return self.client.write_now(frames)

    async def _send(self, reply: Message | None, record: list[Message] | None = None) -> None:
        if reply is None:
            return
        if record is not None:  # an idempotent request's: kept for a repeat
            record.append(reply)
        info = self.client.info
        if info is not None and reply.src is None:
            reply.src = info.name  # who answered: the journal and the report name the instance
        try:
            await self.client.send(reply)
        except (EncodeError, LimitError):
            if reply.typ != MessageType.NAK.value:
                raise  # the answer cannot travel: _dispatch answers with a NAK instead
            log.exception("NAK to %s not sent", reply.grp)
        except BusError as exc:  # the requester is gone or the link is down: nothing to answer
            log.warning("reply to %s not sent: %s", reply.grp, exc)


async def _aclose(items: AsyncIterator[Reply]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()


async def _quietly(awaitable: Awaitable[Any]) -> None:
    with contextlib.suppress(BusError, OSError):
        await awaitable
