"""Who may open a socket to the broker: failed logins counted per address (sans-I/O).

A client that keeps sending a wrong secret (or names a post office that does not exist) is
refused at the door for a while, so guessing secrets costs the guesser, not the broker, and a
flood of such attempts does not crowd out clients that log in. Time is an argument; the
driver (:mod:`bus.broker.server`) passes ``time.monotonic()``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Final

__all__ = ["AUTH_FAILURE_WINDOW_S", "MAX_ADDRESSES", "LoginThrottle"]

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
