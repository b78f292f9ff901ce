"""A service's heartbeats (seed 000's ``OAM.SERVICE``, PROTOCOL.md 5.10): the part of
:class:`bus.asyncio.service.Service` that says it is alive, on a timer and when probed.

The payload is described in :mod:`bus.discovery.services`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from bus.discovery.schemas import CommandSchema
from bus.discovery.services import (
    HEARTBEAT_TYPE,
    KESTREL_HEARTBEAT_TYPE,
    Heartbeat,
    HeartbeatEvent,
    Load,
    ServiceStatus,
    heartbeat_payload,
)
from bus.errors import BusError, ClosedError, ConfigError
from bus.message.message import Message, MessageType

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["KESTREL_HEARTBEATS_ENV", "PROBE_GAP", "Heartbeats", "heartbeat_topics"]

log = logging.getLogger("bus.asyncio.service")

#: Seconds between two heartbeats sent in answer to probes (more probes are coalesced).
PROBE_GAP = 0.2
#: The operator's switch: ``1`` (``true``, ``yes``, ``on``) has every service heartbeat on
#: Kestrel's ``OAM.SERVICES`` as well as on ``OAM.SERVICE`` (PROTOCOL.md 5.10).
KESTREL_HEARTBEATS_ENV = "BUSGATE_KESTREL_HEARTBEATS"
_YES = ("1", "true", "yes", "on")
_NO = ("", "0", "false", "no", "off")


def heartbeat_topics(kestrel: bool | None = None) -> tuple[str, ...]:
    """The topics a service heartbeats on: ``OAM.SERVICE``, and Kestrel's ``OAM.SERVICES`` when
    ``kestrel`` (None: when :data:`KESTREL_HEARTBEATS_ENV` says yes).

    Raises:
        ConfigError: the variable is neither a yes nor a no.
    """
    if kestrel is None:
        text = os.environ.get(KESTREL_HEARTBEATS_ENV, "").strip().lower()
        if text not in _YES + _NO:
            raise ConfigError(f"{KESTREL_HEARTBEATS_ENV}={text!r}: expected 1 or 0")
        kestrel = text in _YES
    return (HEARTBEAT_TYPE, KESTREL_HEARTBEAT_TYPE) if kestrel else (HEARTBEAT_TYPE,)


class Heartbeats:
    """Heartbeats of a service (a mixin of :class:`bus.asyncio.service.Service`)."""

    client: Client
    group: str
    instance_id: str
    heartbeat_interval: float
    heartbeat_topics: tuple[str, ...]
    status: ServiceStatus
    _schemas: dict[str, CommandSchema]
    _probes: Any
    _last_beat: float

    if TYPE_CHECKING:  # provided by Service

        @property
        def load(self) -> Load: ...
        @property
        def commands(self) -> tuple[str, ...]: ...

    async def _heartbeat_loop(self) -> None:
        with contextlib.suppress(ClosedError):  # the client was closed under us
            while True:
                await asyncio.sleep(self.heartbeat_interval)
                await self._beat()

    async def _probe_loop(self) -> None:
        # Probes arriving faster than one per PROBE_GAP are answered by one heartbeat, so a
        # client publishing probes in a loop cannot make every service flood the bus.
        with contextlib.suppress(BusError):
            async for _probe in self._probes:
                await asyncio.sleep(max(0.0, self._last_beat + PROBE_GAP - time.monotonic()))
                for _ in range(self._probes.pending()):
                    await self._probes.__anext__()
                await self._beat()

    def heartbeat(self, event: HeartbeatEvent = HeartbeatEvent.HEARTBEAT) -> Heartbeat:
        """This instance's heartbeat as of now."""
        return Heartbeat(
            instance_id=self.instance_id,
            group=self.group,
            event=event,
            status=self.status,
            load=self.load,
            interval=self.heartbeat_interval,
            commands=self.commands,
            host=_HOST,
            schemas=self._schemas,
        )

    async def _beat(self, event: HeartbeatEvent = HeartbeatEvent.HEARTBEAT) -> None:
        self._last_beat = time.monotonic()
        payload = heartbeat_payload(self.heartbeat(event))
        for topic in self.heartbeat_topics:
            message = Message.event(topic, payload)
            message.frame["TYP"] = MessageType.HBT.value  # seed 000: heartbeats are TYP=HBT
            if self.client.name:  # whose instance (5.10): the broker checks it, NATS cannot
                message.frame["SRC"] = self.client.name
            try:
                await self.client.send(message)
            except ClosedError:
                raise
            except BusError as exc:  # e.g. the outbound buffer is full while the link is down
                log.warning("heartbeat of %s on %s not sent: %s", self.group, topic, exc)


_HOST = f"{socket.gethostname()}:{os.getpid()}"
