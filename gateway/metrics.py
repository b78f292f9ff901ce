"""Gateway metrics: Prometheus text for ``/metrics`` and a recent window for ``/v1/stats``.

Sans-I/O: the time of each observation is an argument, and rendering only reads counters.

Exported metrics (``busgate_gateway_`` prefix):

- ``requests_total{group,outcome}`` counter: requests by group and outcome (:class:`Outcome`).
- ``request_duration_seconds{group}`` histogram: time from receiving the body to the answer.
- ``open_streams`` gauge: NDJSON/SSE responses in progress; ``open_sockets`` gauge: WebSockets.
- ``bus_connected`` gauge (0/1) and ``bus_reconnects_total`` counter, read from the bus client.

Group names come from URLs, so at most ``max_groups`` distinct groups get their own label; any
further group is counted under ``_other`` (unbounded label sets would exhaust memory).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import accumulate
from typing import Any

__all__ = ["LATENCY_BUCKETS", "Metrics", "Outcome"]

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
OTHER_GROUP = "_other"
_SAMPLES_PER_SECOND = 512  # latency samples kept per group and second for percentiles


class Outcome(StrEnum):
    """How a request ended."""

    ACK = "ack"
    NAK = "nak"
    NO_RESPONDERS = "no_responders"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    REJECTED = "rejected"
    ERROR = "error"


@dataclass
class _Histogram:
    """Observations per bucket (not cumulative: one bisection per observation)."""

    counts: list[int]
    total: float = 0.0
    count: int = 0

    def observe(self, value: float, bounds: tuple[float, ...]) -> None:
        index = bisect_left(bounds, value)  # the first bound >= value; len(bounds): +Inf only
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[int]:
        """Prometheus ``le`` counts: observations at or below each bound."""
        return list(accumulate(self.counts))


@dataclass
class _Second:
    """One second of the recent window: per group, outcome counts and latency samples."""

    second: int
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)


class Metrics:
    """Counters, a latency histogram and a sliding window of recent requests.

    Args:
        window: seconds covered by :meth:`stats` (60).
        buckets: histogram upper bounds in seconds.
        max_groups: distinct group labels before grouping the rest under ``_other`` (200).
    """

    def __init__(
        self,
        window: int = 60,
        buckets: tuple[float, ...] = LATENCY_BUCKETS,
        max_groups: int = 200,
    ) -> None:
        self.window = window
        self.buckets = buckets
        self.max_groups = max_groups
        self.requests: dict[tuple[str, str], int] = {}
        self.histograms: dict[str, _Histogram] = {}
        self.open_streams = 0
        self.open_sockets = 0
        self.published = 0
        self._recent: deque[_Second] = deque()

    def _label(self, group: str) -> str:
        if group in self.histograms or len(self.histograms) < self.max_groups:
            return group
        return OTHER_GROUP

    def observe(self, group: str, outcome: Outcome, seconds: float, now: float) -> None:
        """Count one finished request.

        Args:
            group: the target group.
            outcome: how it ended.
            seconds: how long it took.
            now: the time it ended (seconds, any monotonic origin).
        """
        label = self._label(group)
        key = (label, outcome.value)
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.histograms.get(label)
        if histogram is None:
            histogram = self.histograms[label] = _Histogram([0] * len(self.buckets))
        histogram.observe(seconds, self.buckets)
        second = self._second(now)
        counts = second.counts.setdefault(label, {})
        counts[outcome.value] = counts.get(outcome.value, 0) + 1
        samples = second.samples.setdefault(label, [])
        if len(samples) < _SAMPLES_PER_SECOND:
            samples.append(seconds)

    def _second(self, now: float) -> _Second:
        current = int(now)
        if not self._recent or self._recent[-1].second != current:
            self._recent.append(_Second(current))
        self._expire(now)
        return self._recent[-1]

    def _expire(self, now: float) -> None:
        oldest = int(now) - self.window + 1
        while self._recent and self._recent[0].second < oldest:
            self._recent.popleft()

    def stream_opened(self) -> None:
        """An NDJSON or SSE response started."""
        self.open_streams += 1

    def stream_closed(self) -> None:
        """An NDJSON or SSE response ended."""
        self.open_streams -= 1

    def socket_opened(self) -> None:
        """A WebSocket was accepted (called by ``gateway/ws.py``)."""
        self.open_sockets += 1

    def socket_closed(self) -> None:
        """A WebSocket closed."""
        self.open_sockets -= 1

    def stats(self, now: float) -> dict[str, Any]:
        """The recent window as JSON for the console.

        Args:
            now: the current time (same origin as :meth:`observe`).

        Returns:
            ``{"window": s, "requests": n, "rps": r, "groups": {group: {"requests", "rps",
            "outcomes", "latency_ms": {"mean", "p50", "p99"}}}, "series": [{"t", "requests"}]}``.
        """
        self._expire(now)
        per_group: dict[str, dict[str, int]] = {}
        samples: dict[str, list[float]] = {}
        series = []
        for second in self._recent:
            total = 0
            for group, counts in second.counts.items():
                merged = per_group.setdefault(group, {})
                for outcome, n in counts.items():
                    merged[outcome] = merged.get(outcome, 0) + n
                    total += n
            for group, values in second.samples.items():
                samples.setdefault(group, []).extend(values)
            series.append({"t": second.second, "requests": total})
        groups = {
            group: _group_stats(counts, samples.get(group, []), self.window)
            for group, counts in sorted(per_group.items())
        }
        total = sum(g["requests"] for g in groups.values())
        return {
            "window": self.window,
            "requests": total,
            "rps": round(total / self.window, 3),
            "open_streams": self.open_streams,
            "open_sockets": self.open_sockets,
            "groups": groups,
            "series": series,
        }

    def render(self, *, bus_connected: bool, bus_reconnects: int) -> str:
        """The Prometheus text exposition (version 0.0.4).

        Args:
            bus_connected: whether the gateway's bus client is connected now.
            bus_reconnects: how many times it has reconnected.

        Returns:
            The text for ``/metrics``.
        """
        p = "busgate_gateway_"
        lines = [
            f"# HELP {p}requests_total Requests by group and outcome.",
            f"# TYPE {p}requests_total counter",
        ]
        for (group, outcome), n in sorted(self.requests.items()):
            lines.append(f'{p}requests_total{{group="{_esc(group)}",outcome="{outcome}"}} {n}')
        lines += [
            f"# HELP {p}request_duration_seconds Time to answer a request.",
            f"# TYPE {p}request_duration_seconds histogram",
        ]
        for group, hist in sorted(self.histograms.items()):
            lines += self._histogram_lines(f"{p}request_duration_seconds", group, hist)
        gauges = [
            ("open_streams", "gauge", "NDJSON and SSE responses in progress.", self.open_streams),
            ("open_sockets", "gauge", "WebSockets open.", self.open_sockets),
            ("published_total", "counter", "Events published through the gateway.", self.published),
            ("bus_connected", "gauge", "1 while connected to the bus.", int(bus_connected)),
            ("bus_reconnects_total", "counter", "Reconnections to the bus.", bus_reconnects),
        ]
        for name, kind, text, value in gauges:
            lines += [f"# HELP {p}{name} {text}", f"# TYPE {p}{name} {kind}", f"{p}{name} {value}"]
        return "\n".join(lines) + "\n"

    def _histogram_lines(self, name: str, group: str, hist: _Histogram) -> list[str]:
        label = f'group="{_esc(group)}"'
        lines = [
            f'{name}_bucket{{{label},le="{bound:g}"}} {count}'
            for bound, count in zip(self.buckets, hist.cumulative(), strict=True)
        ]
        lines.append(f'{name}_bucket{{{label},le="+Inf"}} {hist.count}')
        lines.append(f"{name}_sum{{{label}}} {hist.total:.6f}")
        lines.append(f"{name}_count{{{label}}} {hist.count}")
        return lines


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _group_stats(counts: dict[str, int], samples: list[float], window: int) -> dict[str, Any]:
    requests = sum(counts.values())
    ordered = sorted(samples)
    mean = sum(ordered) / len(ordered) if ordered else 0.0
    return {
        "requests": requests,
        "rps": round(requests / window, 3),
        "outcomes": dict(sorted(counts.items())),
        "latency_ms": {
            "mean": round(mean * 1000, 3),
            "p50": round(_percentile(ordered, 0.50) * 1000, 3),
            "p99": round(_percentile(ordered, 0.99) * 1000, 3),
        },
    }
