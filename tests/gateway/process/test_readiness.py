"""``gateway/process/readiness.py``: each worker keeps its shared flag equal to its readiness,
and any worker counts how many are ready (``/readyz``'s ``workers``; the real processes are in
``test_workers.py``)."""

from __future__ import annotations

import asyncio
import multiprocessing

import pytest

from gateway.process.readiness import WorkerReadiness

pytestmark = pytest.mark.loops


async def test_a_worker_flag_follows_its_readiness_and_is_cleared_when_it_stops() -> None:
    flags = multiprocessing.get_context("spawn").RawArray("b", 3)  # as the parent makes them
    first, second = WorkerReadiness(flags, 0), WorkerReadiness(flags, 1)
    assert first.count() == (0, 3)
    linked = {"first": False, "second": True}
    tasks = [
        asyncio.create_task(first.follow(lambda: linked["first"], interval=0.01)),
        asyncio.create_task(second.follow(lambda: linked["second"], interval=0.01)),
    ]
    try:
        await _until(lambda: second.count() == (1, 3))
        assert list(flags) == [0, 1, 0]
        linked["first"] = True  # its bus link came up
        await _until(lambda: first.count() == (2, 3))
        linked["second"] = False  # lost
        await _until(lambda: first.count() == (1, 3))
        assert list(flags) == [1, 0, 0]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert second.count() == (0, 3)  # a stopped worker is not counted as ready


async def _until(condition: object, timeout: float = 30.0) -> None:
    assert callable(condition)
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)
