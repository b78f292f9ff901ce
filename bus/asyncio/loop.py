"""The event loop the command-line programs run on: uvloop when it is installed.

uvloop's transports and its loop are written in C (libuv): a message bus that spends most of
its time reading and writing small messages on sockets runs about twice as fast on it. It is
installed with ``uvicorn[standard]``; without it, or with ``BUSGATE_EVENT_LOOP=asyncio``, the
standard loop runs everything unchanged (the test suite runs on it, the CLI tests on uvloop).
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

__all__ = ["EVENT_LOOP_VARIABLE", "loop_factory", "run", "settle_heap"]

T = TypeVar("T")

#: ``asyncio`` forces the standard loop; ``uvloop`` (or unset) takes uvloop when installed.
EVENT_LOOP_VARIABLE: Final = "BUSGATE_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop to run on, or None for the standard one."""
    if os.environ.get(EVENT_LOOP_VARIABLE, "uvloop").lower() == "asyncio":
        return None
    try:
        import uvloop  # noqa: PLC0415  (optional)
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a new loop (see the module docstring).

    Args:
        main: the program's main coroutine.

    Returns:
        What it returned.
    """
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def settle_heap() -> int:
    """Once a long-running program has started: collect, then keep everything alive now (the
    modules, the app, its tables) out of the cyclic collector's passes (``gc.freeze``).

    Every full collection walks every object; the gateway holds some 40,000 after start-up, a
    walk of 25-35 ms on a small machine, paid every few seconds under load (objects in flight
    are promoted, and their count against the old ones triggers it). Frozen, a full pass walks
    only what was made since. Refcounting still frees frozen objects; only cycles among them
    are never collected, and start-up leaves none behind (it is collected first).

    Returns:
        How many objects were frozen.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
