"""The broker's side of confirmed publishes (PROTOCOL.md 5.12), mixed into its driver.

:class:`bus.broker.confirm.Confirmations` holds the de-duplication window and the ACKs waiting
for an fsync, with no I/O; this mixin of :class:`bus.broker.server.Broker` answers the
publishers, runs the fsync timer of the ``interval`` policy and reads the window back from the
journal at start.

The broker's journal writes each input batch's records with one ``write()``
(:meth:`bus.journal.Journal.write_pending`, called by :meth:`ConfirmedPublishing._write_journal`
before any of the batch's output leaves); an ACK is held until its record is written (``fsync
none``) or fsynced (``interval``, ``always``), and a record a failed write lost is answered NAK
503, never ACK. The ACK of a binary publish is written straight to bytes
(:func:`bus.message.message_binary.reply_bytes`). With the C accelerator, a run of the usual
confirmed publishes is journaled and answered in C (:mod:`bus.broker.confirm_native`); the
Python loop of :meth:`ConfirmedPublishing._confirm_run` is its reference and takes the rest.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import Any, Final

from bus.broker.config import BrokerConfig
from bus.broker.confirm import Confirmations
from bus.broker.confirm_native import NATIVE, native_confirms
from bus.broker.link import Link
from bus.broker.management import CENTRAL
from bus.broker.protocol import State
from bus.broker.replay import with_seq
from bus.broker.routing import MAX_NAME, Router
from bus.discovery.names import RESERVED_PREFIXES
from bus.errors import BusError
from bus.link import wire
from bus.message.header import Header, peek
from bus.message.ids import new_id
from bus.message.message import Message, MessageType, encode_message, read_message
from bus.message.message_binary import reply_bytes

__all__ = ["ConfirmedPublishing"]

log = logging.getLogger("bus.broker")

_EVT: Final = MessageType.EVT.value
#: RCD of the NAK to a confirmed publish that was routed but not journaled.
_NOT_JOURNALED: Final = 503
_FRAM: Final = 0  # Header.enc of a binary message
_LOST: Final = "routed but not journaled: the journal could not write it"
_READY: Final = State.READY


class ConfirmedPublishing:
    """Confirmed publishes: what :class:`bus.broker.server.Broker` does with an event that
    carries ``RPY``."""

    config: BrokerConfig
    journal: Any
    router: Router
    stats: dict[str, int]
    confirms: Confirmations
    _links: dict[int, Link]
    _sync_timer: asyncio.Handle | None
    #: Whether the journal fsyncs always, once per input batch (:meth:`_commit`).
    _group_commit: bool
    #: Whether the journal writes each input batch at once (:meth:`_write_journal`).
    _batch_writes: bool
    #: The fsync running on a worker thread for confirms that wait, if any.
    _fsyncing: asyncio.Future[None] | None = None
    #: The journal's fsync policy, and the journal it was read from.
    _policy: str = "always"
    _policy_of: Any = None

    def _deliver(self, numbers: list[int], raw: bytes) -> None:
        raise NotImplementedError  # the broker's

    def _flush_dirty(self) -> None:
        raise NotImplementedError  # the broker's

    def _journal(self, raw: bytes) -> int | None:
        raise NotImplementedError  # the broker's

    def _route_confirmed(self, link: Link, raw: bytes) -> bool:
        """Route a confirmed publish from ``link`` as :meth:`Broker._dispatch` and
        :meth:`_confirm` do, read from its header alone (no Message built, the ACK written
        straight to bytes): the usual one, whose SRC and CLR already name the sender, to a
        type that is not the system's. Returns False, having done nothing, for any other body
        (the usual path reads it)."""
        conn = link.conn
        stamper = None if conn is None else conn.stamper
        if stamper is None:
            return False
        limits = conn.limits  # type: ignore[union-attr]
        head = peek(raw, limits) if len(raw) <= limits.max_size else None
        if head is None or head.typ != _EVT:
            return False
        inbox, grp, src, clr = head.rpy, head.grp, head.src, head.clr
        if (
            inbox is None
            or not grp
            or head.tgt is not None
            or len(grp) > MAX_NAME
            or grp.startswith(RESERVED_PREFIXES)
            or (src is not None and src != stamper.office and not stamper.owns(src))
            or (clr is not None and clr != stamper.office and not stamper.trusted)
        ):
            return False
        link.messages_in += 1
        link.events_in += 1  # taken: the link's receipts count it (5.12)
        stats = self.stats
        office, mid = stamper.office, head.mid
        now = time.monotonic()
        if mid is not None:
            first = self.confirms.duplicate(office, mid, now)
            if first is not None:  # answered once its first copy's record is as durable
                stats["duplicates"] += 1
                again = self._ack_bytes(head, raw, limits, first, True)
                self._answer_confirm(inbox, first, again, raw)
                return True
        stats["routed"] += 1
        seq = self._journal(raw) if self.journal is not None else None
        numbers = self.router.subscribers(grp)
        if numbers:
            self._deliver(numbers, raw if seq is None else with_seq(raw, head.enc, seq))
        else:
            stats["dropped"] += 1
        if seq is None:
            self._confirm(link, Message.on_wire(raw, head, limits), None)
            return True
        if mid is not None:
            self.confirms.remember(office, mid, seq, now)
        ack = (
            reply_bytes(inbox, mid, new_id(), "ACK", CENTRAL, head.trc, {"seq": seq})
            if head.enc == _FRAM
            else None
        )
        if ack is None:
            ack = self._ack_bytes(head, raw, limits, seq)
        self._answer_confirm(inbox, seq, ack, raw)
        return True

    def _confirm_run(self, link: Link, bodies: list[bytes], start: int, limit: int) -> int:
        """Route ``bodies[start:]``, at most ``limit`` of them, while each is a confirmed
        publish :meth:`_route_confirmed` takes and is not a retry; returns the index of the
        first body left (``start``: none taken). What :meth:`_route_confirmed` does one by one,
        with what is the same for the run (the sender, the clocks, the fsync policy, the
        window) read once."""
        conn = link.conn
        stamper = None if conn is None else conn.stamper
        journal = self.journal
        if stamper is None or journal is None or not self._batch_writes:
            return start
        if self._policy_of is not journal:
            self._policy = getattr(getattr(journal, "fsync", None), "value", "always")
            self._policy_of = journal
        policy = self._policy
        limits = conn.limits  # type: ignore[union-attr]
        max_size, office, trusted = limits.max_size, stamper.office, stamper.trusted
        owns, subscribers, append = stamper.owns, self.router.subscribers, journal.append
        confirms = self.confirms
        now, wall = time.monotonic(), time.time()
        known = confirms.known(now)
        remember = confirms.remember
        held = confirms.held(policy != "none")
        stats = self.stats
        at, end = start, min(len(bodies), start + limit)
        dropped = 0
        native = NATIVE and stamper.latin1 is not None
        try:
            while at < end:
                if native:  # the C lane takes what it can (confirm_native.py); this loop the rest
                    at, more, error = native_confirms(self, conn, bodies, at, end, now, wall, held)
                    dropped += more
                    if error is not None:
                        raise error
                    if at >= end or conn.state is not _READY:  # type: ignore[union-attr]
                        break
                raw = bodies[at]
                if b"RPY" not in raw or len(raw) > max_size:
                    break
                head = peek(raw, limits)
                if head is None or head.typ != _EVT:
                    break
                inbox, grp, src, clr, mid = head.rpy, head.grp, head.src, head.clr, head.mid
                if (
                    inbox is None
                    or not grp
                    or head.tgt is not None
                    or len(grp) > MAX_NAME
                    or grp.startswith(RESERVED_PREFIXES)
                    or (src is not None and src != office and not owns(src))
                    or (clr is not None and clr != office and not trusted)
                    or head.enc != _FRAM
                    or (mid is not None and (office, mid) in known)
                ):
                    break  # the one-by-one lane takes it (a retry, a JSON body, ...)
                try:
                    seq = append(raw, wall)
                except BusError as exc:  # counted and logged; the one-by-one lane tries again
                    stats["journal_errors"] += 1
                    log.error("journal append failed: %s", exc)
                    break
                at += 1
                numbers = subscribers(grp)
                if numbers:
                    self._deliver(numbers, raw if seq is None else with_seq(raw, _FRAM, seq))
                else:
                    dropped += 1
                if seq is None:  # the journal's filter left it out: NAK 503
                    self._confirm(link, Message.on_wire(raw, head, limits), None)
                else:
                    if mid is not None:
                        remember(office, mid, seq, now)
                    ack = reply_bytes(inbox, mid, new_id(), "ACK", CENTRAL, head.trc, {"seq": seq})
                    try:
                        if ack is None:  # without the C encoder
                            ack = self._ack_bytes(head, raw, limits, seq)
                    except BusError as exc:  # as Link._route_confirmed: logged, counted
                        log.warning("link %d: message not routed: %s", link.number, exc)
                        dropped += 1
                    else:
                        held.append((seq, inbox, ack, raw))  # released by _commit or the fsync
                if conn.state is not _READY:  # type: ignore[union-attr]
                    break  # routing closed the sender's link (an eviction): the rest is not read
        finally:
            taken = at - start
            link.messages_in += taken
            link.events_in += taken  # taken: the link's receipts count them (5.12)
            stats["routed"] += taken
            stats["dropped"] += dropped
        if policy == "interval" and held and self._sync_timer is None:
            self._sync_timer = asyncio.get_running_loop().call_soon(self._sync_confirms)
        return at

    def _duplicate(self, link: Link, message: Message) -> bool:
        """A retry of a confirmed publish already journaled: answered with its first seq."""
        mid = message.mid
        if mid is None or link.conn is None:
            return False
        seq = self.confirms.duplicate(link.conn.office, mid, time.monotonic())
        if seq is None:
            return False
        self.stats["duplicates"] += 1
        ack = self._confirm_reply(message, seq, duplicate=True)
        # not before the first copy's record is as durable as its own ACK waits for
        self._answer_confirm(message.rpy or "", seq, ack, message.wire or encode_message(message))
        return True

    def _confirm(self, link: Link, message: Message, seq: int | None) -> None:
        inbox = message.rpy or ""
        if seq is None:
            why = (
                "routed but not journaled: the broker runs without a journal"
                if self.journal is None
                else "routed but not journaled: the journal's filter leaves it out, or the "
                "journal could not write it"
            )
            nak = message.nak(why, _NOT_JOURNALED)
            nak.src = CENTRAL
            self._to_inbox(inbox, encode_message(nak))
            return
        if message.mid is not None and link.conn is not None:
            self.confirms.remember(link.conn.office, message.mid, seq, time.monotonic())
        ack = self._confirm_reply(message, seq)
        self._answer_confirm(inbox, seq, ack, message.wire or encode_message(message))

    def _answer_confirm(self, inbox: str, seq: int, ack: bytes, raw: bytes) -> None:
        """Send the ACK of the confirmed publish ``raw`` journaled as ``seq``, or hold it until
        the journal's fsync policy is met."""
        journal = self.journal
        if self._policy_of is not journal:  # read once per journal: this runs per confirm
            self._policy = getattr(getattr(journal, "fsync", None), "value", "always")
            self._policy_of = journal
        policy = self._policy
        if policy != "none" and journal.synced_seq < seq:
            # held until the record is fsynced: under always, by _commit before this input
            # batch's output leaves; under interval, by an fsync for what came in together
            self.confirms.wait_for_sync(seq, inbox, ack, raw)
            if policy == "interval" and self._sync_timer is None:
                self._sync_timer = asyncio.get_running_loop().call_soon(self._sync_confirms)
            return
        if getattr(journal, "written_seq", seq) < seq:  # written with its input batch
            self.confirms.wait_for_write(seq, inbox, ack, raw)
            return
        self._to_inbox(inbox, ack)

    def _write_journal(self) -> None:
        """Write what this input batch appended to the journal (one ``write()``), before any
        of its output leaves; then release the ACKs held for it (fsync none)."""
        journal = self.journal
        if journal.written_seq < journal.last_seq:
            try:
                journal.write_pending()
            except BusError as exc:
                self.stats["journal_errors"] += 1
                log.error("journal write failed: %s", exc)
        self._answer_lost()  # also what a write made by a read, a flush or a rotation lost
        if self.confirms.unwritten:
            self._release(self.confirms.written(journal.written_seq))

    def _answer_lost(self) -> None:
        """NAK 503 the confirmed publishes whose records a failed write lost (held ACKs are
        dropped): the publisher's retry is journaled afresh."""
        if not self._batch_writes:
            return
        lost = self.journal.take_lost()
        if not lost:
            return
        for inbox, raw in self.confirms.lost(lost):
            if not raw:
                continue
            nak = read_message(raw).nak(_LOST, _NOT_JOURNALED)
            nak.src = CENTRAL
            self._to_inbox(inbox, encode_message(nak))

    def _commit(self) -> None:
        """Write what this input batch appended (:meth:`_write_journal`). Then, under ``fsync
        always`` (the journal's group commit): fsync what this input batch
        appended, once, before any of its output (deliveries, receipts, ACKs) leaves; then
        release the ACKs it covers. A failed fsync keeps them held and tries again shortly.

        The ACKs are released even when there is nothing left to fsync: a command of the same
        batch (``manage.journal``, ``manage.flush``) may have fsynced their records already.
        """
        if self._batch_writes:
            self._write_journal()
        journal = self.journal
        if not self._group_commit:
            return
        if journal.synced_seq < journal.last_seq:
            try:
                journal.commit(time.time())
            except BusError as exc:
                self._sync_failed(exc)
                return
        if self.confirms.waiting:
            self._release(self.confirms.synced(journal.synced_seq))

    def _recover_confirms(self) -> None:
        """Read the de-duplication window back from the journal: a publisher that retries an
        event journaled just before a crash gets its first seq, not a second record."""
        directory = self.config.journal.directory if self.config.journal else None
        if directory is None:
            return
        from bus.journal import JournalReader

        wall, mono = time.time(), time.monotonic()
        recovered = 0
        try:
            for record in JournalReader(directory).records(since=wall - self.confirms.window):
                if b"RPY" not in record.raw:  # a plain event: not worth reading its header
                    continue
                message = read_message(record.raw)
                if record.seq is None or message.typ != _EVT or message.rpy is None:
                    continue
                if message.src and message.mid:
                    when = mono - (wall - record.ts)
                    self.confirms.remember(message.src, message.mid, record.seq, when)
                    recovered += 1
        except BusError as exc:  # an unreadable journal: the window starts empty
            log.warning("confirmed publishes not recovered from the journal: %s", exc)
        if recovered:
            log.info(
                "%d confirmed publishes of the last %g s recovered", recovered, self.confirms.window
            )

    def _confirm_reply(self, message: Message, seq: int, duplicate: bool = False) -> bytes:
        payload: dict[str, Any] = {"seq": seq}
        if duplicate:
            payload["duplicate"] = True
        head = message.header
        if head.enc == _FRAM and message.wire is not None:  # the binary lane, no Message built
            raw = reply_bytes(head.rpy, head.mid, new_id(), "ACK", CENTRAL, head.trc, payload)
            if raw is not None:
                return raw
        return encode_message(message.ack(payload, src=CENTRAL))

    def _ack_bytes(
        self, head: Header, raw: bytes, limits: Any, seq: int, duplicate: bool = False
    ) -> bytes:
        """The ACK ``{seq}`` of the confirmed publish ``raw`` (read as ``head``)."""
        if head.enc == _FRAM and not duplicate:
            ack = reply_bytes(head.rpy, head.mid, new_id(), "ACK", CENTRAL, head.trc, {"seq": seq})
            if ack is not None:
                return ack
        return self._confirm_reply(Message.on_wire(raw, head, limits), seq, duplicate)

    def _sync_confirms(self) -> None:
        """Under the interval policy: fsync for the confirmed publishes that wait (every one
        that came in meanwhile shares it), then send their ACKs.

        The fsync runs on a worker thread: the broker routes on while the disk works (a slow
        disk must not stall every link), and the publishes that arrive meanwhile wait for the
        next fsync, which starts as this one ends (group commit).
        """
        self._sync_timer = None
        journal = self.journal
        if journal is None or self._fsyncing is not None:
            return  # the running fsync's end starts the next
        try:
            handle = journal.sync_handle()
        except BusError as exc:
            self._sync_failed(exc)
            return
        if handle is None:  # nothing left to fsync
            self._release_synced()
            return
        fd, seq = handle
        fsyncing = asyncio.get_running_loop().run_in_executor(None, _fsync, fd)
        fsyncing.add_done_callback(functools.partial(self._fsynced, seq))
        self._fsyncing = fsyncing

    def _fsynced(self, seq: int, fsyncing: asyncio.Future[None]) -> None:
        self._fsyncing = None
        failure = None if fsyncing.cancelled() else fsyncing.exception()
        if failure is not None:
            self._sync_failed(failure)
            return
        self.journal.mark_synced(seq, time.time())
        self._release_synced()

    def _release_synced(self) -> None:
        self._answer_lost()
        self._release(self.confirms.synced(self.journal.synced_seq))
        self._flush_dirty()
        if self.confirms.waiting and self._sync_timer is None:  # they came in during the fsync
            self._sync_timer = asyncio.get_running_loop().call_soon(self._sync_confirms)

    def _sync_failed(self, exc: BaseException) -> None:
        self.stats["journal_errors"] += 1
        log.error("journal fsync failed: %s", exc)
        self._answer_lost()  # an fsync writes what is pending first: that may have failed
        if self.confirms.waiting and self._sync_timer is None:  # try again shortly
            self._sync_timer = asyncio.get_running_loop().call_later(0.1, self._sync_confirms)

    async def _confirms_settled(self) -> None:
        """Wait for an fsync still running (before the journal closes, at stop)."""
        fsyncing = self._fsyncing
        if fsyncing is not None:
            await asyncio.wait([fsyncing])

    def _sync_journal(self) -> None:
        tick = getattr(self.journal, "tick", None)
        if tick is None:
            return
        try:
            tick(time.time())
        except BusError as exc:
            self.stats["journal_errors"] += 1
            log.error("journal fsync failed: %s", exc)

    def _release(self, acks: list[tuple[str, bytes]]) -> None:
        """Send released ACKs ``(inbox, ACK)`` in order: the ACKs for one inbox that follow one
        another (a publisher's run of confirms) go to its link as one write, with one lookup
        (a reply inbox has one consumer, PROTOCOL.md 5.12)."""
        choose, links, frame = self.router.choose, self._links, wire.encode_message
        at, count = 0, len(acks)
        while at < count:
            inbox = acks[at][0]
            end = at + 1
            while end < count and acks[end][0] == inbox:
                end += 1
            chosen = choose(inbox)
            out = None if chosen is None else links.get(chosen)
            if out is not None:
                if end - at == 1:
                    out.write(frame(acks[at][1]))
                else:
                    out.write(b"".join([frame(ack) for _, ack in acks[at:end]]))
                    out.messages_out += end - at - 1  # one write, that many messages
            at = end

    def _to_inbox(self, inbox: str, raw: bytes) -> None:
        chosen = self.router.choose(inbox)
        if chosen is not None:
            self._deliver([chosen], raw)


def _fsync(fd: int) -> None:
    """fsync a duplicated descriptor and close it (on a worker thread)."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
