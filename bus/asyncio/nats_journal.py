"""The journal recorder of a bus on NATS: :func:`record_journal` (PROTOCOL.md 10.2).

``busgate journal record DIR --bus nats://...`` runs it. With JetStream on the server:

- **Events, exactly once.** The bus's events and heartbeats are read from the stream
  (``BUSGATE``) through a durable pull consumer, ``busgate-<prefix>-<name>``, oldest first; each
  is appended with its stream sequence as ``SEQ`` and acknowledged (``AckAll``) only once its
  record is on disk as the journal's fsync policy says. A recorder that starts (again) reads
  the journal's tail (:func:`bus.journal.stream_tail.last_stream_seq`) and has the consumer
  begin right after it, so a kill -9 at any moment leaves every event in the journal once, in
  stream order. Requests, responses and mail are not in the stream: a plain subscription
  records them while the recorder is active (at most once).
- **One writer, a standby.** The recorder takes ``DIR/recorder.lock`` (one process per
  directory), then a lease (:class:`bus.asyncio.nats_lease.KvLease`, key ``<prefix>.<name>``);
  the one that holds both records, any other waits and takes over within the lease's time to
  live once the holder is gone.

Without JetStream it is a plain subscription to the whole bus, at most once (no lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js.client import JetStreamContext

from bus.asyncio.jetstream import DEFAULT_STREAM, Replicas, ensure_stream
from bus.asyncio.nats_lease import KvLease
from bus.asyncio.recording_session import Place, RecordingSession
from bus.discovery.nats_subjects import split_url, url_prefix, url_stream
from bus.errors import BusError, ConnectError, RefusedError
from bus.journal import Journal
from bus.journal.lock import DirectoryLock
from bus.lease import DEFAULT_LEASE_TTL
from bus.masking import mask_url

__all__ = ["RecorderOptions", "record_journal"]

log = logging.getLogger("bus.asyncio.nats")

#: Seconds between two tries of a standby (the directory lock, the lease).
STANDBY_POLL = 0.5

Say = Callable[[str], None]


@dataclass
class RecorderOptions:
    """How :func:`record_journal` records.

    Attributes:
        name: the journal's name: recorders of one name share a lease and the stream consumer.
        lease_ttl: seconds a lease outlives its holder's last renewal (used when the lease
            bucket is made; an existing bucket's own time counts).
        since: where a journal that holds no stream event yet begins: a stream sequence
            (``int``, the first event recorded is the one after it) or epoch seconds
            (``float``); None: the oldest event the stream holds.
        prefix: the bus's subject prefix (default: the URL's ``?prefix=``, else ``bus``).
        connect_timeout: seconds for the first connection.
    """

    name: str = "journal"
    lease_ttl: float = DEFAULT_LEASE_TTL
    since: int | float | None = None
    prefix: str | None = None
    connect_timeout: float = 10.0


async def record_journal(
    url: str,
    directory: str | os.PathLike[str],
    open_journal: Callable[[], Journal],
    stop: asyncio.Event,
    options: RecorderOptions | None = None,
    *,
    say: Say | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Record the bus on a NATS server into a journal (see the module doc) until ``stop``.

    Args:
        url: ``nats://host:port`` (credentials and several servers as :class:`NatsTransport`).
        directory: the journal's directory (locked while this recorder writes it).
        open_journal: opens the journal's writer on ``directory`` (called when this recorder
            becomes the active one; the writer is closed when it stops being it).
        stop: set it to stop recording.
        options: name, lease, start and prefix (:class:`RecorderOptions`).
        say: told each change of state in one line: ``recording ...`` once this recorder
            writes the journal, ``standby: ...`` while another one does.
        clock: the time source for each record, epoch seconds.

    Returns:
        How many messages were recorded.

    Raises:
        ConnectError: the first connection failed within ``connect_timeout``.
        JournalError: the journal cannot be written.
    """
    options = options or RecorderOptions()
    recorder = _Recorder(url, os.fspath(directory), open_journal, options, say or _quiet, clock)
    return await recorder.run(stop)


