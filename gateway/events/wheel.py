"""A timing wheel, sans-I/O: many deadlines, one clock reading per tick (PROTOCOL.md 9.5, 6.8).

Tens of thousands of idle SSE streams and WebSocket clients each owe a keepalive now and then.
A timer each is a heap entry each, and a stream that polled its queue twice a second woke the
gateway 40,000 times a second at 20,000 streams. A :class:`TimerWheel` keeps them in slots of
``tick`` seconds instead (a hashed timing wheel, Varghese & Lauck; what Netty's
``HashedWheelTimer`` and the Linux kernel's timer wheel do): adding is a dict append, and the
driver wakes once per slot that holds anything, whatever the number of entries.

No clock inside: the caller gives the time. Entries fire at the end of their slot (at most
``tick`` late, never early) and are not removed when their owner goes: the owner answers for
itself when its slot fires (``None``: it is gone), so a departure costs nothing.
"""

from __future__ import annotations

import math
from typing import Generic, TypeVar

__all__ = ["TimerWheel"]

_T = TypeVar("_T")


class TimerWheel(Generic[_T]):
    """Entries by due time, in slots of ``tick`` seconds.

    Args:
        tick: the width of a slot in seconds (> 0): an entry fires up to this late.
    """

    __slots__ = ("tick", "_slots", "_size")

    def __init__(self, tick: float) -> None:
        if not tick > 0:
            raise ValueError(f"tick must be > 0, not {tick!r}")
        self.tick = tick
        self._slots: dict[int, list[_T]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, entry: _T, due: float) -> None:
        """Fire ``entry`` at the end of the slot that holds ``due``."""
        slot = math.ceil(due / self.tick)
        entries = self._slots.get(slot)
        if entries is None:
            self._slots[slot] = [entry]
        else:
            entries.append(entry)
        self._size += 1

    def add_all(self, entries: list[_T], due: float) -> None:
        """Fire each of ``entries`` at the end of the slot that holds ``due`` (one slot, one
        extend: what a pass that re-arms everything it fired does)."""
        slot = math.ceil(due / self.tick)
        held = self._slots.get(slot)
        if held is None:
            self._slots[slot] = entries
        else:
            held += entries
        self._size += len(entries)

    def next_due(self) -> float | None:
        """When the earliest slot with entries fires (``None``: the wheel is empty)."""
        if not self._slots:
            return None
        return min(self._slots) * self.tick

    def pop_due(self, now: float) -> list[_T]:
        """Take out every entry whose slot has ended by ``now``, earliest slot first."""
        last = math.floor(now / self.tick + 1e-9)
        due = sorted(slot for slot in self._slots if slot <= last)
        fired: list[_T] = []
        for slot in due:
            fired += self._slots.pop(slot)
        self._size -= len(fired)
        return fired
