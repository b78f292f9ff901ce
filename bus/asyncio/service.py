"""Write a bus service as a table of async functions, one per command.

A service consumes the requests of one group (competing with the other instances of that
group), looks up the handler of the request's ``CMD``, and answers by the reply rule of seed
000 (``RPY -> GRP``, ``MID -> RID``, ``ENC`` kept, so a JSON request gets a JSON reply)::

    svc = Service(client, "demo", concurrency=64, heartbeat_interval=5.0)

    @svc.command("echo")
    async def echo(req: Request) -> dict[str, Any]:
        return req.args                      # -> ACK with this payload

    @svc.command("count")
    async def count(req: Request) -> AsyncIterator[dict[str, Any]]:
        for i in range(req.get("n", 3)):
            yield {"i": i}                   # each sent at once with Flag.MORE; then Flag.END

    await svc.start(); ...; await svc.stop()

What the helper does for every handler:

- an unknown ``CMD`` is answered with a NAK, ``RCD`` 404, whose ``MSG`` lists the known commands;
- a handler that raises :class:`ServiceError` is answered with its ``msg`` and ``rcd``; any other
  exception with ``RCD`` 500 and the exception's text as ``MSG`` (the traceback is logged here,
  never sent);
- at most ``concurrency`` handlers run at once; requests beyond that wait for a slot in arrival
  order, none is dropped;
- a request whose ``XPY`` (expiry, epoch seconds) has passed is not run: its requester gave up;
- ``req.caller`` is who asked (``CLR`` set by a trusted gateway, else the post office of ``SRC``:
  the broker stamps both, docs/PROTOCOL.md 5.11); ``@svc.command(name, allow=[...])`` answers
  any other caller with a NAK, ``RCD`` 403, without running the handler;
- ``@svc.command(name, args=Quote, answer=Price)`` declares what it takes and answers (JSON
  Schema, or a TypedDict/dataclass it is derived from; the answer's also from the handler's
  return annotation): heartbeats carry the schemas (the gateway serves them as typed routes and
  OpenAPI), and arguments that do not match are answered with a NAK, ``RCD`` 400, naming the
  field, without running the handler (:mod:`bus.discovery.schemas`);
- ``req.trace`` is the request's W3C traceparent (``TRC``); its ACK/NAK carry it, and the requests
  the handler makes carry a child of it (the same trace id), with an OpenTelemetry span around
  the handler when spans are on (:mod:`bus.otel`);
- heartbeats (``TYP=HBT``) go to ``OAM.SERVICE`` every ``heartbeat_interval`` seconds, one at
  start, one at once when a directory probes (``OAM.PROBE``), and a ``Terminating`` one on stop;
  with ``BUSGATE_KESTREL_HEARTBEATS=1`` (or ``kestrel_heartbeats=True``) each goes to Kestrel's
  ``OAM.SERVICES`` too. The payload is described in :mod:`bus.discovery.services`.

Why heartbeats every 5 s and not Kestrel's 60 s: a directory drops an instance after 3 missed
heartbeats, so 60 s would show a crashed service as alive for three minutes and the console's
instance counts would lag behind every deploy. At 5 s the same rule notices within 15 s, for one
small message per instance every 5 s, which the broker does not feel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from contextvars import copy_context
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from bus import otel
from bus.asyncio import eager
from bus.asyncio.commands import Commands
from bus.asyncio.handler import (
    RCD_HANDLER_ERROR,
    RCD_UNAVAILABLE,
    RCD_UNKNOWN_COMMAND,
    Handler,
    Reply,
    Request,
    Response,
    ServiceError,
    ack_for,
    expired,
    nak_for,
)
from bus.asyncio.heartbeats import Heartbeats, heartbeat_topics
from bus.asyncio.idempotent import RecentAnswers
from bus.asyncio.micro import MicroAnswers
from bus.discovery.schemas import CommandSchema
from bus.discovery.services import (
    PROBE_TYPE,
    HeartbeatEvent,
    Load,
    ServiceStatus,
)
from bus.errors import BusError, ClosedError, ConfigError, EncodeError, LimitError
from bus.idempotency import CONFLICT
from bus.message import trace as bus_trace
from bus.message.message import Message, MessageType

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["Handler", "Reply", "Request", "Response", "Service", "ServiceError"]

log = logging.getLogger(__name__)


class Service(Commands, Heartbeats):
    """Serve one group's commands over a client, with heartbeats.

    Its commands are registered with :meth:`command` (the table: :mod:`bus.asyncio.commands`),
    its heartbeats sent by :mod:`bus.asyncio.heartbeats`; the requests are run here.

    Args:
        client: a connected :class:`bus.asyncio.client.Client`.
        group: the group to consume (competing with other instances of it).
        concurrency: handlers running at once at most (default 64); more requests wait.
        heartbeat_interval: seconds between heartbeats (default 5.0; see the module docstring).
        instance_id: this instance's id (default: a new UUID).
        drain_timeout: seconds :meth:`stop` waits for running handlers before cancelling them
            (default 10.0); a cancelled request is answered with a NAK, ``RCD`` 503.
        kestrel_heartbeats: also heartbeat on Kestrel's ``OAM.SERVICES`` (default: what
            ``BUSGATE_KESTREL_HEARTBEATS`` says, off when unset).

    Raises:
        ConfigError: ``concurrency`` < 1, ``heartbeat_interval`` <= 0, or
            ``BUSGATE_KESTREL_HEARTBEATS`` is not a yes or a no.
    """

    def __init__(
        self,
        client: Client,
        group: str,
        *,
        concurrency: int = 64,
        heartbeat_interval: float = 5.0,
        instance_id: str | None = None,
        drain_timeout: float = 10.0,
        kestrel_heartbeats: bool | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
        if heartbeat_interval <= 0:
            raise ConfigError(f"heartbeat_interval must be positive, not {heartbeat_interval}")
        self.client = client
        self.group = group
        self.concurrency = concurrency
        self.heartbeat_interval = heartbeat_interval
        self.instance_id = instance_id or str(uuid.uuid4())
        self.drain_timeout = drain_timeout
        self.heartbeat_topics = heartbeat_topics(kestrel_heartbeats)
        self.status = ServiceStatus.RUNNING
        self.in_flight = 0
        self.max_in_flight = 0
        self.queued = 0
        self.handled = 0
        self.failed = 0
        self.expired = 0
        #: answers of idempotent requests, for their repeats (PROTOCOL.md 5.17)
        self.recent = RecentAnswers()
        #: requests and failures per command, counted on NATS for micro's $SRV.STATS (10.3)
        self.command_stats: dict[str, tuple[int, int]] = {}
        self._micro: MicroAnswers | None = None
        self._handlers: dict[str, Handler] = {}
        self._allowed: dict[str, frozenset[str]] = {}
        self._schemas: dict[str, CommandSchema] = {}
        self._validators: dict[str, Any] = {}  # compiled args schemas, by command
        self._waiting: deque[asyncio.Future[None]] = deque()  # requests waiting for a slot
        self._requests: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._consumer: Any = None
        self._probes: Any = None
        self._started = False
        self._stopped = asyncio.Event()
        self._last_beat = 0.0

    @property
    def load(self) -> Load:
        """Requests running, waiting, answered and failed so far."""
        return Load(self.in_flight, self.queued, self.handled, self.failed)

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Consume the group, answer probes and start heartbeating (one heartbeat at once).

        Raises:
            ClosedError: the service was stopped (a stopped service is not restarted).
        """
        if self._stopped.is_set():
            raise ClosedError("service was stopped")
        if self._started:
            return
        self._started = True
        self._consumer = await self.client.consume(self.group)
        self._probes = await self.client.subscribe(PROBE_TYPE)
        await self._beat()
        self._loops = [
            asyncio.create_task(self._consume_loop(), name=f"service-{self.group}"),
            asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat-{self.group}"),
            asyncio.create_task(self._probe_loop(), name=f"probe-{self.group}"),
        ]
        if hasattr(self.client.transport, "nats"):  # NATS: micro discovery too (10.3)
            self._micro = MicroAnswers(self)
            self._micro.start()

    async def stop(self) -> None:
        """Stop taking requests, let running ones finish, then send ``Terminating``.

        Requests still running after ``drain_timeout`` are cancelled and answered with a NAK.
        """
        if self._stopped.is_set() or not self._started:
            self._stopped.set()
            return
        self.status = ServiceStatus.DRAINING
        # Leave the group first: the broker sends new requests to the other instances, and
        # what is already queued here still reaches the consume loop, which then ends.
        await _quietly(self._consumer.unsubscribe())
        consume = self._loops[0]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(consume), self.drain_timeout)
        await _cancel([consume])
        await self._drain()
        await _cancel(self._loops[1:])
        if self._micro is not None:
            await self._micro.stop()
        await _quietly(self._probes.unsubscribe())
        self.status = ServiceStatus.TERMINATING
        await _quietly(self._beat(HeartbeatEvent.TERMINATING))
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Start (if needed) and run until :meth:`stop` is called."""
        await self.start()
        await self._stopped.wait()

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _drain(self) -> None:
        if not self._requests:
            return
        _, pending = await asyncio.wait(set(self._requests), timeout=self.drain_timeout)
        await _cancel(list(pending))

    # -- requests ----------------------------------------------------------------------------

    async def _consume_loop(self) -> None:
        try:
            async for message in self._consumer:
                # Most handlers answer without waiting: no task for them (bus/asyncio/eager.py).
                # A traced request runs in a context of its own: its trace is current there.
                if message.trc is None:
                    task = eager.start(self._handle(message))
                else:
                    task = eager.start(self._handle(message), context=copy_context())
                if task is not None:
                    self._requests.add(task)
                    task.add_done_callback(self._requests.discard)
        except BusError as exc:  # the client was closed under us: nothing more will come
            log.warning("service %s stopped consuming: %s", self.group, exc)
            return
        if self._consumer.drained and self.status is ServiceStatus.RUNNING:
            # A manager drained the group: say so at once (the directory shows Draining);
            # requests already here are still answered.
            self.status = ServiceStatus.DRAINING
            await _quietly(self._beat())

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


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _quietly(awaitable: Awaitable[Any]) -> None:
    with contextlib.suppress(BusError, OSError):
        await awaitable
