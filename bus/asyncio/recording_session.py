"""One spell of the NATS journal recorder: :class:`RecordingSession` (PROTOCOL.md 10.2).

While a recorder holds the lease (:mod:`bus.asyncio.nats_journal`), a session has the journal
open and records into it: the stream's events through :class:`StreamConsumer`, fetched,
appended in stream order with their sequence (:class:`bus.recording.StreamCursor`) and
acknowledged once on disk (:class:`bus.recording.AckWindow`); the rest of the bus from a plain
subscription, as it passes. When the lease goes, the session ends: what it fetched and did not
append is left unacknowledged for the next holder, which starts from its own journal's tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js.client import JetStreamContext

from bus.asyncio.nats import settle
from bus.asyncio.nats_lease import KvLease
from bus.asyncio.stream_consumer import Start, StreamConsumer
from bus.discovery.nats_subjects import journal_subjects
from bus.errors import BusError, JournalError
from bus.journal import FsyncPolicy, Journal
from bus.journal.stream_tail import last_stream_seq
from bus.recording import (
    AckWindow,
    StreamCursor,
    Take,
    delivery,
    plain_record,
    recorded_subject,
)
from bus.recording import stream_record as make_stream_record

__all__ = ["FETCH_BATCH", "SYNC_AFTER", "Place", "RecordingSession"]

log = logging.getLogger("bus.asyncio.nats")

#: Stream messages asked for at once.
FETCH_BATCH: Final = 512
#: Unacknowledged stream messages after which the journal is fsynced at once (interval policy).
SYNC_AFTER: Final = 20_000


@dataclass(frozen=True)
class Place:
    """Where a recorder records: the bus's subject ``prefix``, its event ``stream``, and the
    journal's ``name``."""

    prefix: str
    stream: str
    name: str


