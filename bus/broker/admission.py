"""Who may open a socket to the broker, and who waits in the handshake (sans-I/O).

- :class:`LoginThrottle`: failed logins counted per address. A client that keeps sending a
  wrong secret (or names a post office that does not exist) is refused at the door for a
  while, so guessing secrets costs the guesser, not the broker, and a flood of such attempts
  does not crowd out clients that log in. Time is an argument; the driver
  (:mod:`bus.broker.server`) passes ``time.monotonic()``.
- :class:`PendingSockets`: the sockets still in their handshake, per address. One address may
  hold only so many (its next sockets are refused at the door), and when the broker's bound is
  reached the socket that goes is the oldest of the address holding the most, never the only
  socket of another: a sustained flood of idle sockets from one address (or a few) cannot
  starve the logins from the others, however slowly those log in (PROTOCOL.md 5.7).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Final

__all__ = [
    "AUTH_FAILURE_WINDOW_S",
    "IN_PROCESS",
    "MAX_ADDRESSES",
    "LoginThrottle",
    "PendingSockets",
    "RefusalLog",
]

#: The address of a link opened inside the broker's process (``Broker.local_link``: the MOP
#: listener's post offices): never throttled, never counted against an address.
IN_PROCESS: Final = "in-process"

#: Failed logins older than this many seconds no longer count.
AUTH_FAILURE_WINDOW_S: Final = 60.0
#: Addresses remembered at most (the least recently failed is forgotten first), so a spoofed
#: address flood cannot grow the broker's memory.
MAX_ADDRESSES: Final = 10_000


class LoginThrottle:
    """Counts failed logins per address within :data:`AUTH_FAILURE_WINDOW_S`.

    Args:
        limit: failed logins one address may make in the window; at ``limit`` its new sockets
            are refused until the oldest failure leaves the window (0: never refused).
        window: the window, in seconds.
        addresses: how many addresses are remembered at most.
    """

    def __init__(
        self, limit: int, window: float = AUTH_FAILURE_WINDOW_S, addresses: int = MAX_ADDRESSES
    ) -> None:
        self.limit = limit
        self.window = window
        self.addresses = addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def failed(self, address: str, now: float) -> None:
        """Record one failed login from ``address``."""
        if self.limit <= 0:
            return
        times = self._failures.pop(address, None)
        if times is None:
            times = deque(maxlen=self.limit)
        times.append(now)
        self._failures[address] = times  # most recent last
        while len(self._failures) > self.addresses:
            self._failures.popitem(last=False)

    def refused(self, address: str, now: float) -> bool:
        """Whether a new socket from ``address`` is refused (too many recent failures)."""
        times = self._failures.get(address)
        if times is None:
            return False
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times:
            del self._failures[address]
            return False
        return len(times) >= self.limit

    def __len__(self) -> int:
        """How many addresses have failures on record."""
        return len(self._failures)


class PendingSockets:
    """The sockets still in their handshake, by number, with the address each came from.

    Args:
        limit: sockets in their handshake at once, in all; past it :meth:`add` names the ones
            to close.
        per_address: sockets one address may have in their handshake at once
            (:meth:`full`: its next socket is refused at the door).
    """

    def __init__(self, limit: int, per_address: int) -> None:
        self.limit = limit
        self.per_address = per_address
        self._by_address: dict[str, dict[int, None]] = {}  # oldest first, per address
        self._address_of: dict[int, str] = {}

    def full(self, address: str) -> bool:
        """Whether ``address`` already holds :attr:`per_address` sockets in their handshake."""
        return len(self._by_address.get(address, ())) >= self.per_address

    def add(self, number: int, address: str) -> list[int]:
        """Count a new socket; returns the sockets to close now (past :attr:`limit`): each the
        oldest of the address that holds the most (of those, the one waiting longest)."""
        self._by_address.setdefault(address, {})[number] = None
        self._address_of[number] = address
        gone: list[int] = []
        while len(self._address_of) > self.limit:
            # the address holding the most; among equals, the one whose oldest socket is oldest
            held = max(self._by_address.values(), key=lambda held: (len(held), -next(iter(held))))
            oldest = next(iter(held))
            self.remove(oldest)
            gone.append(oldest)
        return gone

    def remove(self, number: int) -> None:
        """Forget a socket (logged in, closed or closed here); unknown numbers are ignored."""
        address = self._address_of.pop(number, None)
        if address is None:
            return
        held = self._by_address[address]
        del held[number]
        if not held:
            del self._by_address[address]

    def holds(self, address: str) -> int:
        """How many sockets ``address`` has in their handshake."""
        return len(self._by_address.get(address, ()))

    def __len__(self) -> int:
        """Sockets in their handshake, in all."""
        return len(self._address_of)


class RefusalLog:
    """When to log a refusal at the door: once per address per :attr:`interval` seconds, so a
    flood does not flood the log (at most :data:`MAX_ADDRESSES` remembered)."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._logged: dict[str, float] = {}

    def due(self, address: str, now: float) -> bool:
        """Whether a refusal of ``address`` at ``now`` is to be logged (and remember it)."""
        last = self._logged.get(address)
        if last is not None and now - last < self.interval:
            return False
        if len(self._logged) >= MAX_ADDRESSES:
            self._logged.clear()
        self._logged[address] = now
        return True
