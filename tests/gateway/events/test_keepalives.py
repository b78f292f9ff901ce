"""One loop timer for every connection's keepalive (gateway.events.keepalives), on both loops."""

from __future__ import annotations

import asyncio

import pytest

from gateway.events.keepalives import Keepalives, keepalives
from tests.conftest import LOOPS


class Owner:
    """A connection that wants asking every ``every`` seconds, ``times`` times."""

    def __init__(self, every: float, times: int, fail: bool = False) -> None:
        self.every = every
        self.times = times
        self.fail = fail
        self.asked: list[float] = []
        self.done = asyncio.Event()

    def keepalive_due(self, now: float) -> float | None:
        self.asked.append(now)
        if self.fail:
            raise RuntimeError("a bug in one connection")
        if len(self.asked) >= self.times:
            self.done.set()
            return None
        return now + self.every


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_each_owner_is_asked_when_due_until_it_is_gone(loop_name: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        wheel = keepalives(0.2)  # slots of 0.05 s
        assert keepalives(0.2) is wheel  # one per loop and interval
        start = loop.time()
        owners = [Owner(0.2, 3) for _ in range(500)]
        broken = Owner(0.2, 1, fail=True)
        wheel.add(broken, start + 0.2)
        for owner in owners:
            wheel.add(owner, start + 0.2)
        async with asyncio.timeout(30):
            for owner in owners:
                await owner.done.wait()
        for owner in owners:
            assert len(owner.asked) == 3
            assert owner.asked[0] >= start + 0.2  # never early
            assert all(
                b - a >= 0.2 - 1e-6 for a, b in zip(owner.asked, owner.asked[1:], strict=False)
            )
        assert broken.asked and len(broken.asked) == 1  # forgotten after its failure
        assert len(wheel) == 0  # everyone gone: nothing left and no timer armed
        assert wheel._timer is None

    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        runner.run(main())


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_an_earlier_entry_rearms_the_timer(loop_name: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        wheel = Keepalives(loop, 0.05)
        late, soon = Owner(60.0, 1), Owner(60.0, 1)
        wheel.add(late, loop.time() + 60.0)
        wheel.add(soon, loop.time() + 0.1)
        async with asyncio.timeout(30):
            await soon.done.wait()
        assert late.asked == []
        assert len(wheel) == 1

    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        runner.run(main())
