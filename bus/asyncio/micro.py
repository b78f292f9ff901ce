"""NATS micro discovery for busgate services on ``nats://`` (PROTOCOL.md 10.3).

NATS's service API (ADR-32: ``nats micro ls``, nats.go's ``micro``, nats.py's ``nats.micro``)
finds services by requests on ``$SRV.PING``, ``$SRV.INFO`` and ``$SRV.STATS`` (each also
``.<name>`` and ``.<name>.<id>``). A busgate :class:`~bus.asyncio.service.Service` on a NATS bus
answers them too (:class:`MicroAnswers`), so a NATS shop's tools list it: its name is the
group with every character micro does not allow made ``_``, its id the instance's, its
endpoints its commands on the group's subject and queue (``<prefix>.grp.<group>``; they take
busgate messages, PROTOCOL.md 10, not raw payloads), and its metadata says so (``busgate``,
``group``). The answers are made here from the service's state; the subscriptions are made on
the link's NATS connection again after each reconnection.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import re
from typing import TYPE_CHECKING, Any, Final, Protocol

import nats.errors

if TYPE_CHECKING:  # pragma: no cover
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription as NatsSubscription

    from bus.asyncio.client import Client

__all__ = ["VERSION", "MicroAnswers", "MicroServed", "micro_name"]

log = logging.getLogger("bus.service")


class MicroServed(Protocol):
    """What the micro answers read of a :class:`bus.asyncio.service.Service` (named here, so
    that this module, which the service imports, does not import it: no import circle)."""

    client: Client
    group: str
    instance_id: str
    command_stats: dict[str, tuple[int, int]]

    @property
    def commands(self) -> tuple[str, ...]:
        """Its commands' names."""


#: The version busgate services say they are (micro requires a semantic version).
VERSION: Final = "1.0.0"
_NOT_ALLOWED: Final = re.compile(r"[^A-Za-z0-9_-]")
_TYPES: Final = {
    "PING": "io.nats.micro.v1.ping_response",
    "INFO": "io.nats.micro.v1.info_response",
    "STATS": "io.nats.micro.v1.stats_response",
}
#: Seconds between two looks at the link (a reconnection brings a new NATS connection).
_WATCH: Final = 0.5


def micro_name(name: str) -> str:
    """A busgate name as micro allows names (``[A-Za-z0-9_-]+``)."""
    return _NOT_ALLOWED.sub("_", name) or "_"


class MicroAnswers:
    """The micro discovery answers of one busgate service (see the module doc)."""

    def __init__(self, service: MicroServed) -> None:
        self.service = service
        self.name = micro_name(service.group)
        self.started = datetime.datetime.now(datetime.UTC)
        self._task: asyncio.Task[None] | None = None
        self._subscriptions: list[NatsSubscription] = []

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._watch(), name=f"micro-{self.name}"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._unsubscribe()

    async def _watch(self) -> None:
        current: NatsClient | None = None
        while True:
            nc = _nats_of(self.service)
            if nc is not None and nc is not current and nc.is_connected:
                await self._unsubscribe()
                try:
                    await self._subscribe(nc)
                    current = nc
                except nats.errors.Error as exc:
                    log.info("micro discovery of %s not answered yet: %s", self.name, exc)
            await asyncio.sleep(_WATCH)

    async def _subscribe(self, nc: NatsClient) -> None:
        instance = self.service.instance_id
        for verb in _TYPES:
            for subject in (f"$SRV.{verb}", f"$SRV.{verb}.{self.name}",
                            f"$SRV.{verb}.{self.name}.{instance}"):  # fmt: skip
                self._subscriptions.append(await nc.subscribe(subject, cb=self._answer(verb)))

    async def _unsubscribe(self) -> None:
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()

    def _answer(self, verb: str) -> Any:
        async def answer(msg: Msg) -> None:
            if msg.reply:
                with contextlib.suppress(nats.errors.Error):
                    await msg.respond(json.dumps(self.describe(verb)).encode())

        return answer

    def describe(self, verb: str) -> dict[str, Any]:
        """The answer to ``$SRV.<verb>``."""
        service = self.service
        answer: dict[str, Any] = {
            "type": _TYPES[verb],
            "name": self.name,
            "id": service.instance_id,
            "version": VERSION,
            "metadata": {"busgate": "1", "group": service.group},
        }
        if verb == "PING":
            return answer
        prefix = _prefix_of(service)
        endpoints = []
        for command in sorted(service.commands):
            endpoint: dict[str, Any] = {
                "name": micro_name(command),
                "subject": f"{prefix}.grp.{service.group}",
                "queue_group": service.group,
                "metadata": {"cmd": command},
            }
            if verb == "STATS":
                runs, errors = service.command_stats.get(command, (0, 0))
                endpoint.update(num_requests=runs, num_errors=errors, last_error="",
                                processing_time=0, average_processing_time=0,
                                data=None)  # fmt: skip
                endpoint.pop("metadata")
            endpoints.append(endpoint)
        answer["endpoints"] = endpoints
        if verb == "INFO":
            answer["description"] = f"busgate service {service.group} (PROTOCOL.md 10.3)"
        else:
            answer["started"] = self.started.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return answer


def _nats_of(service: MicroServed) -> NatsClient | None:
    transport = service.client.transport
    return getattr(transport, "nats", None)


def _prefix_of(service: MicroServed) -> str:
    return str(getattr(service.client.transport, "prefix", "bus"))
