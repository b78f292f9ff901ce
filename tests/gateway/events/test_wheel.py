"""The timing wheel (gateway.events.wheel), sans-I/O: the time is an argument."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.events.wheel import TimerWheel


def test_an_entry_fires_at_the_end_of_its_slot_never_early() -> None:
    wheel: TimerWheel[str] = TimerWheel(1.0)
    wheel.add("a", 10.2)
    assert wheel.next_due() == 11.0
    assert wheel.pop_due(10.9) == []
    assert len(wheel) == 1
    assert wheel.pop_due(11.0) == ["a"]
    assert len(wheel) == 0
    assert wheel.next_due() is None
    assert wheel.pop_due(100.0) == []


def test_a_due_on_a_slot_boundary_fires_then() -> None:
    wheel: TimerWheel[str] = TimerWheel(0.125)
    wheel.add("a", 0.5)
    assert wheel.next_due() == 0.5
    assert wheel.pop_due(0.5) == ["a"]


def test_entries_come_out_earliest_slot_first_and_in_order_within_a_slot() -> None:
    wheel: TimerWheel[str] = TimerWheel(1.0)
    wheel.add("late", 5.5)
    wheel.add("first", 2.1)
    wheel.add("second", 2.9)
    wheel.add("middle", 3.5)
    assert wheel.next_due() == 3.0
    assert wheel.pop_due(4.0) == ["first", "second", "middle"]
    assert wheel.next_due() == 6.0
    assert wheel.pop_due(6.0) == ["late"]


def test_many_entries_in_one_slot_are_one_due_time() -> None:
    wheel: TimerWheel[int] = TimerWheel(1.0)
    for n in range(20_000):
        wheel.add(n, 7.0 + (n + 1) / 40_000)
    assert len(wheel) == 20_000
    assert wheel.next_due() == 8.0  # one wake-up for all of them
    assert wheel.pop_due(8.0) == list(range(20_000))


def test_add_all_puts_a_batch_in_one_slot_after_what_it_holds() -> None:
    wheel: TimerWheel[str] = TimerWheel(1.0)
    wheel.add("held", 4.5)
    wheel.add_all(["a", "b"], 4.2)  # the same slot: after what is there
    wheel.add_all(["c"], 9.0)
    assert len(wheel) == 4
    assert wheel.next_due() == 5.0
    assert wheel.pop_due(5.0) == ["held", "a", "b"]
    wheel.add_all(["d", "e"], 2.0)  # an empty slot takes the batch
    assert wheel.pop_due(9.0) == ["d", "e", "c"]
    assert len(wheel) == 0


@pytest.mark.parametrize("tick", [0.0, -1.0, float("nan")])
def test_a_tick_that_is_not_positive_is_refused(tick: float) -> None:
    with pytest.raises(ValueError, match="tick must be > 0"):
        TimerWheel(tick)


@given(
    tick=st.sampled_from([0.01, 0.125, 0.25, 1.0]),
    dues=st.lists(st.floats(min_value=0.0, max_value=1000.0), max_size=50),
    now=st.floats(min_value=0.0, max_value=1100.0),
)
def test_what_fires_is_due_and_late_by_at_most_a_tick(
    tick: float, dues: list[float], now: float
) -> None:
    wheel: TimerWheel[int] = TimerWheel(tick)
    for n, due in enumerate(dues):
        wheel.add(n, due)
    fired = wheel.pop_due(now)
    assert len(fired) == len(set(fired))
    for n in fired:
        assert dues[n] <= now + 1e-6  # never early
    for n, due in enumerate(dues):
        if n not in fired:
            assert due > now - tick - 1e-6  # never later than a tick
    assert len(wheel) == len(dues) - len(fired)
    assert sorted(fired + wheel.pop_due(2000.0)) == list(range(len(dues)))
