"""Reconnection delays: exponential with jitter, sans-I/O (``docs/PROTOCOL.md`` 5.8)."""

from __future__ import annotations

import random
from collections.abc import Callable

from bus.errors import ConfigError

__all__ = ["Backoff"]


class Backoff:
    """Reconnection delays: exponential with jitter, sans-I/O (the random draw is an argument).

    The ``n``-th delay (from 0) is drawn uniformly from ``[c/2, c]`` where
    ``c = min(maximum, initial * 2**n)``: the upper half, so clients that lost the same broker
    do not all come back at the same instant, and never less than half the schedule.

    Args:
        initial: the first ceiling, seconds (MOP's reconnect delay, 0.5).
        maximum: the largest ceiling, seconds.

    Raises:
        ConfigError: ``initial`` <= 0 or ``maximum`` < ``initial``.
    """

    def __init__(self, initial: float = 0.5, maximum: float = 5.0) -> None:
        if initial <= 0 or maximum < initial:
            raise ConfigError(f"bad backoff: initial {initial} must be > 0 and <= max {maximum}")
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0

    def ceiling(self) -> float:
        """The upper bound of the next delay."""
        # 2.0**1000 is a float: a days-long outage never overflows the schedule.
        return min(self.maximum, self.initial * 2.0 ** min(self.attempt, 1000))

    def next_delay(self, draw: Callable[[float, float], float] = random.uniform) -> float:
        """The next delay, seconds; each call moves one step up the schedule.

        Args:
            draw: ``draw(low, high)`` picks a number in ``[low, high]`` (default uniform).
        """
        ceiling = self.ceiling()
        self.attempt += 1
        return draw(ceiling / 2, ceiling)

    def reset(self) -> None:
        """Start the schedule over (after a successful connection)."""
        self.attempt = 0
