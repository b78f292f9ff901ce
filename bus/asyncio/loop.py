"""The event loop the command-line programs run on: uvloop when it is installed.

uvloop's transports and its loop are written in C (libuv): a message bus that spends most of
its time reading and writing small messages on sockets runs about twice as fast on it. It is
installed with ``uvicorn[standard]``; without it, or with ``BUSGATE_EVENT_LOOP=asyncio``, the
standard loop runs everything unchanged (the test suite runs on it, the CLI tests on uvloop).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar, cast

__all__ = [
    "EVENT_LOOP_VARIABLE",
    "MMAP_THRESHOLD",
    "TRIM_THRESHOLD",
    "loop_factory",
    "release_memory",
    "run",
    "settle_heap",
    "tune_allocator",
    "until_tick",
]

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


#: Blocks this large or larger come from their own mapping (glibc's ``M_MMAP_THRESHOLD``).
MMAP_THRESHOLD: Final = 1024 * 1024
#: Free memory at the top of the heap kept for reuse up to this much (``M_TRIM_THRESHOLD``).
TRIM_THRESHOLD: Final = 4 * 1024 * 1024
_M_TRIM_THRESHOLD: Final = -1  # malloc.h
_M_MMAP_THRESHOLD: Final = -3
#: glibc's own settings: a user who set them gets what they asked for.
_GLIBC_VARIABLES: Final = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_allocator() -> bool:
    """Keep the 256 KiB read buffer of every TLS read in the heap (glibc ``mallopt``).

    uvloop's TLS transport reads each record with ``SSLObject.read(256 KiB)``: a new bytes
    object of that size, cut down to what arrived. glibc serves a block that large
    from a fresh ``mmap`` (its threshold is 128 KiB), so every read cost an mmap, an mremap, a
    munmap and page faults: 95 us per small round trip over TLS against 31 with the block from
    the heap (measured on uvloop). Raising the thresholds serves it from the heap, and keeps
    the freed block there for the next read. Nothing happens off glibc or when the user set
    glibc's own variables.

    Returns:
        True when the thresholds were set.
    """
    if not sys.platform.startswith("linux") or any(v in os.environ for v in _GLIBC_VARIABLES):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library to ask, or one without mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return cast(Callable[[int], int], trim)


_TRIM: Final = _malloc_trim()


def release_memory() -> bool:
    """Give the free memory of the C heap back to the system (glibc ``malloc_trim(0)``).

    What a program frees returns to glibc's heap, not to the system: the heap shrinks only
    from its top, and only by free memory above ``TRIM_THRESHOLD``, so a burst that queued
    hundreds of megabytes of small messages leaves most of them resident after they are
    freed, held by the few blocks still in use above them. ``malloc_trim`` hands back every
    whole free page, wherever it lies (``MADV_DONTNEED``), in every arena. It takes a few
    milliseconds for a large heap: call it when a burst is over, not on the data path.

    Returns:
        True when memory was given back (False off glibc, or when there was none to give).
    """
    return bool(_TRIM is not None and _TRIM(0))


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a new loop (see the module docstring), with the
    allocator tuned for TLS reads (:func:`tune_allocator`).

    Args:
        main: the program's main coroutine.

    Returns:
        What it returned.
    """
    tune_allocator()
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


def until_tick(period: float) -> float:
    """Seconds from now to the next multiple of ``period`` on the running loop's clock.

    A process's periodic chores (a server's date header, a readiness flag, presence, the link's
    pings) each slept their own interval from their own start, so an idle process woke once
    for each of them: several times a second, with caches gone cold each time. Sleeping this
    long instead, chores of the same period (or of periods that divide each other) fall due at
    the same instant and run in one turn of the loop: one wake-up.

    Returns:
        A delay in ``(0, period]``.
    """
    now = asyncio.get_running_loop().time()
    return period - now % period or period
