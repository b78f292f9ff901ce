"""Push subscriptions: the gateway POSTs a pattern's events to an HTTP endpoint (PROTOCOL.md
9.14; the rules are :mod:`bus.push`).

Declared in the config file (``[[gateway.push]]``) or with ``PUT /v1/admin/push/{name}``
(kept in ``push_dir``/``push.json``), each runs as a :class:`PushRunner`:

- a durable bus subscription (relay: presence does not count it) from the position kept in
  ``push_dir``/``NAME.pos``, so after any restart it resumes from the journal (the JetStream
  stream) with no event skipped; a new one starts at the journal's end;
- each event is POSTed as ``{"seq", "type", "header", "payload"}`` with ``Busgate-Push``,
  ``Busgate-Seq``, ``Busgate-Type``, ``Busgate-Id`` (its MID), ``Busgate-Attempt`` and, with a
  secret, ``Busgate-Signature``; a 2xx acknowledges it; anything else is tried again after a
  delay with jitter, and after ``max_attempts`` the event goes to the dead-letter type;
- events of one type are delivered in order, one at a time; different types side by side
  (``concurrency``); at most :data:`MAX_PENDING` events are taken and not yet delivered;
- the position written is the ledger's (:class:`bus.push.Ledger`): every event up to it is
  delivered, so a restart delivers some again, never fewer (at least once: receivers dedupe
  by ``Busgate-Id`` or ``Busgate-Seq``);
- a lock file per push (``NAME.lock``) lets several gateways share ``push_dir``: one delivers,
  the others wait to take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import Counter, Gauge

from bus.errors import BusError, ConfigError
from bus.push import Ledger, PushSpec, dead_letter, retry_delay, signature
from gateway.bridge import render_response
from gateway.events.push_http import Poster, PushFailed

if TYPE_CHECKING:  # pragma: no cover
    from bus.message.message import Message
    from gateway.bridge import Bridge
    from gateway.process.metrics import Metrics

__all__ = ["MAX_PENDING", "PushManager", "PushRunner"]

log = logging.getLogger("busgate.gateway.push")

#: Events a push subscription takes before it waits for deliveries.
MAX_PENDING: Final = 1000
#: Seconds between two writes of a position (and between tries of a lock or the bus).
_SAVE_EVERY: Final = 0.2
_RETRY: Final = 2.0
_DECLARED: Final = "push.json"
#: A MID that may go in a header as it is (anything else a publisher chose is left out).
_SAFE: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class PushMetrics:
    """Per push subscription: delivered, retried, dead-lettered, pending, lag."""

    def __init__(self, metrics: Metrics) -> None:
        registry = metrics.registry
        self.delivered = Counter("busgate_gateway_push_delivered", "Events pushed (a 2xx).",
                                 ["push"], registry=registry)  # fmt: skip
        self.retried = Counter("busgate_gateway_push_retried", "Deliveries tried again.",
                               ["push"], registry=registry)  # fmt: skip
        self.dead = Counter("busgate_gateway_push_dead_lettered",
                            "Events moved to the dead-letter type.", ["push"],
                            registry=registry)  # fmt: skip
        self.pending = Gauge("busgate_gateway_push_pending",
                             "Events taken and not yet delivered.", ["push"],
                             registry=registry)  # fmt: skip
        self.lag = Gauge("busgate_gateway_push_lag_seconds",
                         "Age of the oldest event not yet delivered.", ["push"],
                         registry=registry)  # fmt: skip

    def forget(self, name: str) -> None:
        for metric in (self.delivered, self.retried, self.dead, self.pending, self.lag):
            with contextlib.suppress(KeyError):
                metric.remove(name)


class PushRunner:
    """One push subscription at work (see the module doc)."""

    def __init__(self, spec: PushSpec, bridge: Bridge, directory: Path, metrics: PushMetrics):
        self.spec = spec
        self.bridge = bridge
        self.directory = directory
        self.metrics = metrics
        self.status = "starting"
        self.delivered = self.retried = self.dead_lettered = 0
        self.ledger = Ledger()
        self._taken: dict[int, float] = {}  # seq -> when it was taken (the lag)
        self._room = asyncio.Event()
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._lock: int | None = None

    @property
    def position_file(self) -> Path:
        return self.directory / f"{self.spec.name}.pos"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"push-{self.spec.name}"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._save()
        self._unlock()

    def describe(self) -> dict[str, Any]:
        """As ``GET /v1/admin/push`` lists it."""
        return {
            **self.spec.to_json(),
            "status": self.status,
            "position": self.ledger.position,
            "pending": self.ledger.pending,
            "delivered": self.delivered,
            "retried": self.retried,
            "dead_lettered": self.dead_lettered,
            "lag_seconds": self._lag(),
        }

    # -- life ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                if self._lock is None and not self._try_lock():
                    self.status = "standby: another gateway delivers it"
                else:
                    await self._deliver_all()
            except asyncio.CancelledError:
                raise
            except BusError as exc:
                self.status = f"waiting: {exc}"
                log.warning("push %s: %s (trying again)", self.spec.name, exc)
            # waiting for the bus: look again soon; anything else: in a while
            await asyncio.sleep(_RETRY if self.bridge.connected else 0.1)

    def _try_lock(self) -> bool:
        fd = os.open(self.directory / f"{self.spec.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock = fd
        return True

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # the lock goes with it
            self._lock = None

    async def _deliver_all(self) -> None:
        bridge, spec = self.bridge, self.spec
        if not bridge.connected or bridge.client is None:
            self.status = "waiting for the bus"
            return
        client = bridge.client
        position = self._load()
        new = position is None
        if position is None:  # new: from the journal's end (and the bus must keep them)
            position = (await client.history(spec.pattern, limit=0)).seq
        self.ledger = Ledger(position)
        if new:
            self._dirty = True
            self._save()
        subscription = await client.subscribe(spec.pattern, since=position, relay=True)
        self.status = "running"
        workers: dict[str, tuple[asyncio.Queue[Message], asyncio.Task[None]]] = {}
        slots = asyncio.Semaphore(spec.concurrency)
        saver = asyncio.get_running_loop().create_task(self._save_often())
        try:
            async for message in subscription:
                seq = message.seq
                if seq is None or seq <= self.ledger.position:
                    continue  # not journaled (cannot be resumed), or delivered already
                while self.ledger.pending >= MAX_PENDING:
                    self._room.clear()
                    await self._room.wait()
                self.ledger.take(seq)
                self._taken[seq] = time.monotonic()
                self.metrics.pending.labels(spec.name).set(self.ledger.pending)
                type_ = message.grp or ""
                worker = workers.get(type_)
                if worker is None or worker[1].done():
                    queue: asyncio.Queue[Message] = asyncio.Queue()
                    task = asyncio.get_running_loop().create_task(self._worker(queue, slots))
                    worker = workers[type_] = (queue, task)
                worker[0].put_nowait(message)
        finally:
            saver.cancel()
            for _, task in workers.values():
                task.cancel()
            for _, task in workers.values():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(BusError):
                await subscription.unsubscribe()
            self._save()

    async def _worker(self, queue: asyncio.Queue[Message], slots: asyncio.Semaphore) -> None:
        """One type's events, in order, one at a time."""
        poster = Poster(self.spec.url, self.spec.timeout)
        try:
            while True:
                message = await queue.get()
                async with slots:
                    await self._deliver(message, poster)
                seq = message.seq or 0
                self.ledger.done(seq)
                self._taken.pop(seq, None)
                self._dirty = True
                self._room.set()
                self.metrics.pending.labels(self.spec.name).set(self.ledger.pending)
        finally:
            await poster.close()

    async def _deliver(self, message: Message, poster: Poster) -> None:
        spec = self.spec
        type_ = message.grp or ""
        body = (
            f'{{"seq":{message.seq},"type":{json.dumps(type_)},'.encode()
            + render_response(message)[1:]
        )
        headers = [
            ("Content-Type", "application/json"),
            ("Busgate-Push", spec.name),
            ("Busgate-Seq", str(message.seq)),
            ("Busgate-Type", type_),
            ("Busgate-Id", mid if _SAFE.fullmatch(mid := message.mid or "") else ""),
        ]
        error = ""
        for attempt in range(1, spec.max_attempts + 1):
            sent = [*headers, ("Busgate-Attempt", str(attempt))]
            if spec.secret:
                sent.append(("Busgate-Signature", signature(spec.secret, int(time.time()), body)))
            try:
                status = await poster.post(body, sent)
            except PushFailed as exc:
                error = str(exc)
            else:
                if 200 <= status < 300:
                    self.delivered += 1
                    self.metrics.delivered.labels(spec.name).inc()
                    return
                error = f"HTTP {status}"
            if attempt < spec.max_attempts:
                self.retried += 1
                self.metrics.retried.labels(spec.name).inc()
                await asyncio.sleep(retry_delay(attempt, spec.backoff_initial, spec.backoff_max))
        await self._dead_letter(message, body, error)

    async def _dead_letter(self, message: Message, body: bytes, error: str) -> None:
        spec = self.spec
        self.dead_lettered += 1
        self.metrics.dead.labels(spec.name).inc()
        log.warning("push %s: event %s (%s) dead-lettered to %s after %d attempts: %s",
                    spec.name, message.seq, message.grp, spec.dead_letter, spec.max_attempts,
                    error)  # fmt: skip
        client = self.bridge.client
        if client is None:
            return
        letter = dead_letter(spec, json.loads(body), spec.max_attempts, error)
        with contextlib.suppress(BusError):
            await client.publish(spec.dead_letter, letter)

    # -- position --------------------------------------------------------------------------------

    def _load(self) -> int | None:
        try:
            seq = json.loads(self.position_file.read_text())["seq"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            where = self.position_file
            raise ConfigError(f"push {self.spec.name}: unreadable {where}: {exc}") from exc
        if not isinstance(seq, int) or seq < 0:
            raise ConfigError(f"push {self.spec.name}: bad position in {self.position_file}")
        return seq

    def _save(self) -> None:
        if not self._dirty or self._lock is None:
            return
        temporary = self.position_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"seq": self.ledger.position}))
        os.replace(temporary, self.position_file)
        self._dirty = False

    async def _save_often(self) -> None:
        while True:
            await asyncio.sleep(_SAVE_EVERY)
            self._save()
            self.metrics.lag.labels(self.spec.name).set(self._lag())

    def _lag(self) -> float:
        if not self._taken:
            return 0.0
        return round(time.monotonic() - min(self._taken.values()), 3)


