"""Gateway metrics: ``prometheus_client`` for ``/metrics``, and a recent window for ``/v1/stats``.

Each :class:`Metrics` owns a ``prometheus_client.CollectorRegistry`` (several apps may share a
process, as in the tests), holding the library's own collectors of the process (``process_*``:
CPU seconds, resident memory, open file descriptors, start time) and of the interpreter
(``python_info``, ``python_gc_*``), and the gateway's (``busgate_gateway_`` prefix):

- ``requests_total{group,outcome}`` counter: requests by group and outcome (:class:`Outcome`).
- ``request_duration_seconds{group}`` histogram: time from receiving the body to the answer.
- ``open_streams`` gauge: NDJSON/SSE responses in progress; ``open_sockets`` gauge: WebSockets.
- ``published_total`` counter: events published through the gateway.
- ``bus_connected`` gauge (0/1) and ``bus_reconnects_total`` counter, read from the bus client.
- ``auth_refused_total{reason}`` counter: credentials refused, by reason (``missing``,
  ``invalid``: a wrong key or token, ``throttled``: its address sent too many wrong ones).

Group names come from URLs, so anyone could invent them: a group gets its own label only once a
service has answered it (an ACK or a NAK from a responder; not no-responders, timeouts or
refusals), and at most ``max_groups`` groups get one. Everything else is counted under
``_other``, so made-up names can neither exhaust memory nor push real groups out.

Beyond the window, each second that leaves it is folded into a minute of history (outcome
counts and up to :data:`_SAMPLES_PER_MINUTE` latency samples per group), kept for ``history``
minutes (60) and given by :meth:`Metrics.history` (``GET /v1/stats?history=1``).

Sans-I/O: the time of each observation is an argument; rendering only reads counters (and, for
the process collector, ``/proc``). Times in the JSON are wall-clock epoch seconds: the caller
passes the wall clock's reading of the same instant (``wall``), which maps the monotonic
seconds the observations carry.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.process.metrics_requests import RequestFamilies

__all__ = ["LATENCY_BUCKETS", "OTHER_GROUP", "Metrics", "Outcome", "exposition"]

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
OTHER_GROUP = "_other"
PREFIX = "busgate_gateway_"
_SAMPLES_PER_SECOND = 512  # latency samples kept per group and second for percentiles
_SAMPLES_PER_MINUTE = 2048  # and per group and minute of history


class Outcome(StrEnum):
    """How a request ended."""

    ACK = "ack"
    NAK = "nak"
    NO_RESPONDERS = "no_responders"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    REJECTED = "rejected"
    ERROR = "error"


#: Outcomes that prove a service exists for the group: only these give a group its own label.
ANSWERED = frozenset({Outcome.ACK, Outcome.NAK})
_VALUES: dict[Outcome, str] = {outcome: outcome.value for outcome in Outcome}


def exposition(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The registry rendered in the format the scraper asks for (``Accept``).

    Args:
        registry: what to render.
        accept: the request's ``Accept`` header (``""``: the text format 0.0.4).

    Returns:
        The body and its content type (OpenMetrics when Prometheus asks for it).
    """
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


def process_collectors(registry: CollectorRegistry) -> None:
    """Register ``prometheus_client``'s process, platform and GC collectors in ``registry``."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


@dataclass
class _Second:
    """One second of the recent window: per group, outcome counts and latency samples."""

    second: int
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class _Minute:
    """One minute of history, folded from the seconds that left the window."""

    minute: int
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def fold(self, second: _Second) -> None:
        for group, counts in second.counts.items():
            merged = self.counts.setdefault(group, {})
            for outcome, n in counts.items():
                merged[outcome] = merged.get(outcome, 0) + n
        for group, values in second.samples.items():
            kept = self.samples.setdefault(group, [])
            kept.extend(values[: max(0, _SAMPLES_PER_MINUTE - len(kept))])


class _ReadCollector(Collector):
    """What other parts hold, read at scrape time: the bus client's state, auth refusals."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        connected, reconnects = self.metrics.bus_state()
        yield GaugeMetricFamily(
            f"{PREFIX}bus_connected", "1 while connected to the bus.", value=int(connected)
        )
        yield CounterMetricFamily(
            f"{PREFIX}bus_reconnects", "Reconnections to the bus.", value=reconnects
        )
        refused = CounterMetricFamily(
            f"{PREFIX}auth_refused", "Credentials refused, by reason.", labels=["reason"]
        )
        for reason, count in sorted(self.metrics.auth_refusals().items()):
            refused.add_metric([reason], count)
        yield refused


