"""How many of a gateway's worker processes are ready, as any of them answers it in ``/readyz``
(PROTOCOL.md 9.6): ``busgate gateway --workers N``.

Each worker answers ``/readyz`` for itself (its own bus link), and the kernel hands a new
connection to any of them, so one 200 says nothing about the others: a client started right
after it could still reach a worker whose link is not up yet and get 503. The workers share one
flag per worker (a byte in shared memory the parent made before starting them), each keeps its
own flag equal to its readiness, and ``/readyz`` adds ``"workers": {"ready": k, "count": N}``:
a deployment script (or the connection benchmark) waits until ``ready == count``. The parent
clears the flag of a worker that died before it starts the one that replaces it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableSequence
from typing import Final

from bus.asyncio.loop import until_tick

__all__ = ["FOLLOW_S", "WorkerReadiness"]

#: How often a worker copies its readiness into its flag (once a second: an idle worker's
#: wake-ups are its CPU).
FOLLOW_S: Final = 1.0


class WorkerReadiness:
    """One worker's view of the shared flags.

    Args:
        flags: one byte per worker, shared between the processes (``multiprocessing``'s
            ``RawArray("b", N)``; any mutable sequence of ints in tests).
        index: this worker's flag.
    """

    def __init__(self, flags: MutableSequence[int], index: int) -> None:
        self.flags = flags
        self.index = index

    def mark(self, ready: bool) -> None:
        """Set this worker's flag."""
        self.flags[self.index] = int(ready)

    def count(self) -> tuple[int, int]:
        """``(ready, count)``: how many workers are ready, of how many."""
        flags = list(self.flags)
        return sum(1 for flag in flags if flag), len(flags)

    async def follow(self, ready: Callable[[], bool], interval: float = FOLLOW_S) -> None:
        """Keep this worker's flag equal to ``ready()`` until cancelled (then it is cleared)."""
        try:
            while True:
                self.mark(ready())
                await asyncio.sleep(until_tick(interval))  # with the process's other chores
        finally:
            self.mark(False)
