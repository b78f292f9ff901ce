"""Shared timers for requests that wait for one answer.

A timer of its own per request (``loop.call_later`` and its ``cancel``) costs about 3 us in
uvloop, on every request a client or the gateway makes. :class:`Deadlines` puts the requests
whose deadlines fall in the same :data:`TICK`-long slot under one loop timer instead: starting
and ending a wait is a dict insertion and removal. A request still waiting when its slot's timer
runs times out then: at most :data:`TICK` after its deadline, never before it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Final

__all__ = ["TICK", "Deadlines"]

#: Seconds a slot spans: how late, at most, a request times out.
TICK: Final = 0.01

#: What a waiter is told when its time is up.
Expire = Callable[[], None]


class Deadlines:
    """The waits of one client, by deadline slot (one event loop)."""

    __slots__ = ("_slots",)

    def __init__(self) -> None:
        # slot number -> the waits ending in it: their expiry callback -> their deadline
        self._slots: dict[int, dict[Expire, float]] = {}

    def __len__(self) -> int:
        return sum(len(slot) for slot in self._slots.values())

    def add(self, expire: Expire, timeout: float) -> dict[Expire, float]:
        """Call ``expire()`` once ``timeout`` seconds have passed, unless it is removed first
        from the slot returned (``slot.pop(expire, None)``) when the wait ends."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        key = math.floor(deadline / TICK) + 1  # the slot ends after the deadline
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = {}
            loop.call_at(key * TICK, self._expire, key)
        slot[expire] = deadline
        return slot

    def _expire(self, key: int) -> None:
        slot = self._slots.pop(key, None)
        if not slot:
            return
        now = asyncio.get_running_loop().time()
        for expire, deadline in slot.items():
            if deadline > now:  # the loop's timer ran a little early: wait on, one slot later
                self.add(expire, deadline - now)
            else:
                expire()
