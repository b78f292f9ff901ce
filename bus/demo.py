"""The demo service (group ``demo``): something to call as soon as the bus runs.

Commands (arguments are payload fields):

- ``echo``: answers with its arguments, unchanged.
- ``time``: the server's time: ``epoch_ms`` (int), ``iso`` (UTC, ISO 8601) and ``zone``.
- ``sleep``: sleeps ``seconds`` (default 1, capped at ``max_sleep``) then answers ``slept``.
- ``fail``: always a NAK with ``msg`` (default "demo failure") and ``rcd`` (default 500).
- ``count``: a stream of ``n`` responses (default 3, capped at ``max_count``) ``{"i": 1..n,
  "n": n}``, ``interval`` seconds apart (default 0, capped at ``max_sleep``), each sent as soon as
  it is made with ``Flag.MORE``, then an empty ACK with ``Flag.END`` that closes the stream.

``busgate demo --bus URL`` runs it against a broker; ``busgate run`` runs it with the embedded one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypedDict

from bus.asyncio.service import Request, Service, ServiceError
from bus.discovery.schemas import schema_of

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = ["DEMO_GROUP", "create_demo_service"]

DEMO_GROUP = "demo"

#: A number, or its text (``curl -d seconds=0.5`` style callers send text).
_NUMBER: Final = {"type": ["number", "string"], "pattern": r"^\s*[0-9.eE+-]+\s*$"}


class TimeAnswer(TypedDict):
    """The server's time."""

    epoch_ms: int
    iso: str
    zone: str


class SleepArgs(TypedDict, total=False):
    """How long to sleep, in seconds (default 1, capped by the service)."""

    seconds: float | str


class Slept(TypedDict):
    """How long it slept, in seconds."""

    slept: float


class FailArgs(TypedDict, total=False):
    """The NAK to answer with."""

    msg: str
    rcd: int


class CountArgs(TypedDict, total=False):
    """How many responses (default 3) and the seconds between them (default 0)."""

    n: float | str
    interval: float | str


class Counted(TypedDict):
    """One response of the stream: its number and the total."""

    i: int
    n: int


def create_demo_service(
    client: Client,
    *,
    group: str = DEMO_GROUP,
    max_sleep: float = 30.0,
    max_count: int = 1000,
    concurrency: int = 64,
    heartbeat_interval: float = 5.0,
) -> Service:
    """Build the demo service (not started).

    Args:
        client: a connected client.
        group: the group to serve (default ``demo``).
        max_sleep: cap on ``sleep``'s ``seconds`` and ``count``'s ``interval`` (default 30 s).
        max_count: cap on ``count``'s ``n`` (default 1000).
        concurrency: see :class:`bus.asyncio.service.Service` (default 64).
        heartbeat_interval: see :class:`bus.asyncio.service.Service` (default 5 s).

    Returns:
        The service; call ``await service.start()``.
    """
    svc = Service(client, group, concurrency=concurrency, heartbeat_interval=heartbeat_interval)

    @svc.command("echo", args={"type": "object"}, answer={"type": "object"})
    async def echo(req: Request) -> dict[str, Any]:
        """Answers with its arguments, unchanged."""
        return req.args

    @svc.command("time", args={"type": "object", "additionalProperties": False})
    async def now(req: Request) -> TimeAnswer:
        """The server's time (UTC)."""
        moment = datetime.now(UTC)
        return {
            "epoch_ms": int(moment.timestamp() * 1000),
            "iso": moment.isoformat(),
            "zone": "UTC",
        }

    @svc.command("sleep", args=_numbers(SleepArgs))
    async def sleep(req: Request) -> Slept:
        """Sleeps a while, then answers how long."""
        seconds = min(_number(req, "seconds", 1.0), max_sleep)
        started = time.monotonic()
        await asyncio.sleep(seconds)
        return {"slept": round(time.monotonic() - started, 3)}

    @svc.command("fail", args=FailArgs)
    async def fail(req: Request) -> None:
        """Always a NAK with the msg and rcd given (default 500)."""
        rcd = req.get("rcd", 500)
        if isinstance(rcd, bool) or not isinstance(rcd, int):
            raise ServiceError("rcd must be an integer", 400)
        raise ServiceError(str(req.get("msg", "demo failure")), rcd)

    @svc.command("count", args=_numbers(CountArgs), answer=Counted)
    async def count(req: Request) -> AsyncIterator[dict[str, Any]]:
        """A stream of n responses, then an empty one that ends it."""
        n = int(min(_number(req, "n", 3), max_count))
        interval = min(_number(req, "interval", 0.0), max_sleep)
        for i in range(1, n + 1):
            if i > 1 and interval:
                await asyncio.sleep(interval)
            yield {"i": i, "n": n}

    return svc


def _numbers(args: type) -> dict[str, Any]:
    """The arguments' schema with each number-or-text member as :data:`_NUMBER`."""
    schema = schema_of(args)
    schema["properties"] = {name: dict(_NUMBER) for name in schema["properties"]}
    return schema


def _number(req: Request, name: str, default: float) -> float:
    value = req.get(name, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ServiceError(f"{name} must be a non-negative number", 400)
    return float(value)
