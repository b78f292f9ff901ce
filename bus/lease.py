"""A time-bound lease as its holder sees it (sans-I/O; PROTOCOL.md 10.2).

A lease is a key in a store that forgets it ``ttl`` seconds after it was last written (a
JetStream key-value bucket with that ``max_age``): whoever creates the key holds the lease and
keeps it by writing it again, each write conditional on the revision it wrote before. The
store counts the ``ttl`` from when a write *arrived*; the holder can only count from when it
*sent* the write, which is earlier. So the holder trusts its lease until ``ttl - margin`` after
it sent the last write that the store confirmed, and must stop acting on it (stop writing the
journal) from then on, whether or not it has heard that somebody else took the key: by the
time the store lets another process create the key, the holder has already stopped.

:class:`LeaseTerm` keeps that arithmetic; the clock is an argument (monotonic seconds). The
driver is :mod:`bus.asyncio.nats_lease`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bus.errors import ConfigError

__all__ = ["DEFAULT_LEASE_TTL", "LeaseTerm"]

#: Seconds a lease outlives its holder's last renewal (the recorder's ``--lease``).
DEFAULT_LEASE_TTL = 5.0


@dataclass
class LeaseTerm:
    """When a lease held since the last confirmed write is valid, and when to renew it.

    Args:
        ttl: seconds the store keeps the key after a write.
        renewals: how many renewals fit in one ``ttl`` (default 5: one a second for 5 s).
        margin: the part of ``ttl`` the holder gives up for delays between sending a write and
            the store stamping it, and for clocks that run at slightly different rates
            (default 10 %, at least 0.2 s).

    Raises:
        ConfigError: ``ttl`` under 1 s (nats-server expires keys no finer), or ``renewals``
            under 2.
    """

    ttl: float
    renewals: int = 5
    margin: float = -1.0
    _valid_until: float = field(default=-math.inf, init=False)
    _sent: float = field(default=-math.inf, init=False)

    def __post_init__(self) -> None:
        if not math.isfinite(self.ttl) or self.ttl < 1.0:
            raise ConfigError(f"lease ttl must be at least 1 s, not {self.ttl!r}")
        if self.renewals < 2:
            raise ConfigError("a lease needs at least 2 renewals per ttl")
        if self.margin < 0:
            self.margin = max(0.2, self.ttl / 10)

    @property
    def every(self) -> float:
        """Seconds between two renewals."""
        return self.ttl / self.renewals

    def granted(self, sent: float) -> None:
        """The store confirmed a write sent at ``sent``: the lease is held until
        ``sent + ttl - margin``."""
        self._sent = sent
        self._valid_until = max(self._valid_until, sent + self.ttl - self.margin)

    def lost(self) -> None:
        """The store refused a write (someone else holds the key), or we let it go."""
        self._valid_until = -math.inf
        self._sent = -math.inf

    def valid(self, now: float) -> bool:
        """Whether the holder may still act on the lease at ``now``."""
        return now < self._valid_until

    def remaining(self, now: float) -> float:
        """Seconds the lease is still valid (0 when it is not)."""
        return max(0.0, self._valid_until - now)

    def due(self, now: float) -> bool:
        """Whether a renewal should be sent at ``now``."""
        return now >= self._sent + self.every
