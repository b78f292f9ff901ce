"""The journal recorder of a bus on NATS: :func:`record_journal` (PROTOCOL.md section 10).

``busgate journal record DIR --bus nats://...`` runs it: a plain subscription to every subject
of the bus that appends each payload to a :class:`bus.journal.Journal`, as the broker journals
what it routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from bus.asyncio.nats import settle
from bus.errors import BusError, ConnectError
from bus.nats_subjects import journal_subjects, split_url, url_prefix

__all__ = ["JournalWriter", "record_journal"]

log = logging.getLogger("bus.asyncio.nats")


class JournalWriter(Protocol):
    """What :func:`record_journal` writes to (``bus.journal.Journal``)."""

    def append(self, raw: bytes, now: float) -> int | None: ...


async def record_journal(
    url: str,
    journal: JournalWriter,
    stop: asyncio.Event,
    *,
    prefix: str | None = None,
    ready: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.time,
    connect_timeout: float = 10.0,
) -> int:
    """Record every bus message that crosses a NATS server, as the broker's journal does.

    Plain subscriptions see every message, whatever queue group consumes it. The NATS
    connection reconnects by itself (and resubscribes) until ``stop`` is set; what crosses the
    server while the recorder is disconnected is not recorded (NATS is at most once).

    Args:
        url: ``nats://host:port`` (credentials and several servers as :class:`NatsTransport`).
        journal: where the payloads go, exactly as received, timestamped by ``clock``.
        stop: set it to stop recording.
        prefix: the bus's subject prefix (default: the URL's ``?prefix=``, else ``bus``).
        ready: called once the subscriptions are in place.
        clock: the time source for each record, epoch seconds.
        connect_timeout: seconds for the first connection.

    Returns:
        How many messages were recorded (the journal's filter may leave some out).

    Raises:
        ConnectError: the first connection failed within ``connect_timeout``.
        JournalError: the journal cannot be written.
    """
    servers, user, password = split_url(url)
    recorded = 0
    failure: list[BaseException] = []

    async def received(msg: Msg) -> None:
        nonlocal recorded
        if not msg.data:  # NATS statuses (no responders) carry no message
            return
        try:
            if journal.append(msg.data, clock()) is not None:
                recorded += 1
        except BusError as exc:
            failure.append(exc)
            stop.set()

    nc = NatsClient()
    connecting = nc.connect(
        servers=servers,
        name="busgate-journal",
        user=user,
        password=password,
        max_reconnect_attempts=-1,  # once connected, reconnect (and resubscribe) forever
        reconnect_time_wait=1,
        error_cb=_log_error,
    )
    try:
        await asyncio.wait_for(connecting, connect_timeout)
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        with contextlib.suppress(Exception):
            await nc.close()
        where = ",".join(servers)
        raise ConnectError(f"cannot connect to NATS at {where}: {str(exc) or 'timeout'}") from exc
    try:
        for subject in journal_subjects(prefix or url_prefix(url)):
            await nc.subscribe(subject, cb=received)
        await settle(nc)
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()
    if failure:
        raise failure[0]
    return recorded


async def _log_error(exc: Exception) -> None:
    log.warning("NATS: %s", exc)
