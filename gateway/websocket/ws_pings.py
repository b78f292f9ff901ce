"""The keepalive pings of an endpoint's lean ``/ws`` clients, written in one pass (PROTOCOL.md 6.8).

A silent client is found by the WebSocket's own ping/pong: every ``ws_ping_interval`` seconds
each client gets a ping, and a client whose pong has not come by its next ping (and at least
``ws_ping_timeout`` seconds after the ping) is closed with 1011. At 20,000 clients and 25 s that is
800 pings and 800 pongs a second, and what the gateway does per ping is most of what it does
when every client is idle (issue 35). :class:`Pings` keeps an endpoint's clients in a timer
wheel of its own (:class:`gateway.events.wheel.TimerWheel`) and is a single entry of the loop's
(:class:`gateway.events.keepalives.Keepalives`), as the SSE keepalives are
(:mod:`gateway.events.sse_keepalives`): when a slot is due, one loop walks its clients, closes
those whose pong did not come and writes one ping frame (built once per pass) to each of the
others; those go back in one slot with one ``extend``. No call per client beyond the write and
no timer per client. A pong costs the client's protocol one flag (:attr:`Pinged.answered`):
any pong since the ping answers it (each pass's payload is new, but a client has one ping
outstanding at a time).

A client that is gone or closing is dropped when its slot comes (it costs nothing to leave).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Final, Protocol

from gateway.events.keepalives import PassPerSlot

__all__ = ["PING_HEAD", "Pinged", "Pings"]

log = logging.getLogger("busgate.gateway.ws")

#: A ping frame's head: FIN, opcode 0x9, an unmasked payload of 4 bytes (RFC 6455 5.5.2).
PING_HEAD: Final = b"\x89\x04"


class Pinged(Protocol):
    """A client as the pass sees it (:class:`gateway.websocket.lean.LeanWebSocket`)."""

    #: A pong came since its last ping (True before the first).
    answered: bool
    transport: asyncio.Transport

    @property
    def pinged(self) -> bool:
        """Open (not closing or closed): it gets pings."""
        ...  # pragma: no cover

    def ping_unanswered(self) -> None:
        """Its pong did not come in time: close it (1011)."""
        ...  # pragma: no cover


class Pings(PassPerSlot[Pinged]):
    """Pings every client every ``interval`` seconds, one pass per slot.

    Args:
        interval: seconds between two pings of a client (``ws_ping_interval``, > 0).
        timeout: seconds a pong may take at least (``ws_ping_timeout``): a client is looked
            at again at the later of both; None: pings, and no client is closed for want of a
            pong (uvicorn's meaning).
    """

    __slots__ = ("closes", "period", "_round")

    def __init__(self, interval: float, timeout: float | None) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0, not {interval!r}")
        super().__init__(interval)
        self.period = max(interval, timeout or 0.0)
        self.closes = timeout is not None
        self._round = 0

    def frame(self) -> bytes:
        """The next pass's ping frame: a payload no earlier pass of the last 2**32 had."""
        self._round = (self._round + 1) & 0xFFFFFFFF
        return PING_HEAD + struct.pack("!I", self._round)

    def keepalive_due(self, now: float) -> float | None:
        """The pass (the loop's wheel calls it when the earliest slot is due): close each due
        client whose pong did not come, ping the others; when to be called again (None: no
        client is left)."""
        wheel, closes = self.wheel, self.closes
        frame = self.frame()
        again: list[Pinged] = []
        for client in wheel.pop_due(now):
            if not client.pinged:
                continue
            try:
                if not client.answered and closes:
                    client.ping_unanswered()
                    continue
                client.answered = False
                client.transport.write(frame)  # between whole frames: any time
            except Exception:  # one broken client must cost that client alone
                log.exception("keepalive ping to %r failed", client)
                continue
            again.append(client)
        if again:
            wheel.add_all(again, now + self.period)
        return self.next_due()
