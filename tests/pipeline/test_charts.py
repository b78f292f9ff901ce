"""The report's SVG charts (no Spark): what a reader of a chart would see wrong.

Each chart is parsed as XML (a browser refuses a broken SVG image); its bars and points are
read back and compared with the rows they were drawn from: the values they carry, and their
drawn heights against the axis.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipeline import charts
from pipeline.report import _draw, series_points, window_seconds

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def near(a: float, b: float) -> bool:
    """Equal to the 0.01 px coordinates are written with (two roundings)."""
    return abs(a - b) <= 0.021


def marks(text: str, kind: str) -> list[ET.Element]:
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    return [e for e in root.iter() if e.get("class") == kind]


def bottom(text: str) -> float:
    """The y of the axis' 0 (its lowest tick line)."""
    lines = [e for e in ET.fromstring(text).iter(f"{SVG}line") if e.get("stroke") == "#e5e5e5"]
    return max(float(e.get("y1", "0")) for e in lines)


OUTCOMES = [
    {"GRP": "demo", "CMD": "echo", "acks": 20, "naks": 0, "unanswered": 0},
    {"GRP": "demo", "CMD": "fail", "acks": 0, "naks": 5, "unanswered": 0},
    {"GRP": "silent", "CMD": "wait", "acks": 0, "naks": 2, "unanswered": 3},
]


def test_outcome_bars_are_the_table_stacked(tmp_path: Path) -> None:
    path = _draw("outcomes", OUTCOMES, tmp_path, "1 minute")
    assert path == tmp_path / "outcomes.svg"
    text = path.read_text("utf-8")
    bars = marks(text, "bar")
    drawn = {(b.get("data-label"), b.get("data-series")): b for b in bars}
    for row in OUTCOMES:
        label = f"{row['GRP']}\n{row['CMD']}"
        for series, column in (("ACK", "acks"), ("NAK", "naks"), ("none", "unanswered")):
            assert float(drawn[(label, series)].get("data-value", "")) == row[column]
    # heights in proportion: 20 ACKs stand four times as high as 5 NAKs, stacks start at the axis
    height = {k: float(b.get("height", "")) for k, b in drawn.items()}
    assert near(height[("demo\necho", "ACK")], 4 * height[("demo\nfail", "NAK")])
    silent = [drawn[("silent\nwait", s)] for s in ("ACK", "NAK", "none")]
    assert near(float(silent[0].get("y", "")), bottom(text))
    top_of_naks = float(silent[1].get("y", ""))
    none_bar = silent[2]
    assert near(float(none_bar.get("y", "")) + float(none_bar.get("height", "")), top_of_naks)
    assert near(float(none_bar.get("height", "")), 1.5 * float(silent[1].get("height", "")))


def test_latency_bars_on_a_log_axis_when_one_outlier_would_flatten_the_rest(
    tmp_path: Path,
) -> None:
    rows = [
        {"GRP": "demo", "CMD": "echo", "p50_ms": 1.0, "p95_ms": 10.0, "p99_ms": 100.0},
        {"GRP": "demo", "CMD": "slow", "p50_ms": 1000.0, "p95_ms": 1000.0, "p99_ms": 1000.0},
    ]
    path = _draw("latencies", rows, tmp_path, "1 minute")
    assert path is not None and path.name == "latency.svg"
    text = path.read_text("utf-8")
    height = {(b.get("data-label"), b.get("data-series")): b for b in marks(text, "bar")}
    assert float(height[("demo\necho", "p99")].get("data-value", "")) == 100.0
    h = {k: float(b.get("height", "")) for k, b in height.items()}
    # a log axis: each factor of 10 is the same step up
    step = h[("demo\necho", "p95")] - h[("demo\necho", "p50")]
    assert step > 0
    assert near(h[("demo\necho", "p99")] - h[("demo\necho", "p95")], step)
    assert near(h[("demo\nslow", "p50")] - h[("demo\necho", "p99")], step)
    # no outlier: a linear axis, heights in proportion
    even = [{"GRP": "a", "CMD": "b", "p50_ms": 2.0, "p95_ms": 4.0, "p99_ms": 8.0}]
    bars = marks(
        charts.bars(["a\nb"], [(k, [even[0][k]]) for k in ("p50_ms", "p95_ms")], "", ""), "bar"
    )
    assert near(2 * float(bars[0].get("height", "")), float(bars[1].get("height", "")))


def test_series_points_are_the_table_with_empty_windows_at_zero(tmp_path: Path) -> None:
    rows = [
        {"window_start": T0, "TYP": "EVT", "messages": 5},
        {"window_start": T0 + timedelta(minutes=3), "TYP": "EVT", "messages": 7},
        {"window_start": T0 + timedelta(minutes=3), "TYP": "RQS", "messages": 2},
    ]
    path = _draw("throughput", rows, tmp_path, "1 minute")
    assert path is not None and path.name == "throughput.svg"
    text = path.read_text("utf-8")
    points: dict[str, list[tuple[str, float]]] = {}
    for point in marks(text, "point"):
        series = point.get("data-series", "")
        points.setdefault(series, []).append(
            (point.get("data-time", ""), float(point.get("data-value", "")))
        )
    expected = series_points(rows, "TYP", "messages", window_seconds("1 minute"))
    assert points == {k: [(t.isoformat(), v) for t, v in p] for k, p in expected.items()}
    assert [v for _, v in points["EVT"]] == [5, 0, 0, 7]
    assert {e.get("data-series") for e in marks(text, "line")} == {"EVT", "RQS"}
    # later points further right; a 7 higher than a 5
    evt = [p for p in marks(text, "point") if p.get("data-series") == "EVT"]
    xs = [float(p.get("cx", "")) for p in evt]
    assert xs == sorted(xs) and len(set(xs)) == 4
    assert float(evt[3].get("cy", "")) < float(evt[0].get("cy", "")) < float(evt[1].get("cy", ""))


def test_names_with_markup_are_text_not_markup(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"GRP": "<script>x</script>", "CMD": "a&b'\"", "acks": 1, "naks": 0, "unanswered": 0}
    ]
    path = _draw("outcomes", rows, tmp_path, "1 minute")
    assert path is not None
    text = path.read_text("utf-8")
    assert "<script>" not in text
    (ack, *_) = marks(text, "bar")  # well-formed XML, the label kept whole
    assert ack.get("data-label") == "<script>x</script>\na&b'\""


def test_no_rows_no_chart_and_zero_rows_a_flat_axis(tmp_path: Path) -> None:
    assert _draw("outcomes", [], tmp_path, "1 minute") is None
    assert _draw("naks", OUTCOMES, tmp_path, "1 minute") is None  # a table without a chart
    zero = [{"GRP": "g", "CMD": "c", "acks": 0, "naks": 0, "unanswered": 0}]
    bars = marks(charts.stacked_bars(["g\nc"], [("ACK", [0])], "t", "requests"), "bar")
    assert float(bars[0].get("height", "")) == 0
    assert _draw("outcomes", zero, tmp_path, "1 minute") is not None


def test_ticks_are_round_and_cover_the_top() -> None:
    assert charts.nice_ticks(20) == [0, 5, 10, 15, 20]
    assert charts.nice_ticks(1023) == [0, 250, 500, 750, 1000, 1250]
    assert charts.nice_ticks(0.3)[-1] >= 0.3
    assert charts.nice_ticks(0) == [0, 1]
