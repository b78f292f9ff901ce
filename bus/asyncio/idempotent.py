"""A service's answers to idempotent requests, kept to answer a repeat (PROTOCOL.md 5.17).

A request whose MID is a name-based UUID (:func:`bus.idempotency.is_derived`: what a gateway
makes from an ``Idempotency-Key``) is run once: :class:`RecentAnswers` keeps its responses for
:data:`bus.idempotency.WINDOW` seconds (at most :data:`ENTRIES` requests), and a repeat of that
MID, from any gateway, gets them again, sent to its own ``RPY``, without the handler running;
a repeat that arrives while the first still runs waits for its answers. A repeat with a
different payload is answered ``NAK`` 409 (:data:`bus.idempotency.CONFLICT`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from bus.idempotency import WINDOW, digest
from bus.message.message import Message

__all__ = ["ENTRIES", "Recent", "RecentAnswers"]

#: Requests whose answers a service keeps at most (the oldest forgotten first).
ENTRIES: Final = 10_000


@dataclass
class Recent:
    """One idempotent request: what it was, its answers, whether they are all in."""

    digest: str
    at: float
    responses: list[Message] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class RecentAnswers:
    """The answers of recent idempotent requests, by MID.

    Args:
        window: seconds an answer is kept.
        entries: requests kept at most.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        window: float = WINDOW,
        entries: int = ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.entries = entries
        self.clock = clock
        self.replayed = 0  # repeats answered from here
        self._recent: OrderedDict[str, Recent] = OrderedDict()

    def begin(self, message: Message) -> tuple[Recent, bool | None]:
        """Look a request up: ``(entry, True)`` a repeat (wait for ``entry.done``, then send
        its responses again), ``(entry, False)`` a new one (run it, record its responses in
        ``entry.responses``, then :meth:`finish`), ``(entry, None)`` a repeat with another
        payload (answer 409)."""
        now = self.clock()
        self._forget(now)
        mid = message.mid or ""
        wanted = digest(message.payload_data())
        seen = self._recent.get(mid)
        if seen is not None:
            return seen, True if seen.digest == wanted else None
        entry = self._recent[mid] = Recent(wanted, now)
        while len(self._recent) > self.entries:
            self._recent.popitem(last=False)
        return entry, False

    @staticmethod
    def finish(entry: Recent) -> None:
        """The request's answers are all in (or it failed: what was sent is what a repeat
        gets)."""
        entry.done.set()

    def again(self, entry: Recent, request: Message) -> list[Message]:
        """The responses of ``entry`` addressed to ``request`` (its ``RPY`` may be another
        gateway's inbox)."""
        self.replayed += 1
        answers = []
        for response in entry.responses:
            if response.grp != request.rpy:
                response = Message(response.frame.copy())
                response.grp = request.rpy
            answers.append(response)
        return answers

    def _forget(self, now: float) -> None:
        recent = self._recent
        while recent:
            oldest = next(iter(recent.values()))
            if now - oldest.at < self.window or not oldest.done.is_set():
                return
            recent.popitem(last=False)
