"""NATS micro services behind the gateway (PROTOCOL.md 10.3): listed in ``/v1/services``,
reached with ``POST /v1/{service}/{endpoint}``.

On a ``nats://`` bus, :class:`MicroDirectory` asks ``$SRV.INFO`` every :data:`INTERVAL` seconds
(and at once for a name it does not know, at most once a second) and keeps what answers within
:data:`WINDOW`: each service written with NATS micro (nats.py's ``nats.micro``, nats.go's
``micro``), its instances, version, description and endpoints (busgate's own services answer
too, marked ``busgate`` in their metadata: they are listed from their heartbeats already). A
service no instance of which answered two rounds in a row is dropped.

``POST /v1/{service}/{endpoint}`` for such a service sends the body as it came, a core NATS
request on the endpoint's subject, and answers the reply as it came (``application/json`` when
it is JSON, else ``application/octet-stream``); a micro error reply (``Nats-Service-Error``,
``Nats-Service-Error-Code``) is the error of its code (400..599 as is, else 502,
``{"error": {"code": "nak", "message", "rcd"}}``); nobody on the subject is 503, no reply 504.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import nats.errors
from starlette.types import Send

from bus.errors import NoRespondersError, RequestTimeout
from gateway.process.metrics import Metrics, Outcome
from gateway.routes.errors import ErrorCode, error_body

if TYPE_CHECKING:  # pragma: no cover
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg

    from bus.asyncio.client import Client

__all__ = [
    "INTERVAL",
    "WINDOW",
    "Calling",
    "Linked",
    "MicroDirectory",
    "MicroService",
    "call_micro",
]

log = logging.getLogger("busgate.gateway")

#: Seconds between two discovery rounds.
INTERVAL: Final = 5.0
#: Seconds a round waits for answers.
WINDOW: Final = 0.3
#: Least seconds between two rounds asked for by a name not known.
_MISS: Final = 1.0


class Linked(Protocol):
    """What discovery reads of the gateway's :class:`gateway.bridge.Bridge` (named here, so that
    this module, which the bridge imports, does not import it: no import circle)."""

    @property
    def client(self) -> Client | None:
        """The bus client while linked."""


class Calling(Protocol):
    """What :func:`call_micro` reads of the gateway (:class:`gateway.state.Gateway`)."""

    @property
    def bridge(self) -> Linked:
        """Its link to the bus."""

    @property
    def metrics(self) -> Metrics:
        """Its counters."""

    @property
    def monotonic(self) -> Callable[[], float]:
        """Its clock for durations."""


@dataclass
class MicroService:
    """One micro service as discovered: what its instances said."""

    name: str
    version: str = ""
    description: str = ""
    endpoints: dict[str, dict[str, str]] = field(default_factory=dict)
    instances: dict[str, float] = field(default_factory=dict)  # id -> when it answered
    misses: int = 0

    def to_json(self) -> dict[str, Any]:
        """As ``/v1/services`` lists it (the shape of a busgate service, plus ``micro``)."""
        last = max(self.instances.values(), default=0.0)
        return {
            "group": self.name,
            "instances": len(self.instances),
            "status": "Running",
            "last_seen": last,
            "commands": sorted(self.endpoints),
            "kind": "micro",
            "micro": {
                "version": self.version,
                "description": self.description,
                "endpoints": [dict(e, name=n) for n, e in sorted(self.endpoints.items())],
            },
        }


def _nats_of(bridge: Linked) -> NatsClient | None:
    client = bridge.client
    nc = getattr(client.transport, "nats", None) if client is not None else None
    return nc if nc is not None and nc.is_connected else None


class MicroDirectory:
    """The NATS micro services of the bus (see the module doc)."""

    def __init__(self, bridge: Linked, interval: float = INTERVAL, window: float = WINDOW):
        self.bridge = bridge
        self.interval = interval
        self.window = window
        self.services: dict[str, MicroService] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_round = 0.0
        self._round: asyncio.Lock | None = None

    @property
    def active(self) -> bool:
        """Whether it discovers (the bus is NATS)."""
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="micro-discovery"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(nats.errors.Error):
                await self.discover()
            await asyncio.sleep(self.interval)

    def listing(self) -> list[dict[str, Any]]:
        """The micro services for ``/v1/services``."""
        return [service.to_json() for _, service in sorted(self.services.items())]

    async def find(self, name: str) -> MicroService | None:
        """The service ``name``: as known, or after a round asked for it (at most one a second)."""
        service = self.services.get(name)
        if service is None and time.monotonic() - self._last_round >= _MISS:
            with contextlib.suppress(nats.errors.Error):
                await self.discover()
            service = self.services.get(name)
        return service

    async def discover(self) -> None:
        """One round of ``$SRV.INFO``."""
        nc = _nats_of(self.bridge)
        if nc is None:
            return
        if self._round is None:
            self._round = asyncio.Lock()
        async with self._round:
            self._last_round = time.monotonic()
            answers = await _gather(nc, "$SRV.INFO", self.window)
            self._take(answers)

    def _take(self, answers: list[dict[str, Any]]) -> None:
        now = time.time()
        seen: dict[str, MicroService] = {}
        for info in answers:
            name, instance = info.get("name"), info.get("id")
            metadata = info.get("metadata") or {}
            if not isinstance(name, str) or not isinstance(instance, str):
                continue
            if isinstance(metadata, dict) and metadata.get("busgate"):
                continue  # a busgate service: listed from its heartbeats
            service = seen.setdefault(name, MicroService(name))
            service.version = str(info.get("version") or "")
            service.description = str(info.get("description") or "")
            service.instances[instance] = now
            for endpoint in info.get("endpoints") or []:
                if isinstance(endpoint, dict) and isinstance(endpoint.get("name"), str):
                    service.endpoints[endpoint["name"]] = {
                        "subject": str(endpoint.get("subject") or endpoint["name"]),
                        "queue_group": str(endpoint.get("queue_group") or ""),
                    }
        for name, known in self.services.items():  # one silent round is forgiven
            if name not in seen and known.misses < 1:
                known.misses += 1
                seen[name] = known
        self.services = seen


async def _gather(nc: NatsClient, subject: str, window: float) -> list[dict[str, Any]]:
    """Every JSON answer to a request on ``subject`` within ``window`` seconds."""
    inbox = nc.new_inbox()
    answers: list[dict[str, Any]] = []

    async def take(msg: Msg) -> None:
        with contextlib.suppress(ValueError):
            data = json.loads(msg.data)
            if isinstance(data, dict):
                answers.append(data)

    subscription = await nc.subscribe(inbox, cb=take)
    try:
        await nc.publish(subject, b"", reply=inbox)
        await nc.flush()
        await asyncio.sleep(window)
    finally:
        with contextlib.suppress(nats.errors.Error):
            await subscription.unsubscribe()
    return answers


async def call_micro(
    gateway: Calling,
    send: Send,
    service: MicroService,
    endpoint: str,
    body: bytes,
    timeout: float,
) -> bool:
    """Answer ``POST /v1/{service}/{endpoint}`` from the micro service; False when it has no
    such endpoint (the caller answers 404).

    Raises:
        NoRespondersError, RequestTimeout: nobody on the subject, no reply in time.
    """
    found = service.endpoints.get(endpoint)
    if found is None:
        return False
    nc = _nats_of(gateway.bridge)
    if nc is None:
        raise NoRespondersError(service.name)
    started = gateway.monotonic()

    def observe(outcome: Outcome) -> None:
        now = gateway.monotonic()
        gateway.metrics.observe(service.name, outcome, now - started, now)

    try:
        reply = await nc.request(found["subject"], body, timeout=timeout)
    except nats.errors.NoRespondersError as exc:
        observe(Outcome.NO_RESPONDERS)
        raise NoRespondersError(service.name) from exc
    except nats.errors.TimeoutError as exc:
        observe(Outcome.TIMEOUT)
        raise RequestTimeout(service.name, timeout) from exc
    status, data, kind = _answer(reply)
    observe(Outcome.ACK if status < 400 else Outcome.NAK)
    headers = [(b"content-length", b"%d" % len(data)), (b"content-type", kind)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
    return True


def _answer(reply: Msg) -> tuple[int, bytes, bytes]:
    headers = reply.headers or {}
    error = headers.get("Nats-Service-Error")
    if error is not None or "Nats-Service-Error-Code" in headers:
        code_text = headers.get("Nats-Service-Error-Code", "")
        code = int(code_text) if code_text.isdigit() else None
        status = code if code is not None and 400 <= code <= 599 else 502
        body = error_body(ErrorCode.NAK, error or "error", rcd=code)
        return status, json.dumps(body).encode(), b"application/json"
    data = reply.data
    try:
        json.loads(data)
    except ValueError:
        return 200, data, b"application/octet-stream"
    return 200, data, b"application/json"