class PushManager:
    """The gateway's push subscriptions: declared in the settings or by the admin API."""

    def __init__(
        self,
        declared: tuple[PushSpec, ...],
        directory: str | None,
        bridge: Bridge,
        metrics: Metrics,
    ) -> None:
        self.configured = {spec.name: spec for spec in declared}
        self.directory = Path(directory) if directory else None
        self.bridge = bridge
        self.metrics = PushMetrics(metrics)
        self.runners: dict[str, PushRunner] = {}

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def _stored(self) -> dict[str, PushSpec]:
        assert self.directory is not None
        try:
            data = json.loads((self.directory / _DECLARED).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"unreadable {self.directory / _DECLARED}: {exc}") from exc
        return {item["name"]: PushSpec.from_json(item) for item in data.get("push", [])}

    def _store(self, specs: dict[str, PushSpec]) -> None:
        assert self.directory is not None
        path = self.directory / _DECLARED
        temporary = path.with_suffix(".tmp")
        listed = [spec.to_json(secret=True) for spec in specs.values()]
        temporary.write_text(json.dumps({"push": listed}, indent=2))
        os.replace(temporary, path)

    async def start(self) -> None:
        """Start every declared push subscription.

        Raises:
            ConfigError: push subscriptions declared without a ``push_dir``.
        """
        if self.directory is None:
            if self.configured:
                raise ConfigError("push subscriptions need push_dir (--push-dir): their positions")
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for spec in {**self.configured, **self._stored()}.values():
            self._start(spec)

    def _start(self, spec: PushSpec) -> None:
        assert self.directory is not None
        runner = self.runners[spec.name] = PushRunner(
            spec, self.bridge, self.directory, self.metrics
        )
        runner.start()

    async def stop(self) -> None:
        for runner in list(self.runners.values()):
            await runner.stop()
        self.runners.clear()

    async def put(self, spec: PushSpec) -> bool:
        """Declare (or change) a push subscription; True when it is new.

        Raises:
            ConfigError: no ``push_dir``, or one declared in the config file.
            NotJournaledError: the bus keeps none of its events (nothing could be resumed).
        """
        if self.directory is None:
            raise ConfigError("this gateway runs no push subscriptions: start it with --push-dir")
        if spec.name in self.configured:
            raise ConfigError(f"push {spec.name!r} is declared in the config file")
        self.bridge.check_connected()
        assert self.bridge.client is not None
        page = await self.bridge.client.history(spec.pattern, limit=0)  # 409: nothing kept
        position = self.directory / f"{spec.name}.pos"
        if not position.exists():  # it starts now: what is published from here on is pushed
            position.write_text(json.dumps({"seq": page.seq}))
        stored = self._stored()
        new = spec.name not in stored
        stored[spec.name] = spec
        self._store(stored)
        old = self.runners.pop(spec.name, None)
        if old is not None:
            await old.stop()
        self._start(spec)
        return new

    async def delete(self, name: str) -> bool:
        """Remove a push subscription (and its position); False when there is none.

        Raises:
            ConfigError: no ``push_dir``, or one declared in the config file.
        """
        if self.directory is None:
            raise ConfigError("this gateway runs no push subscriptions: start it with --push-dir")
        if name in self.configured:
            raise ConfigError(f"push {name!r} is declared in the config file")
        stored = self._stored()
        if stored.pop(name, None) is None:
            return False
        self._store(stored)
        runner = self.runners.pop(name, None)
        if runner is not None:
            await runner.stop()
        for suffix in (".pos", ".lock"):
            (self.directory / f"{name}{suffix}").unlink(missing_ok=True)
        self.metrics.forget(name)
        return True
