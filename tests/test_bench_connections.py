"""``bench/bench_connections.py`` and its raw-socket subscribers (``bench/connections.py``) at a
tiny size against the real gateway (``/ws`` and SSE) and nats-server's WebSocket listener: every
subscriber joins, gets the one event and is still open, so ``make test`` catches a broken bench."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import _common
from bench.bench_connections import (
    Clients,
    _nats,
    _nats_publisher,
    _publish_nats,
    broker,
    run,
    sizes,
)

# real servers and client processes: 20-30 s alone, 131 s once on a loaded 2-core make test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SIZE = 20


def test_the_event_is_published_only_once_every_subscriber_looks_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # CI: nats-server's row counted 0 of 20 arrivals: its publisher was already connected, so
    # the event went out before the subscriber process had read which token to look for. The
    # process now says when it looks ("armed"), and the bench publishes only after that.
    monkeypatch.setattr(_common, "_run_dir", tmp_path)
    with _nats(5) as (_, port, ws_port), _nats_publisher(port) as publisher:
        clients = Clients("nats", ws_port, 5)
        try:
            assert [j["joined"] for j in clients.read()] == [5]
            clients.tell("expect 0123456789abcdef 30")
            assert clients.read() == [{"armed": 5}]
            _publish_nats(publisher, "0123456789abcdef")  # at once: no time for the clients
            assert [len(j["arrivals"]) for j in clients.read()] == [5]
        finally:
            clients.close()


def test_each_server_row_counts_every_subscriber_join_and_delivery(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_common, "_run_dir", tmp_path)  # the servers' logs: kept with the test's
    with broker() as (_, broker_port, objects_port):
        # two gateway workers, as at 20,000: the bench waits for both before its clients;
        # one gateway for both of its rows (each of its starts is seconds on a loaded host)
        rows = run(SIZE, broker_port, objects_port, idle_s=0.5, settle_s=0.2,
                   per_worker=SIZE // 2, one_gateway=True)  # fmt: skip
    assert [row.name for row in rows] == ["busgate /ws", "busgate SSE", "nats-server WS"]
    assert [row.note for row in rows] == ["2 workers", "2 workers", "1 process"]
    for row in rows:
        # every server is ready (every worker's bus link up) before its clients start: no
        # join is refused with 503, none is tried again (CI: a worker not linked yet)
        assert (row.joined, row.errors, row.error, row.retried) == (SIZE, 0, "", 0), row
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
