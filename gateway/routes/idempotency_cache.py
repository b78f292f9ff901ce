"""Each ``Idempotency-Key``'s body digest and first outcome, kept by one gateway (PROTOCOL.md
9.12). The routes that use it are in :mod:`gateway.routes.idempotency`; the cache is apart so that
the
gateway's state (:mod:`gateway.state`) holds it without importing the routes."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["ENTRIES", "IdempotencyCache", "Outcome"]

#: Keys a gateway remembers at most (the oldest forgotten first).
ENTRIES: Final = 10_000


@dataclass(frozen=True)
class Outcome:
    """An answer as it was sent: status, headers (besides ``content-length``), body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


@dataclass
class _Entry:
    digest: str
    at: float
    outcome: Outcome | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class IdempotencyCache:
    """Each key's body digest and first outcome (keys are ``(caller, route, key)``).

    Args:
        window: seconds an outcome is kept.
        entries: keys kept at most.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        window: float,
        entries: int = ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.entries = entries
        self.clock = clock
        self._keys: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()

    def begin(self, key: tuple[str, str, str], wanted: str) -> tuple[_Entry, bool | None]:
        """``(entry, False)``: new, answer it and :meth:`settle`; ``(entry, True)``: a repeat,
        wait for ``entry.done``; ``(entry, None)``: a repeat with another body (409)."""
        now = self.clock()
        keys = self._keys
        while keys:  # the expired ones first (the oldest are first)
            oldest = next(iter(keys.values()))
            if now - oldest.at < self.window or not oldest.done.is_set():
                break
            keys.popitem(last=False)
        seen = keys.get(key)
        if seen is not None:
            return seen, True if seen.digest == wanted else None
        entry = keys[key] = _Entry(wanted, now)
        while len(keys) > self.entries:
            keys.popitem(last=False)
        return entry, False

    def settle(self, key: tuple[str, str, str], entry: _Entry, outcome: Outcome | None) -> None:
        """The first attempt's outcome (None: not one to keep; the key is free again)."""
        entry.outcome = outcome
        if outcome is None and self._keys.get(key) is entry:
            del self._keys[key]
        entry.done.set()
