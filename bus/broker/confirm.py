"""Confirmed publishes: the de-duplication window and confirms waiting for an fsync (sans-I/O).

An event sent with ``RPY`` asks the broker to confirm it (PROTOCOL.md 5.12): the broker journals
it, routes it, and answers ACK ``{seq}`` once the record is as durable as the journal's fsync
policy makes it (``always``: fsynced with the append; ``interval``: after an fsync made at
once for the confirmed events that came in together; ``none``: written, with the other records
of its input batch in one ``write()``). An ACK waits here until then. A publisher that
did not hear the ACK sends the same message again (same MID): within
:data:`DEDUP_WINDOW_S` the broker recognises it, neither journals nor routes it again, and
answers with the first sequence number. Time is an argument.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

__all__ = ["DEDUP_ENTRIES", "DEDUP_WINDOW_S", "Confirmations"]

#: Seconds a confirmed publish's MID is remembered against a retry (NATS' duplicate window: 2 min).
DEDUP_WINDOW_S: Final = 120.0
#: MIDs remembered at most (the oldest forgotten first).
DEDUP_ENTRIES: Final = 100_000


class Confirmations:
    """What the broker remembers about confirmed publishes.

    Args:
        window: seconds a (post office, MID) is remembered.
        entries: how many are remembered at most.
    """

    def __init__(self, window: float = DEDUP_WINDOW_S, entries: int = DEDUP_ENTRIES) -> None:
        self.window = window
        self.entries = entries
        self._seen: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
        self._expires = 0.0  # when the oldest remembered MID is to be forgotten
        # ACKs held (seq, inbox, ACK, the publish's bytes), seq ascending: for an fsync, and
        # (fsync none) for the write of their input batch
        self._unsynced: list[tuple[int, str, bytes, bytes]] = []
        self._unwritten: list[tuple[int, str, bytes, bytes]] = []

    def duplicate(self, office: str, mid: str, now: float) -> int | None:
        """The sequence number of an earlier publish of this MID within the window, else None."""
        if now >= self._expires:
            self._forget(now)
        seen = self._seen.get((office, mid))
        return None if seen is None else seen[0]

    def remember(self, office: str, mid: str, seq: int, now: float) -> None:
        """Record a confirmed publish, so a retry of it is recognised."""
        seen = self._seen
        if not seen:
            self._expires = now + self.window
        seen[(office, mid)] = (seq, now)
        if len(seen) > self.entries:
            seen.popitem(last=False)
            self._expires = 0.0  # read from the new oldest at the next look

    def remembered_run(self, now: float, was_empty: bool, evicted: bool) -> None:
        """After a run wrote :meth:`known`'s mapping itself (the C confirm lane), as
        :meth:`remember` would have: ``was_empty`` before the run, ``evicted`` when the run
        dropped the oldest entries past :attr:`entries`."""
        if was_empty and self._seen:
            self._expires = now + self.window
        if evicted:
            self._expires = 0.0  # read from the new oldest at the next look

    def known(self, now: float) -> Mapping[tuple[str, str], tuple[int, float]]:
        """The window at ``now``: (post office, MID) -> (seq, when), the expired forgotten
        first. For a run of :meth:`duplicate` lookups made at one time: read it, do not change
        it (:meth:`remember` does)."""
        if now >= self._expires:
            self._forget(now)
        return self._seen

    def held(self, synced: bool) -> list[tuple[int, str, bytes, bytes]]:
        """Where an ACK ``(seq, inbox, ACK, publish)`` waits, seq ascending: for an fsync
        (``synced``, :meth:`wait_for_sync`) or for its batch's write (:meth:`wait_for_write`).
        For a run of them: append to it, in order."""
        return self._unsynced if synced else self._unwritten

    def wait_for_sync(self, seq: int, inbox: str, ack: bytes, raw: bytes = b"") -> None:
        """Hold an ACK until the journal has fsynced ``seq`` (``raw``: the publish, to answer
        NAK instead if its record is lost, :meth:`lost`)."""
        self._unsynced.append((seq, inbox, ack, raw))

    def synced(self, synced_seq: int) -> list[tuple[str, bytes]]:
        """The ACKs (inbox, message) whose records are now fsynced, in order; forgotten here."""
        return _release(self._unsynced, synced_seq)

    def wait_for_write(self, seq: int, inbox: str, ack: bytes, raw: bytes) -> None:
        """Hold an ACK until the journal has written ``seq`` (handed it to the OS)."""
        self._unwritten.append((seq, inbox, ack, raw))

    def written(self, written_seq: int) -> list[tuple[str, bytes]]:
        """The ACKs (inbox, message) whose records are now written, in order; forgotten here."""
        return _release(self._unwritten, written_seq)

    def lost(self, ranges: list[tuple[int, int]]) -> list[tuple[str, bytes]]:
        """The held ACKs whose records a failed write lost (``ranges``: first and last seq):
        their inboxes and publishes, to be answered NAK; forgotten here, and so are their
        MIDs (a retry is journaled afresh, not answered with a seq the journal lacks)."""

        def gone(seq: int) -> bool:
            return any(first <= seq <= last for first, last in ranges)

        found: list[tuple[int, str, bytes, bytes]] = []
        for held in (self._unsynced, self._unwritten):
            kept: list[tuple[int, str, bytes, bytes]] = []
            for item in held:
                (found if gone(item[0]) else kept).append(item)
            held[:] = kept
        for key in [key for key, (seq, _) in self._seen.items() if gone(seq)]:
            del self._seen[key]
        return [(inbox, raw) for _, inbox, _, raw in sorted(found)]

    @property
    def waiting(self) -> int:
        """ACKs held for an fsync."""
        return len(self._unsynced)

    @property
    def unwritten(self) -> int:
        """ACKs held for the write of their input batch."""
        return len(self._unwritten)

    def _forget(self, now: float) -> None:
        seen = self._seen
        while seen:
            _, (_, when) = next(iter(seen.items()))
            if now - when < self.window:
                self._expires = when + self.window
                return
            seen.popitem(last=False)
        self._expires = 0.0


def _release(held: list[tuple[int, str, bytes, bytes]], upto: int) -> list[tuple[str, bytes]]:
    """The (inbox, ACK) of the ``held`` whose seq is ``upto`` or below, in order; taken out."""
    if not held or held[0][0] > upto:
        return []
    if held[-1][0] <= upto:  # the usual case: all of them
        ready = [(inbox, ack) for _, inbox, ack, _ in held]
        held.clear()
        return ready
    ready = [(inbox, ack) for seq, inbox, ack, _ in held if seq <= upto]
    held[:] = [item for item in held if item[0] > upto]
    return ready
