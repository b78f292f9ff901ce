"""uvicorn's server woken once a second instead of ten times (PROTOCOL.md 9.1; issue 35 goal 1).

uvicorn's ``Server.main_loop`` sleeps 0.1 s at a time to see whether it should exit and to
refresh the ``date`` header once a second: ten wake-ups a second in every gateway process, with
or without clients, the largest part of an idle gateway's CPU (0.37 % of a core measured with
no client at all). :class:`QuietServer` waits a second at a time instead (the ``date`` header is
refreshed as often as before), and a request to exit (``should_exit = True``, from a signal
handler, a test or another thread) wakes it at once, so stopping is no slower.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import uvicorn

from bus.asyncio.loop import until_tick

__all__ = ["TICK_S", "QuietServer"]

#: Seconds between two of the server's own wake-ups.
TICK_S: Final = 1.0
#: uvicorn counts ticks of 0.1 s and refreshes the date header every tenth.
_TICKS_PER_S: Final = 10


class QuietServer(uvicorn.Server):
    """A ``uvicorn.Server`` whose main loop wakes once a second, or at once when told to exit."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = False
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        """Whether the server should stop; setting it wakes the main loop."""
        return self._exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit = value
        wake, loop = self._wake, self._loop
        if not value or wake is None or loop is None:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            wake.set()
        else:  # another thread (a test's, a signal handler's thread): the loop's own turn
            with contextlib.suppress(RuntimeError):  # that loop is closed: nothing to wake
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _TICKS_PER_S) % 864000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(until_tick(TICK_S)):
                    await self._wake.wait()
            should_exit = await self.on_tick(counter)
