"""The service directory's asyncio driver: heartbeats from the bus into a :class:`ServiceTable`.

The sans-I/O core (the heartbeat payload, the table of live instances) is
:mod:`bus.discovery.services`;
this module subscribes to ``OAM.SERVICE`` (and Kestrel's ``OAM.SERVICES``) through a client,
feeds the table with the wall-clock time and expires silent instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bus.asyncio.loop import until_tick
from bus.discovery.schemas import CommandSchema
from bus.discovery.services import (
    HEARTBEAT_TYPE,
    KESTREL_HEARTBEAT_TYPE,
    PROBE_TYPE,
    DirectoryEvent,
    InstanceInfo,
    ServiceInfo,
    ServiceTable,
    parse_heartbeat,
)
from bus.errors import BusError, DecodeError
from bus.message.message import Message, MessageType

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["ServiceDirectory"]


class ServiceDirectory:
    """Live services on the bus, kept up to date from ``OAM.SERVICE`` heartbeats.

    Usage::

        directory = ServiceDirectory(client)
        await directory.start()          # subscribes and probes every service
        directory.services()             # -> list[ServiceInfo]
        await directory.stop()

    Args:
        client: a connected :class:`bus.asyncio.client.Client`.
        missed_intervals: see :class:`ServiceTable` (default 3).
        probe: publish on :data:`PROBE_TYPE` at start so services answer at once (default on).
        clock: the wall clock in seconds (``last_seen`` values are on it).
    """

    def __init__(
        self,
        client: Client,
        *,
        missed_intervals: float = 3,
        probe: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._probe = probe
        self._clock = clock
        self._table = ServiceTable(missed_intervals)
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._subscriptions: list[Any] = []
        self.version = 0
        self.ignored = 0

    async def start(self) -> None:
        """Subscribe to heartbeats, probe the services and start the expiry timer."""
        for topic in (HEARTBEAT_TYPE, KESTREL_HEARTBEAT_TYPE):
            self._subscriptions.append(await self._client.subscribe(topic))
        self._tasks = [
            *(asyncio.create_task(self._read_loop(sub)) for sub in self._subscriptions),
            asyncio.create_task(self._expire_loop(), name="directory-expire"),
        ]
        if self._probe:
            await self.probe()

    async def probe(self) -> None:
        """Ask every running service for a heartbeat now."""
        await self._client.publish(PROBE_TYPE, {"Event": "Probe"})

    async def stop(self) -> None:
        """Stop listening; the listing keeps its last state."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for sub in self._subscriptions:
            with contextlib.suppress(BusError):
                await sub.unsubscribe()
        self._subscriptions = []

    async def __aenter__(self) -> ServiceDirectory:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def services(self) -> list[ServiceInfo]:
        """The live services, one entry per group, sorted by group."""
        self._table.expire(self._clock())
        return self._table.services()

    def command_schema(self, group: str, cmd: str) -> CommandSchema | None:
        """What ``cmd`` of ``group`` declares (:meth:`ServiceTable.command_schema`), or None."""
        return self._table.command_schema(group, cmd)

    def instances(self, group: str | None = None) -> list[InstanceInfo]:
        """The live instances (of one group, or all)."""
        self._table.expire(self._clock())
        return self._table.instances(group)

    async def wait_for(self, predicate: Callable[[ServiceDirectory], bool], timeout: float) -> None:
        """Wait until ``predicate(self)`` holds, re-checked after every change.

        Args:
            predicate: a test on the directory.
            timeout: seconds to wait at most.

        Raises:
            TimeoutError: the predicate did not hold within ``timeout``.
        """
        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the inner result when it
        # completes in the iteration the caller is cancelled, losing the cancellation (on uvloop
        # a heartbeat and Bridge.stop() met so every time: the bridge's loop ran on, stop() hung).
        async with self._changed, asyncio.timeout(timeout):
            await self._changed.wait_for(lambda: predicate(self))

    def feed(self, message: Message) -> list[DirectoryEvent]:
        """Take one message from ``OAM.SERVICE`` (the driver calls this; tests may too).

        Returns:
            The directory events it caused; a malformed heartbeat is counted in ``ignored``.
        """
        if message.typ != MessageType.HBT.value:  # an EVT made to look like one: not a heartbeat
            self.ignored += 1
            return []
        try:
            hb = parse_heartbeat(_payload_dict(message))
        except DecodeError:
            self.ignored += 1
            return []
        # The broker stamps SRC on every heartbeat (5.11): its post office is the instance's.
        office = (message.src or "").partition(".")[0]
        return self._table.observe(hb, self._clock(), office)

    async def _read_loop(self, subscription: Any) -> None:
        with contextlib.suppress(BusError):  # the client was closed under us
            async for message in subscription:
                self.feed(message)
                await self._notify()

    async def _expire_loop(self) -> None:
        while True:
            deadline = self._table.next_deadline()
            delay = 1.0 if deadline is None else max(0.05, deadline - self._clock())
            await asyncio.sleep(min(delay, until_tick(1.0)))  # with the process's other chores
            if self._table.expire(self._clock()):
                await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self.version += 1
            self._changed.notify_all()


def _payload_dict(message: Message) -> Mapping[str, Any]:
    payload = message.payload
    if payload is None:
        raise DecodeError("heartbeat without PLD")
    to_dict = getattr(payload, "to_dict", None)
    result = to_dict() if callable(to_dict) else payload
    if not isinstance(result, Mapping):
        raise DecodeError("heartbeat PLD is not a frame")
    return result
