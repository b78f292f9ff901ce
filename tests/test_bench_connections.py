"""``bench/bench_connections.py`` and its raw-socket subscribers (``bench/connections.py``) at a
tiny size against the real gateway (``/ws`` and SSE) and nats-server's WebSocket listener: every
subscriber joins, gets the one event and is still open, so ``make test`` catches a broken bench."""

from __future__ import annotations

import pytest

from bench.bench_connections import broker, run, sizes

# real servers and client processes: 20-30 s alone, 131 s once on a loaded 2-core make test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SIZE = 20


def test_each_server_row_counts_every_subscriber_join_and_delivery() -> None:
    with broker() as (_, broker_port, objects_port):
        rows = run(SIZE, broker_port, objects_port, idle_s=0.5, settle_s=0.2)
    assert [row.name for row in rows] == ["busgate /ws", "busgate SSE", "nats-server WS"]
    for row in rows:
        assert (row.joined, row.errors, row.error) == (SIZE, 0, ""), row
        assert row.arrived == SIZE, row  # one event reached every subscriber once
        assert row.still_open == SIZE, row  # nobody dropped while idle
        assert 0 < row.first_ms <= row.p50_ms <= row.last_ms < 120_000, row
        assert row.join_s > 0 and row.rate_first > 0 and row.rate_last > 0, row
        assert row.idle_pct >= 0, row


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        ("", (1000, 10000)),  # make bench: the quick default
        ("full", (1000, 10000, 20000, 50000, 100000)),
        ("1000, 20000", (1000, 20000)),
    ],
)
def test_sizes_are_quick_unless_asked(
    monkeypatch: pytest.MonkeyPatch, asked: str, expected: tuple[int, ...]
) -> None:
    monkeypatch.setenv("BENCH_CONNECTIONS", asked)
    assert sizes() == expected
