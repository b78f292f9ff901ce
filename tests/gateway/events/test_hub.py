"""The SSE event log: numbering, de-duplication and Last-Event-ID replay (sans-I/O part)."""

from __future__ import annotations

from gateway.events.hub import EventLog


def test_events_are_numbered_and_copies_dropped() -> None:
    log = EventLog(10)
    first = log.append("sensor.temp", "{}", "m1")
    assert first is not None and first.seq == 1
    assert log.append("sensor.temp", "{}", "m1") is None
    second = log.append("sensor.hum", "{}", None)
    assert second is not None and second.seq == 2


def test_since_replays_matching_events_after_an_id() -> None:
    log = EventLog(10)
    for i, type_ in enumerate(["a.x", "b.x", "a.y", "a.z"]):
        log.append(type_, str(i), f"m{i}")
    assert [e.data for e in log.since(1, ["a.*"])] == ["2", "3"]
    assert [e.type for e in log.since(0, ["b"])] == ["b.x"]


def test_the_log_is_bounded_and_forgets_old_ids() -> None:
    log = EventLog(2)
    for i in range(3):
        log.append("a.b", str(i), f"m{i}")
    assert [e.seq for e in log.since(0, [">"])] == [2, 3]
    assert log.append("a.b", "again", "m0") is not None  # m0 left the log


def test_zero_size_log_replays_nothing() -> None:
    log = EventLog(0)
    log.append("a.b", "x", None)
    assert log.since(0, [">"]) == []


def test_the_log_is_bounded_in_characters_too() -> None:
    log = EventLog(100, max_chars=10)
    for i in range(5):
        log.append("a.b", "x" * 4, f"m{i}")
    assert [e.seq for e in log.since(0, [">"])] == [4, 5]
    big = log.append("a.b", "y" * 50, "big")  # larger than the budget: numbered, not kept
    assert big is not None and big.seq == 6
    assert log.since(0, [">"]) == []
