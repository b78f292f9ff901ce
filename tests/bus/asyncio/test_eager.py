"""bus/asyncio/eager.py: a coroutine runs at once, and goes on in a task only when it waits."""

from __future__ import annotations

import asyncio

import pytest

from bus.asyncio.eager import start


async def test_a_coroutine_that_never_waits_runs_now_without_a_task() -> None:
    seen: list[str] = []

    async def quick() -> None:
        seen.append("ran")

    assert start(quick()) is None
    assert seen == ["ran"]  # before any loop iteration


async def test_an_error_in_the_first_step_is_raised_at_once() -> None:
    async def broken() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        start(broken())


async def test_a_coroutine_that_waits_goes_on_in_a_task_with_the_awaited_result() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[object] = []

    async def waits() -> None:
        seen.append("before")
        seen.append(await gate)
        await asyncio.sleep(0)  # a bare yield too
        seen.append(await asyncio.create_task(asyncio.sleep(0, "from a task")))

    task = start(waits())
    assert task is not None and seen == ["before"]
    gate.set_result(7)
    await asyncio.wait_for(task, 5)
    assert seen == ["before", 7, "from a task"]


async def test_an_error_after_waiting_ends_the_task_with_it() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def fails_later() -> None:
        await gate
        raise KeyError("later")

    task = start(fails_later())
    assert task is not None
    gate.set_exception(RuntimeError("from the future"))
    with pytest.raises(RuntimeError, match="from the future"):
        await task


async def test_cancelling_the_task_cancels_the_wait_and_reaches_the_coroutine() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def guarded() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            cleaned.append("cleanup")
            raise

    task = start(guarded())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["cleanup"] and gate.cancelled()