class _Recorder:
    """The state of one ``busgate journal record`` (see the module doc)."""

    def __init__(
        self,
        url: str,
        directory: str,
        open_journal: Callable[[], Journal],
        options: RecorderOptions,
        say: Say,
        clock: Callable[[], float],
    ) -> None:
        self.url = url
        self.directory = directory
        self.open_journal = open_journal
        self.options = options
        self.say = say
        self.clock = clock
        self.prefix = options.prefix or url_prefix(url)
        self.stream = url_stream(url) or DEFAULT_STREAM
        self.recorded = 0
        self.failure: BaseException | None = None
        self.stop = asyncio.Event()
        self.nc = NatsClient()
        self.lock: DirectoryLock | None = None
        self.lease: KvLease | None = None
        self.replicas: Replicas | None = None
        self._said = ""

    # -- life --------------------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        """The journal cannot be written: stop recording, and raise ``exc`` from :meth:`run`."""
        if self.failure is None:
            self.failure = exc
        self.stop.set()

    async def run(self, stop: asyncio.Event) -> int:
        self.stop = stop
        await self._connect()
        try:
            js = await self._jetstream()
            if js is None:
                await self._record_plain(stop)
            else:
                await self._record_stream(js, stop)
        finally:
            if self.lock is not None:
                self.lock.release()
            with contextlib.suppress(Exception):
                await self.nc.drain()
        if self.failure is not None:
            raise self.failure
        return self.recorded

    async def _connect(self) -> None:
        servers, user, password = split_url(self.url)
        connecting = self.nc.connect(
            servers=servers,
            name="busgate-journal",
            user=user,
            password=password,
            max_reconnect_attempts=-1,  # once connected, reconnect (and resubscribe) forever
            reconnect_time_wait=1,
            error_cb=_log_error,
        )
        try:
            await asyncio.wait_for(connecting, self.options.connect_timeout)
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            with contextlib.suppress(Exception):
                await self.nc.close()
            where = ",".join(servers)
            raise ConnectError(
                f"cannot connect to NATS at {where}: {str(exc) or 'timeout'}"
            ) from exc

    async def _jetstream(self) -> JetStreamContext | None:
        """The JetStream context once the stream exists, or None: no JetStream (logged)."""
        if not self.nc._server_info.get("jetstream"):
            log.warning(
                "NATS server without JetStream: events are recorded at most once "
                "(run nats-server -js for a journal that misses none)"
            )
            return None
        js = self.nc.jetstream(timeout=5.0)
        try:
            self.replicas = Replicas.of(self.url, self.nc._server_info)  # as every link's (10.1)
            await ensure_stream(js, self.stream, self.prefix, self.replicas)
        except nats.js.errors.APIError as exc:
            log.warning(
                "NATS JetStream refused stream %r (%s): events are recorded at most once",
                self.stream,
                exc.description or exc,
            )
            return None
        return js

    def _state(self, line: str) -> None:
        if line != self._said:
            self._said = line
            self.say(line)

    async def _wait_for_lock(self, stop: asyncio.Event) -> bool:
        """Hold ``DIR/recorder.lock`` (True), or stop was set meanwhile (False)."""
        self.lock = lock = DirectoryLock(self.directory)
        while not lock.acquire():
            who = lock.holder() or "another process"
            self._state(f"standby: {self.directory} is being written by {who}")
            if await _stopped(stop, STANDBY_POLL):
                return False
        return True

    # -- without JetStream -----------------------------------------------------------------------

    async def _record_plain(self, stop: asyncio.Event) -> None:
        if not await self._wait_for_lock(stop):
            return
        session = self._session(None)
        await session.open_plain(events=True)
        self._state(f"recording {mask_url(self.url)} (no JetStream: at most once)")
        try:
            await _stopped(stop, None)
        finally:
            await session.close()
            self.recorded += session.recorded

    # -- with JetStream ------------------------------------------------------------------------

    async def _record_stream(self, js: JetStreamContext, stop: asyncio.Event) -> None:
        if not await self._wait_for_lock(stop):
            return
        lease = await self._open_lease(js, stop)
        if lease is None:
            return
        try:
            while not stop.is_set() and self.failure is None:
                if not lease.valid() and not await lease.acquire():
                    who = await lease.holder()
                    self._state(f"standby: {who or 'another recorder'} records {lease.key}")
                    await _stopped(stop, STANDBY_POLL)
                    continue
                await self._active(js, lease, stop)
        finally:
            await lease.release()

    async def _open_lease(self, js: JetStreamContext, stop: asyncio.Event) -> KvLease | None:
        """The lease (its bucket replicated as the stream is), or None: stopped meanwhile.

        Raises:
            RefusedError: JetStream refused the lease bucket.
        """
        holder: dict[str, object] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "directory": os.path.abspath(self.directory),
        }
        key = f"{self.prefix}.{self.options.name}"
        while not stop.is_set():
            try:
                info = await js.stream_info(self.stream)
                replicas = max(1, info.config.num_replicas or 1)
                self.lease = await KvLease.open(js, key, holder, self.options.lease_ttl, replicas)
                return self.lease
            except nats.js.errors.APIError as exc:
                if exc.code == 503:  # no JetStream leader yet: a cluster electing one
                    log.warning("JetStream: %s; trying again", exc.description or exc)
                    await _stopped(stop, STANDBY_POLL)
                    continue
                raise RefusedError(
                    f"JetStream refused the recorders' lease bucket: {exc.description or exc}"
                ) from exc
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                log.warning("JetStream: %s; trying again", exc or type(exc).__name__)
                await _stopped(stop, STANDBY_POLL)
        return None

    async def _active(self, js: JetStreamContext, lease: KvLease, stop: asyncio.Event) -> None:
        """Record while the lease holds and ``stop`` is not set."""
        try:
            session = self._session(js)
        except BusError as exc:
            self.fail(exc)
            return
        renewing = asyncio.create_task(self._renew(lease, session))
        try:
            # made again if an operator deleted it meanwhile
            await ensure_stream(js, self.stream, self.prefix, self.replicas)
            await session.open_stream(self.options.since)
            await session.open_plain(events=False)
            took = ", took over" if self._said.startswith("standby") else ""
            shown = mask_url(self.url)
            self._state(f"recording {shown} as {lease.key} (stream {self.stream}{took})")
            await session.follow(stop, lease)
        except (nats.errors.Error, TimeoutError, OSError) as exc:  # the cluster is electing
            log.warning("JetStream: %s; recording starts again", exc or type(exc).__name__)
            await _stopped(stop, STANDBY_POLL)
        except BusError as exc:  # the journal cannot be read or written
            self.fail(exc)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            await session.close()
            self.recorded += session.recorded
        if not stop.is_set() and self.failure is None and not lease.valid():
            self._state(f"standby: lease {lease.key} lost, waiting for it")

    def _session(self, js: JetStreamContext | None) -> RecordingSession:
        """A session on a newly opened journal (raises what opening it raises)."""
        place = Place(self.prefix, self.stream, self.options.name)
        journal = self.open_journal()
        return RecordingSession(self.nc, js, journal, place, self.lease, self.clock, self.fail)

    async def _renew(self, lease: KvLease, session: RecordingSession) -> None:
        while True:
            await asyncio.sleep(lease.term.every)
            if not await lease.renew():
                session.wake()
                return


async def _stopped(stop: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``stop`` at most ``timeout`` seconds (None: for ever); whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout)
    return stop.is_set()


async def _log_error(exc: Exception) -> None:
    log.warning("NATS: %s", exc)


def _quiet(_: str) -> None:
    pass
