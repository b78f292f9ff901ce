"""The broker's door and its memory (PROTOCOL.md 5.7), mixed into its driver.

:class:`Admitting` holds what :class:`bus.broker.server.Broker` does with the sans-I/O
:mod:`bus.broker.admission`: whether a new socket is taken (the throttle of failed logins, the
bound of sockets in their handshake per address), which socket goes when too many are logging
in, the in-process links (:meth:`Admitting.local_link`) that no door stands before; and with
the links' queues: the bound over all of them (the link holding the most is evicted) and the
memory given back to the system once a burst is over.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any, Final, cast

from bus.asyncio.loop import release_memory
from bus.broker.admission import IN_PROCESS, LoginThrottle, PendingSockets, RefusalLog
from bus.broker.config import BrokerConfig
from bus.broker.link import Link, Owner
from bus.errors import ConnectError
from bus.frame.enums import CloseReason

__all__ = ["Admitting"]

log = logging.getLogger("bus.broker")

#: Memory is given back once queues this much above their level now have drained, or after
#: this much traffic once the broker falls quiet; at most every _RELEASE_GAP seconds.
_RELEASE_AFTER: Final = 16 * 1024 * 1024
_RELEASE_GAP: Final = 5.0


class Admitting:
    """The door and the queues' memory of :class:`bus.broker.server.Broker`."""

    config: BrokerConfig
    stats: dict[str, int]
    throttle: LoginThrottle
    queued_total: int
    queued_peak: int
    _links: dict[int, Link]
    _pending: PendingSockets
    _refusals: RefusalLog
    _registered: int
    _stopping: bool
    _server: Any
    _released_at: tuple[float, int]
    _traffic_seen: int

    def _evict(self, link: Link, why: str = "output queue full") -> None:
        raise NotImplementedError  # the broker's

    # -- the door ------------------------------------------------------------------------------

    def _admits(self, peer: str) -> bool:
        """Whether a new socket from ``peer`` is taken (else: CONNECTION_REFUSED at once)."""
        if self._stopping or self._registered >= self.config.max_connections:
            return False
        if peer == IN_PROCESS:  # this process's own (local_link): its address is no one's
            return True
        now = time.monotonic()
        if self.throttle.refused(peer, now):
            self._log_refusal(peer, now, "too many failed logins in a minute")
            return False
        if self._pending.full(peer):
            limit = self.config.max_pending_per_address
            self._log_refusal(peer, now, f"{limit} of its sockets have not logged in yet")
            return False
        return True

    def _log_refusal(self, peer: str, now: float, why: str) -> None:
        if self._refusals.due(peer, now):
            log.warning("sockets from %s refused: %s (logged once a minute)", peer, why)

    async def local_link(self, office: str | None = None) -> socket.socket:
        """A link into this broker from inside its process: the client's end of a connected
        socket pair whose other end the broker has taken as a link (plain, whatever TLS the
        listener speaks). Its address is :data:`~bus.broker.admission.IN_PROCESS`: the door's
        throttles and per-address bounds are not its (the MOP listener opens its post offices'
        bus clients this way, so the failed logins of others on the broker's own host cannot
        lock them out). It logs in as any client does, or, with ``office``, as that post office
        with ``mode`` ``tls`` and no secret, as a client certificate would name it: the
        broker's own process vouches for it (its Object System bridge).

        Raises:
            ConnectError: the broker is not running.
        """
        if self._server is None or self._stopping:
            raise ConnectError("the broker is not running")
        ours, theirs = socket.socketpair()
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: Link(cast(Owner, self), local=True, vouched=office), ours
            )
        except OSError as exc:
            theirs.close()
            ours.close()
            raise ConnectError(f"no in-process link: {exc}") from exc
        return theirs

    def _pending_handshake(self, link: Link) -> None:
        """Count a socket in its handshake; past the bound, the oldest socket of the address
        holding the most is closed, so a flood of sockets that never log in (from one address
        or a few) cannot keep those that do out. An in-process link is not counted."""
        if link.local:
            return
        for number in self._pending.add(link.number, link.peer):
            oldest = self._links.get(number)
            if oldest is not None and oldest.conn is not None:
                oldest.conn.close(
                    CloseReason.TIMEOUT, "handshake not finished: too many sockets logging in"
                )
                oldest.drain_events()

    # -- the queues' memory --------------------------------------------------------------------

    def _over_total(self) -> Link | None:
        """The links' queues together passed ``max_total_queue_bytes``: evict the link holding
        the most (returned), so the broker's memory stays bounded however many fall behind."""
        biggest = max(self._links.values(), key=lambda link: link.queued, default=None)
        if biggest is None or not biggest.queued:
            return None
        limit = self.config.max_total_queue_bytes
        self._evict(biggest, f"the links' queues passed {limit} bytes and it held the most")
        return biggest

    def _release_memory(self, now: float) -> None:
        """After a burst, give the freed memory back to the system (``malloc_trim``): when
        queues that came to at least :data:`_RELEASE_AFTER` bytes more than now have drained,
        or the broker falls quiet after that much traffic; at most every few seconds."""
        at, moved = self._released_at
        if now - at < _RELEASE_GAP:
            return
        traffic = self.stats["bytes_in"] + self.stats["bytes_out"]
        drained = self.queued_peak - self.queued_total >= _RELEASE_AFTER
        quiet = traffic - moved >= _RELEASE_AFTER and traffic == self._traffic_seen
        self._traffic_seen = traffic
        if drained or quiet:
            self.queued_peak = self.queued_total
            self._released_at = (now, traffic)
            release_memory()
