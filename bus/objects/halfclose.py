"""The answers a half-closed Object System client still waits for (asyncio).

A client may half-close its connection right after its ``services/request`` objects; the
server keeps writing to it until each request has its final answer (a ``services/reply``
without ``more``, or an ``error``), or until a timeout. :class:`OwedAnswers` keeps the ids
of those requests per connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Final

from bus.objects.codec import BusinessObject

__all__ = ["DEFAULT_HALF_CLOSE_TIMEOUT", "OwedAnswers"]

log = logging.getLogger("bus.objects.tcp")  # the driver's logger, as before the split

DEFAULT_HALF_CLOSE_TIMEOUT: Final = 60.0


class OwedAnswers:
    """Ids of ``services/request`` objects each connection still waits for."""

    def __init__(self) -> None:
        #: request ids owed, per connection (empty: :meth:`delivered` has nothing to do)
        self.pending: dict[Hashable, set[str]] = {}
        self._answered: dict[Hashable, asyncio.Event] = {}

    def received(self, conn: Hashable, obj: BusinessObject) -> None:
        """Connection ``conn`` sent ``obj``: a request is owed its answer."""
        # metadata.get: the event property's work, for every object routed
        if obj.metadata.get("event") == "services/request" and isinstance(obj.id, str):
            self.pending.setdefault(conn, set()).add(obj.id)

    def delivered(self, conn: Hashable, obj: BusinessObject) -> None:
        """``obj`` went to ``conn``: strike off what it answers finally (a reply without
        ``more``, or an error)."""
        if conn not in self.pending:
            return
        metadata = obj.metadata
        if obj.event not in ("services/reply", "error") or metadata.get("more") is True:
            return
        owed = self.pending[conn]
        owed.discard(metadata.get("in-reply-to"))
        if not owed:
            del self.pending[conn]
            answered = self._answered.get(conn)
            if answered is not None:
                answered.set()

    def forget(self, conn: Hashable) -> None:
        """Connection ``conn`` is gone: nothing is owed to it, and it stops waiting."""
        self.pending.pop(conn, None)
        answered = self._answered.pop(conn, None)
        if answered is not None:
            answered.set()  # a half-closed connection waiting for answers stops waiting

    async def wait(self, conn: Hashable, timeout: float) -> None:
        """The client half-closed: wait until it has its answers (or ``timeout`` seconds)."""
        if not self.pending.get(conn):
            return
        answered = self._answered.setdefault(conn, asyncio.Event())
        try:
            async with asyncio.timeout(timeout):
                await answered.wait()
        except TimeoutError:
            log.info(
                "object connection %s half-closed: %d answers still owed after %g s, closing",
                conn,
                len(self.pending.get(conn, ())),
                timeout,
            )
