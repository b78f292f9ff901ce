"""Confirmed publishes: the de-duplication window and confirms waiting for an fsync (sans-I/O).

An event sent with ``RPY`` asks the broker to confirm it (PROTOCOL.md 5.12): the broker journals
it, routes it, and answers ACK ``{seq}`` once the record is as durable as the journal's fsync
policy makes it (``always``: fsynced with the append; ``interval``: after an fsync made at
once for the confirmed events that came in together; ``none``: written). A publisher that
did not hear the ACK sends the same message again (same MID): within
:data:`DEDUP_WINDOW_S` the broker recognises it, neither journals nor routes it again, and
answers with the first sequence number. Time is an argument.
"""

from __future__ import annotations

from collections import OrderedDict
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
        self._unsynced: list[tuple[int, str, bytes]] = []  # (seq, inbox, ACK), seq ascending

    def duplicate(self, office: str, mid: str, now: float) -> int | None:
        """The sequence number of an earlier publish of this MID within the window, else None."""
        self._forget(now)
        seen = self._seen.get((office, mid))
        return None if seen is None else seen[0]

    def remember(self, office: str, mid: str, seq: int, now: float) -> None:
        """Record a confirmed publish, so a retry of it is recognised."""
        self._seen[(office, mid)] = (seq, now)
        while len(self._seen) > self.entries:
            self._seen.popitem(last=False)

    def wait_for_sync(self, seq: int, inbox: str, ack: bytes) -> None:
        """Hold an ACK until the journal has fsynced ``seq``."""
        self._unsynced.append((seq, inbox, ack))

    def synced(self, synced_seq: int) -> list[tuple[str, bytes]]:
        """The ACKs (inbox, message) whose records are now fsynced, in order; forgotten here."""
        ready = [(inbox, ack) for seq, inbox, ack in self._unsynced if seq <= synced_seq]
        if ready:
            self._unsynced = [item for item in self._unsynced if item[0] > synced_seq]
        return ready

    @property
    def waiting(self) -> int:
        """ACKs held for an fsync."""
        return len(self._unsynced)

    def _forget(self, now: float) -> None:
        seen = self._seen
        while seen:
            _, (_, when) = next(iter(seen.items()))
            if now - when < self.window:
                break
            seen.popitem(last=False)