class Metrics:
    """Counters, a latency histogram and a sliding window of recent requests.

    Args:
        window: seconds covered by :meth:`stats` (60).
        buckets: histogram upper bounds in seconds.
        max_groups: distinct group labels before grouping the rest under ``_other`` (200).
        process: also export ``process_*`` and ``python_*`` (off only for tests that need a
            small exposition).
        history: minutes of per-group history kept for :meth:`history` (60).

    Attributes:
        registry: the ``prometheus_client`` registry ``/metrics`` renders.
    """

    def __init__(
        self,
        window: int = 60,
        buckets: tuple[float, ...] = LATENCY_BUCKETS,
        max_groups: int = 200,
        *,
        process: bool = True,
        history: int = 60,
    ) -> None:
        self.window = window
        self.history_minutes = history
        self._minutes: deque[_Minute] = deque(maxlen=max(1, history))
        self.buckets = buckets
        self.max_groups = max_groups
        self.registry = CollectorRegistry()
        if process:
            process_collectors(self.registry)
        # Requests and their latency: plain numbers, rendered as the library's Counter and
        # Histogram would be (every request is observed: gateway/process/metrics_requests.py).
        self._requests = RequestFamilies(PREFIX, buckets)
        self.registry.register(self._requests)
        self._streams = Gauge(
            f"{PREFIX}open_streams", "NDJSON and SSE responses in progress.", registry=self.registry
        )
        self._sockets = Gauge(f"{PREFIX}open_sockets", "WebSockets open.", registry=self.registry)
        self._published = Counter(
            f"{PREFIX}published", "Events published through the gateway.", registry=self.registry
        )
        self.bus_state: Callable[[], tuple[bool, int]] = lambda: (False, 0)
        self.auth_refusals: Callable[[], Mapping[str, int]] = dict
        self.registry.register(_ReadCollector(self))
        self.labelled: set[str] = set()
        self.open_streams = 0
        self.open_sockets = 0
        self.published = 0
        self._recent: deque[_Second] = deque()

    def _label(self, group: str, outcome: Outcome) -> str:
        if group in self.labelled:
            return group
        if outcome in ANSWERED and len(self.labelled) < self.max_groups:
            self.labelled.add(group)
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
        # Every request through the gateway passes here: the common case is a few lookups.
        label = group if group in self.labelled else self._label(group, outcome)
        value = _VALUES[outcome]
        self._requests.observe((label, value), seconds)
        recent = self._recent
        second = recent[-1] if recent and recent[-1].second == int(now) else self._second(now)
        counts = second.counts.get(label)
        if counts is None:
            counts = second.counts[label] = {}
        counts[value] = counts.get(value, 0) + 1
        samples = second.samples.get(label)
        if samples is None:
            samples = second.samples[label] = []
        if len(samples) < _SAMPLES_PER_SECOND:
            samples.append(seconds)

    def _second(self, now: float) -> _Second:
        """A new second begins: the window moves on."""
        self._recent.append(_Second(int(now)))
        self._expire(now)
        return self._recent[-1]

    def _expire(self, now: float) -> None:
        oldest = int(now) - self.window + 1
        while self._recent and self._recent[0].second < oldest:
            self._fold(self._recent.popleft())

    def _fold(self, second: _Second) -> None:
        minute = second.second // 60
        if not self._minutes or self._minutes[-1].minute != minute:
            self._minutes.append(_Minute(minute))
        self._minutes[-1].fold(second)

    def stream_opened(self) -> None:
        """An NDJSON or SSE response started."""
        self.open_streams += 1
        self._streams.inc()

    def stream_closed(self) -> None:
        """An NDJSON or SSE response ended."""
        self.open_streams -= 1
        self._streams.dec()

    def socket_opened(self) -> None:
        """A WebSocket was accepted (called by ``gateway/app.py``)."""
        self.open_sockets += 1
        self._sockets.inc()

    def socket_closed(self) -> None:
        """A WebSocket closed."""
        self.open_sockets -= 1
        self._sockets.dec()

    def event_published(self) -> None:
        """An event was published through the gateway."""
        self.published += 1
        self._published.inc()

    def follow(
        self,
        bus_state: Callable[[], tuple[bool, int]],
        auth_refusals: Callable[[], Mapping[str, int]],
    ) -> None:
        """What to read at every scrape: the bus client's ``(connected, reconnects)``, and the
        authenticator's refusals by reason."""
        self.bus_state = bus_state
        self.auth_refusals = auth_refusals

    def stats(self, now: float, wall: float | None = None) -> dict[str, Any]:
        """The recent window as JSON for the console.

        Args:
            now: the current time (same origin as :meth:`observe`).
            wall: the wall clock (epoch seconds) at ``now``; the times in the answer are wall
                times (``None``: ``now`` itself, for callers whose clock is the wall clock).

        Returns:
            ``{"as_of": wall, "window": s, "requests": n, "rps": r, "groups": {group:
            {"requests", "rps", "outcomes", "latency_ms": {"mean", "p50", "p99"}}},
            "series": [{"t", "requests"}]}``; ``t`` is the wall time each second began.
        """
        offset = 0.0 if wall is None else wall - now
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
            series.append({"t": round(second.second + offset, 3), "requests": total})
        groups = {
            group: _group_stats(counts, samples.get(group, []), self.window)
            for group, counts in sorted(per_group.items())
        }
        total = sum(g["requests"] for g in groups.values())
        return {
            "as_of": round(now + offset, 3),
            "window": self.window,
            "requests": total,
            "rps": round(total / self.window, 3),
            "open_streams": self.open_streams,
            "open_sockets": self.open_sockets,
            "groups": groups,
            "series": series,
        }

    def history(self, now: float, wall: float | None = None) -> list[dict[str, Any]]:
        """Per-minute history, oldest first, the current window's seconds included.

        Args:
            now: the current time (same origin as :meth:`observe`).
            wall: the wall clock at ``now`` (see :meth:`stats`).

        Returns:
            ``[{"t": wall time the minute began, "groups": {group: {"requests", "outcomes",
            "latency_ms": {"mean", "p50", "p99"}}}}]`` for up to ``history`` minutes with
            traffic (minutes without any are left out).
        """
        self._expire(now)
        offset = 0.0 if wall is None else wall - now
        minutes = {m.minute: m for m in self._minutes}
        live: dict[int, _Minute] = {}
        for second in self._recent:
            key = second.second // 60
            if key not in live:
                live[key] = _Minute(key)
                if key in minutes:
                    live[key].fold(_Second(0, minutes[key].counts, minutes[key].samples))
            live[key].fold(second)
        merged = {**minutes, **live}
        oldest = int(now) // 60 - self.history_minutes + 1
        return [
            {
                "t": round(key * 60 + offset, 3),
                "groups": {
                    group: _group_stats(counts, minute.samples.get(group, []), 60)
                    for group, counts in sorted(minute.counts.items())
                },
            }
            for key, minute in sorted(merged.items())
            if key >= oldest and minute.counts
        ]

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition for ``/metrics``: the body and its content type.

        Args:
            accept: the scraper's ``Accept`` header (OpenMetrics when it asks for it; the text
                format 0.0.4 otherwise).
        """
        return exposition(self.registry, accept)


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
