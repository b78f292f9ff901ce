"""Run a coroutine's first step now; make a task only if it has to wait.

A service answers most requests without waiting for anything (an echo, a lookup): wrapping each
in an ``asyncio.Task`` costs a task object, a loop iteration before it starts and another before
its answer is written. :func:`start` runs the coroutine at once, as Python 3.12's eager task
factory does; only a coroutine that suspends is handed to a task, which goes on exactly where it
stopped (the future it awaits is awaited for it; a cancellation of the task is thrown into it).

A caller that runs the first step itself (a service running its handler's coroutine once:
bus/asyncio/serving.py) hands the outcome on as an awaitable: :class:`Resumed` goes on with a
coroutine that waits, :class:`Done` and :class:`Failed` are what one that finished gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from contextvars import Context
from typing import Any

__all__ = ["Done", "Failed", "Resumed", "start"]


def start(
    coro: Coroutine[Any, Any, None], name: str | None = None, context: Context | None = None
) -> asyncio.Task[None] | None:
    """Run ``coro`` until it finishes or first waits.

    Args:
        coro: the coroutine.
        name: the task's name, if one is made.
        context: run it all in this context (its first step and the task), as
            ``create_task(..., context=)`` does; None: the current one (copied by the task).

    Returns:
        None when it finished (its exception, if any, is raised here), else the task that runs
        the rest of it.
    """
    try:
        awaited = coro.send(None) if context is None else context.run(coro.send, None)
    except StopIteration:
        return None
    loop = asyncio.get_running_loop()
    return loop.create_task(_resume(coro, awaited), name=name, context=context)


async def _resume(coro: Coroutine[Any, Any, None], awaited: Any) -> None:
    """Go on with a coroutine suspended on ``awaited`` (what its await yielded)."""
    while True:
        try:
            if awaited is None:  # a bare yield (asyncio.sleep(0)): let the loop run once
                await asyncio.sleep(0)
            else:
                await _Wait(awaited)
        except BaseException as exc:  # our own cancellation: it is the coroutine's to handle
            try:
                awaited = coro.throw(exc)
            except StopIteration:
                return
            continue
        try:
            awaited = coro.send(None)
        except StopIteration:
            return


class _Wait:
    """Await the future another coroutine yielded, without taking its result (it takes it)."""

    __slots__ = ("future",)

    def __init__(self, future: Any) -> None:
        self.future = future

    def __await__(self) -> Generator[Any, None, None]:
        if not self.future.done():
            yield self.future


class Done:
    """What a coroutine that finished returned: awaited, it is that value (at once)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator that never waits


class Failed:
    """What a coroutine that failed raised: awaited, it is raised again (at once)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __await__(self) -> Generator[Any, None, Any]:
        raise self.error
        yield  # a generator that never waits


class Resumed:
    """A coroutine that was run until it waited on ``awaited`` (what its ``send`` returned):
    awaited, it goes on from there as ``await coro`` would have (the task awaiting this waits
    on what it waits on, a cancellation is thrown into it) and gives what it returns."""

    __slots__ = ("awaited", "coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], awaited: Any) -> None:
        self.coro = coro
        self.awaited = awaited

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, awaited = self.coro, self.awaited
        while True:
            try:
                sent = yield awaited
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in: the coroutine's to handle
                try:
                    awaited = coro.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                awaited = coro.send(sent)
            except StopIteration as done:
                return done.value
