"""One loop timer for the keepalives of every idle connection (PROTOCOL.md 9.5, 6.8).

The driver of :class:`gateway.events.wheel.TimerWheel`: SSE streams (their ``: keepalive`` comment;
``/ws`` pings may follow) put themselves in the running loop's :class:`Keepalives` with the
time they next need looking at.
One loop timer wakes once per slot that holds anything; each connection due then is asked
:meth:`Keepalive.keepalive_due` and says when it wants to be asked again, or ``None`` when it is
gone. An idle connection costs no timer, task or wake-up of its own.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Final, Generic, Protocol, TypeVar

from gateway.events.wheel import TimerWheel

__all__ = ["Keepalive", "Keepalives", "PassPerSlot", "keepalives", "tick_for"]

log = logging.getLogger("busgate.gateway")

T = TypeVar("T")

#: The widest slot: a keepalive is at most this late.
MAX_TICK: Final = 1.0


class Keepalive(Protocol):
    """A connection with a keepalive."""

    def keepalive_due(self, now: float) -> float | None:
        """Do what is due at ``now`` (``loop.time()``); the next time to be asked, or ``None``:
        gone (it is forgotten)."""
        ...  # pragma: no cover


class Keepalives:
    """The keepalives of one loop's connections, in one wheel, behind one timer.

    Args:
        loop: the loop whose clock and timer it uses.
        tick: the wheel's slot width in seconds.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, tick: float) -> None:
        self.loop = loop
        self.wheel: TimerWheel[Keepalive] = TimerWheel(tick)
        self._timer: asyncio.TimerHandle | None = None
        self._when = 0.0

    def __len__(self) -> int:
        return len(self.wheel)

    def add(self, owner: Keepalive, due: float) -> None:
        """Ask ``owner`` at ``due`` (``loop.time()``; up to a tick later)."""
        self.wheel.add(owner, due)
        self._arm()

    def _arm(self) -> None:
        when = self.wheel.next_due()
        if when is None:
            return
        if self._timer is not None:
            if self._when <= when:
                return
            self._timer.cancel()
        self._when = when
        self._timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = max(self.loop.time(), self._when)  # a timer may fire a clock tick early
        for owner in self.wheel.pop_due(now):
            try:
                again = owner.keepalive_due(now)
            except Exception:  # a bug must cost that connection alone, never the others
                log.exception("keepalive of %r failed", owner)
                continue
            if again is not None:
                self.wheel.add(owner, max(again, now))
        self._arm()


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, Keepalives]] = (
    weakref.WeakKeyDictionary()
)


def tick_for(interval: float) -> float:
    """The slot width for keepalives every ``interval`` seconds: a second; a quarter of the
    interval for shorter ones, as tests use."""
    return MAX_TICK if interval >= 4 * MAX_TICK else max(0.01, interval / 4)


def keepalives(interval: float) -> Keepalives:
    """The running loop's :class:`Keepalives` for connections that keep alive every
    ``interval`` seconds: one per loop in service (slots of :func:`tick_for` the interval)."""
    loop = asyncio.get_running_loop()
    tick = tick_for(interval)
    wheels = _LOOPS.setdefault(loop, {})
    wheel = wheels.get(tick)
    if wheel is None:
        wheel = wheels[tick] = Keepalives(loop, tick)
    return wheel


class PassPerSlot(Generic[T]):
    """Connections kept alive in one pass per slot: a :class:`TimerWheel` of their own, itself a
    single entry of the running loop's :class:`Keepalives` while it holds any (the SSE
    keepalives, :mod:`gateway.events.sse_keepalives`; the ``/ws`` pings,
    :mod:`gateway.websocket.ws_pings`). A subclass's ``keepalive_due`` walks
    ``self.wheel.pop_due(now)`` and ends with ``return self.next_due()``.

    Args:
        interval: seconds between two keepalives of a connection (> 0).
    """

    __slots__ = ("_armed", "interval", "wheel")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.wheel: TimerWheel[T] = TimerWheel(tick_for(interval))
        self._armed: Keepalives | None = None  # the loop's wheel it is in, while it is

    def __len__(self) -> int:
        return len(self.wheel)

    def add(self, item: T, now: float) -> None:
        """Keep ``item`` alive from ``now`` (``loop.time()``; the running loop's clock) on."""
        due = now + self.interval
        self.wheel.add(item, due)
        loop_wheel = keepalives(self.interval)
        if self._armed is not loop_wheel:  # not yet, or armed in a loop that is gone
            self._armed = loop_wheel
            loop_wheel.add(self, due)  # type: ignore[arg-type]  # a subclass has keepalive_due

    def next_due(self) -> float | None:
        """When the pass is due again (None: nothing is left, and the loop's wheel forgets it)."""
        due = self.wheel.next_due()
        if due is None:
            self._armed = None
        return due