class RecordingSession:
    """One spell of recording: the journal open, the stream consumer, the plain subscription.

    Args:
        nc: the recorder's NATS connection.
        js: its JetStream context (None: no JetStream, the plain subscription only).
        journal: the journal, opened for this session (closed by :meth:`close`).
        place: the bus's prefix, its event stream and the journal's name.
        lease: the lease this session records under (None without JetStream).
        clock: epoch seconds, for each record.
        fail: told when the journal cannot be written (the recorder stops).
    """

    def __init__(
        self,
        nc: NatsClient,
        js: JetStreamContext | None,
        journal: Journal,
        place: Place,
        lease: KvLease | None,
        clock: Callable[[], float],
        fail: Callable[[BaseException], None],
    ) -> None:
        self.nc = nc
        self.js = js
        self.journal = journal
        self.place = place
        self.lease = lease
        self.clock = clock
        self.fail = fail
        self.recorded = 0
        self.failed = False
        self.cursor = StreamCursor()
        self.acks: AckWindow[Msg] = AckWindow()
        self.consumer: StreamConsumer | None = None
        self.plain: NatsSubscription | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Make :meth:`follow` return (the lease was lost)."""
        self._wake.set()

    # -- opening ---------------------------------------------------------------------------

    async def open_plain(self, *, events: bool) -> None:
        """Subscribe to the bus's subjects (``events``: the event subjects too)."""
        prefix, lease = self.place.prefix, self.lease

        async def received(msg: Msg) -> None:
            if not msg.data or not recorded_subject(msg.subject, prefix, not events):
                return  # a NATS status, or not a bus message
            if lease is not None and not lease.valid():
                return  # no longer the active recorder
            self._append(plain_record(msg.data))

        (subject,) = journal_subjects(prefix)
        self.plain = await self.nc.subscribe(subject, cb=received)
        await settle(self.nc)

    async def open_stream(self, since: int | float | None) -> None:
        """Start the consumer right after the journal's last stream event (for a journal
        without one: after stream sequence ``since`` (int), at time ``since`` (float), or
        with the stream's oldest event (None))."""
        assert self.js is not None
        tail = last_stream_seq(self.journal.directory)
        if tail:
            start = Start(after=tail)
        elif isinstance(since, float):
            start = Start(time=since)
        else:
            start = Start(after=since or 0)
        self.cursor.position = tail
        place = self.place
        self.consumer = StreamConsumer(self.nc, self.js, place.stream, place.prefix, place.name)
        await self.consumer.restart(start, tail)

    # -- following the stream ----------------------------------------------------------------

    async def follow(self, stop: asyncio.Event, lease: KvLease) -> None:
        """Fetch, append and acknowledge until ``stop`` or the lease ends."""
        consumer = self.consumer
        assert consumer is not None
        while not stop.is_set() and not self._wake.is_set():
            remaining = lease.term.remaining(time.monotonic())
            if remaining <= 0:
                return
            if consumer.lost:
                self._restarted()
                await consumer.restart(Start(after=self.cursor.position))
            messages = await consumer.fetch(FETCH_BATCH, min(1.0, remaining))
            if not lease.valid():
                return  # fetched, but the lease ran out meanwhile: the next holder reads them
            for msg in messages:
                if not self._take(msg):
                    self._restarted()
                    await consumer.restart(Start(after=self.cursor.position))
                    break
            await self._sync_and_ack()

    def _restarted(self) -> None:
        self.acks.clear()
        self.cursor.restarted()

    def _take(self, msg: Msg) -> bool:
        """Journal one stream message in order; False: a delivery went missing."""
        where = delivery(msg.reply)
        if where is None:
            return True  # not a stream message
        take = self.cursor.take(where.stream_seq, where.delivery)
        if take is Take.RESTART:
            log.info(
                "JetStream delivery %d came after %d: the consumer starts again after %d",
                where.delivery,
                self.cursor.delivered,
                self.cursor.position,
            )
            return False
        journal = self.journal
        if take is Take.APPEND:
            body = make_stream_record(msg.data, where.stream_seq)
            if body is None:
                log.warning(
                    "stream message %d on %s is no bus event (%d bytes): not journaled",
                    where.stream_seq,
                    msg.subject,
                    len(msg.data),
                )
            else:
                # stamped with when the stream stored it, as the broker stamps a record with
                # its routing time, however late the recorder appends it
                self._append(body, where.stored)
        self.acks.add(journal.last_seq, msg)
        return True

    def _append(self, body: bytes, at: float | None = None) -> None:
        """Append one record, stamped ``at`` (epoch seconds; default: now)."""
        try:
            if self.journal.append(body, self.clock() if at is None else at) is not None:
                self.recorded += 1
        except BusError as exc:
            self._append_failed(exc)

    async def _sync_and_ack(self) -> None:
        """Put what the policy says on disk, then acknowledge what is there."""
        journal = self.journal
        if journal.fsync is FsyncPolicy.NONE:
            durable = journal.last_seq
        else:
            if journal.fsync is FsyncPolicy.ALWAYS or len(self.acks) >= SYNC_AFTER:
                await self._fsync()
            else:
                journal.tick(self.clock())
            durable = journal.synced_seq
        msg = self.acks.ready(durable)
        if msg is not None:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await msg.ack()

    async def _fsync(self) -> None:
        """fsync on a worker thread (the lease is renewed meanwhile)."""
        journal = self.journal
        try:
            handle = journal.sync_handle()
            if handle is None:
                return
            fd, seq = handle
            await asyncio.to_thread(_fsync_and_close, fd)
        except OSError as exc:
            self._append_failed(JournalError(str(journal.directory), 0, f"fsync: {exc}"))
            return
        except BusError as exc:
            self._append_failed(exc)
            return
        journal.mark_synced(seq, self.clock())

    def _append_failed(self, exc: BusError) -> None:
        self.failed = True
        self.fail(exc)
        self._wake.set()

    # -- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the subscription, put the journal on disk, acknowledge, close the journal."""
        if self.plain is not None:
            with contextlib.suppress(nats.errors.Error):
                await self.plain.unsubscribe()
        try:
            if self.consumer is not None and not self.failed:
                with contextlib.suppress(BusError):
                    self.journal.flush()
                    msg = self.acks.ready(self.journal.synced_seq)
                    if msg is not None:
                        with contextlib.suppress(nats.errors.Error, TimeoutError):
                            await msg.ack()
        finally:
            if self.consumer is not None:
                await self.consumer.close()
            try:
                self.journal.close()
            except BusError as exc:
                self.fail(exc)


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
