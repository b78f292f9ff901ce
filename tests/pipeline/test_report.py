"""The report page and charts' pure parts (no Spark): what a reader of the page would see wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pipeline.report import Report, latency_scale, render_html, series_points, window_seconds

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def test_a_window_without_traffic_is_drawn_as_zero_not_a_line_across_it() -> None:
    rows = [
        {"window_start": T0, "TYP": "EVT", "messages": 5},
        {"window_start": T0 + timedelta(minutes=3), "TYP": "EVT", "messages": 7},
        {"window_start": T0 + timedelta(minutes=3), "TYP": "RQS", "messages": 2},
    ]
    series = series_points(rows, "TYP", "messages", window_seconds("1 minute"))
    assert [v for _, v in series["EVT"]] == [5, 0, 0, 7]
    assert [v for _, v in series["RQS"]] == [0, 0, 0, 2]
    assert series["EVT"][1][0] == T0 + timedelta(minutes=1)


def test_window_texts() -> None:
    assert window_seconds("1 minute") == 60
    assert window_seconds("30 seconds") == 30
    assert window_seconds("2 hours") == 7200
    assert window_seconds("fortnight") is None


def test_one_slow_outlier_puts_latency_on_a_log_scale() -> None:
    fast = {"p50_ms": 0.4, "p95_ms": 0.9, "p99_ms": 1.2}
    assert latency_scale([fast]) == "linear"
    assert latency_scale([fast, {"p50_ms": 2.0, "p95_ms": 900.0, "p99_ms": 1500.0}]) == "log"


def test_the_page_is_laid_out_for_a_phone(tmp_path: Path) -> None:
    report = Report(tmp_path, 3, tables={"outcomes": [{"GRP": "demo", "requests": 3}]})
    page = render_html(report, "the start", "now")
    assert "name='viewport'" in page
    assert "<div class='wide'><table>" in page  # wide tables scroll, the page does not
