"""Shared request timers (``bus/asyncio/deadlines.py``): a wait times out once its time is up,
never before, and a wait that ended leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from bus.asyncio.client import Client
from bus.asyncio.deadlines import TICK, Deadlines
from bus.errors import RequestTimeout
from tests.conftest import MakeClient

pytestmark = pytest.mark.transports

WAIT = 10.0


async def test_a_wait_expires_after_its_timeout_not_before() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    expired: dict[str, float] = {}
    due: dict[str, float] = {}
    done = asyncio.Event()
    for name, timeout in (("short", 0.02), ("same slot", 0.021), ("long", 0.06)):
        due[name] = loop.time() + timeout

        def expire(name: str = name) -> None:
            expired[name] = loop.time()
            if len(expired) == 3:
                done.set()

        deadlines.add(expire, timeout)
    await asyncio.wait_for(done.wait(), WAIT)
    assert all(expired[name] >= due[name] for name in due), (expired, due)
    assert len(deadlines) == 0


async def test_a_wait_removed_from_its_slot_never_expires() -> None:
    deadlines = Deadlines()
    called: list[str] = []

    def answered() -> None:
        called.append("answered")

    def waiting() -> None:
        called.append("waiting")

    slot = deadlines.add(answered, 0.01)
    deadlines.add(waiting, 0.01)
    slot.pop(answered)
    await asyncio.sleep(0.01 + 3 * TICK)
    while not called:  # a loaded machine: the timer may run later still
        await asyncio.sleep(TICK)
    assert called == ["waiting"]


async def test_a_timer_that_runs_early_does_not_expire_a_wait_before_its_time() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    called: list[float] = []
    deadlines.add(lambda: called.append(loop.time()), 0.05)
    key = next(iter(deadlines._slots))
    deadlines._expire(key)  # as a loop timer firing before the deadline would
    assert called == [] and len(deadlines) == 1  # it waits on, in a later slot
    async with asyncio.timeout(WAIT):
        while not called:
            await asyncio.sleep(TICK)


async def test_answered_and_timed_out_requests_leave_no_wait_behind(
    make_client: MakeClient, client: Client
) -> None:
    responder = await make_client()
    consumer = await responder.consume("svc")

    async def answer() -> None:
        async for request in consumer:
            if request.cmd == "echo":
                await responder.send(request.ack({"x": request.payload_data()["x"]}))

    answering = asyncio.create_task(answer())
    answers = await asyncio.gather(
        *(client.request("svc", "echo", {"x": n}, timeout=WAIT) for n in range(50))
    )
    assert [answer.payload["x"] for answer in answers] == list(range(50))
    with pytest.raises(RequestTimeout):
        await client.request("svc", "ignore", timeout=0.05)
    assert len(client._deadlines) == 0
    answering.cancel()
