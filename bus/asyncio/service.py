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
from typing import TYPE_CHECKING, Any

from bus.asyncio.commands import Commands
from bus.asyncio.handler import Handler, Reply, Request, Response, ServiceError
from bus.asyncio.heartbeats import Heartbeats, heartbeat_topics
from bus.asyncio.idempotent import RecentAnswers
from bus.asyncio.micro import MicroAnswers
from bus.asyncio.serving import Serving, _quietly
from bus.discovery.schemas import CommandSchema
from bus.discovery.services import (
    PROBE_TYPE,
    HeartbeatEvent,
    Load,
    ServiceStatus,
)
from bus.errors import BusError, ClosedError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["Handler", "Reply", "Request", "Response", "Service", "ServiceError"]

log = logging.getLogger(__name__)


class Service(Commands, Heartbeats, Serving):
    """Serve one group's commands over a client, with heartbeats.

    Its commands are registered with :meth:`command` (the table: :mod:`bus.asyncio.commands`),
    its heartbeats sent by :mod:`bus.asyncio.heartbeats`, its requests answered by
    :mod:`bus.asyncio.serving`.

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
        self._plain: dict[str, Handler] = {}  # the async def handlers (not streams), by command
        self._allowed: dict[str, frozenset[str]] = {}
        self._schemas: dict[str, CommandSchema] = {}
        self._validators: dict[str, Any] = {}  # compiled args schemas, by command
        self._waiting: deque[asyncio.Future[None]] = deque()  # requests waiting for a slot
        self._requests: set[asyncio.Task[None]] = set()
        self._frames = False  # set at start: whether the link writes frames (serving.py)
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
        transport = self.client.transport
        self._frames = transport is not None and transport.writes_frames
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
            consumer = self._consumer
            serve = self._serve
            async for message in consumer:
                serve(message)
                # What came in the same read is served now, without a step of the iterator each.
                ready = consumer.next_ready
                while (message := ready()) is not None:
                    serve(message)
        except BusError as exc:  # the client was closed under us: nothing more will come
            log.warning("service %s stopped consuming: %s", self.group, exc)
            return
        if self._consumer.drained and self.status is ServiceStatus.RUNNING:
            # A manager drained the group: say so at once (the directory shows Draining);
            # requests already here are still answered.
            self.status = ServiceStatus.DRAINING
            await _quietly(self._beat())


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
