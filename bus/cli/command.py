"""Running a bus command: its exit code from what it raised, and its stop on a signal.

Exit codes: 0 success; 1 the bus said no (NAK, no responders, timeout, cannot connect), with one
line on stderr; 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from bus.asyncio.loop import run as run_main
from bus.errors import BusError, ConfigError, EncodeError

__all__ = ["BAD_INPUT", "stop_event", "sync", "until"]

#: Errors that mean the command line was wrong (exit code 2): a key=value word, a pattern, a
#: URL, a value that cannot travel (text outside Latin-1, an integer out of range).
BAD_INPUT = (ConfigError, EncodeError)


def sync(
    body: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    """A command's ``func``: run the coroutine ``body(args)``; what it raises becomes one line
    on stderr and the exit code (2 for :data:`BAD_INPUT`, 1 for another :class:`BusError`)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return run_main(body(args))
        except BAD_INPUT as exc:
            return _fail(str(exc), 2)
        except BusError as exc:
            return _fail(str(exc), 1)

    return run


def _fail(text: str, code: int) -> int:
    print(f"busgate: error: {_once(text)}", file=sys.stderr)
    return code


def _once(text: str) -> str:
    """The text with a repeated ``(close reason X)`` said once."""
    seen: set[str] = set()

    def keep_first(match: re.Match[str]) -> str:
        if match.group(0) in seen:
            return ""
        seen.add(match.group(0))
        return match.group(0)

    return re.sub(r" ?\(close reason [A-Z_]+\)", keep_first, text)


def stop_event() -> asyncio.Event:
    """An event set on SIGINT/SIGTERM, so long-running commands stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def until(source: Any, stop: asyncio.Event) -> Any:
    """Iterate ``source`` until ``stop`` is set."""
    iterator = source.__aiter__()
    stopper = asyncio.create_task(stop.wait())
    try:
        while True:
            nxt = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await nxt
                return
            try:
                yield nxt.result()
            except StopAsyncIteration:
                return
    finally:
        stopper.cancel()
