"""The per-request families of ``/metrics``: plain numbers, rendered only when scraped.

Every request through the gateway is observed once
(:meth:`gateway.process.metrics.Metrics.observe`).
``prometheus_client``'s ``Counter`` and ``Histogram`` children take a lock and make several
Python calls per observation (a bucket loop, two locked increments): a tenth of the gateway's
instructions per request. The event loop is the only writer, so :class:`RequestFamilies` keeps
the same numbers as plain integers and floats and turns them into the same families at scrape
time, sample for sample as the library's own would render them:

- ``busgate_gateway_requests{group,outcome}`` counter: ``_total`` and ``_created``;
- ``busgate_gateway_request_duration_seconds{group}`` histogram: cumulative ``_bucket`` (``le``,
  ``+Inf`` last), ``_count``, ``_sum``, ``_created``.

``_created`` follows the library's switch (``PROMETHEUS_DISABLE_CREATED_SERIES``,
``prometheus_client.disable_created_metrics()``).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Final, cast

from prometheus_client import metrics as _library
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = ["Durations", "RequestFamilies"]

#: How the library writes a bound in ``le`` (untyped there).
_GO_FLOAT: Final = cast("Callable[[float], str]", floatToGoString)


class Durations:
    """One group's latency histogram: a count per bucket (not cumulative; the last is
    ``+Inf``), the sum of the observations, and when the group was first observed."""

    __slots__ = ("counts", "created", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * (buckets + 1)
        self.total = 0.0
        self.created = time.time()


class RequestFamilies(Collector):
    """Requests by group and outcome, and their latency by group (see the module docstring).

    Args:
        prefix: the metric names' prefix (``busgate_gateway_``).
        buckets: the histogram's upper bounds in seconds, ascending (``+Inf`` is added).
    """

    def __init__(self, prefix: str, buckets: tuple[float, ...]) -> None:
        if list(buckets) != sorted(buckets) or not buckets:
            raise ValueError("histogram buckets must be given in ascending order")
        self.prefix = prefix
        self.buckets = tuple(float(b) for b in buckets)
        self._le = [_GO_FLOAT(b) for b in self.buckets] + ["+Inf"]
        #: (group label, outcome) -> [count, created]
        self.counts: dict[tuple[str, str], list[float]] = {}
        self.durations: dict[str, Durations] = {}

    def observe(self, key: tuple[str, str], seconds: float) -> None:
        """Count one request of ``key`` (group label, outcome) that took ``seconds``."""
        count = self.counts.get(key)
        if count is None:
            count = self.counts[key] = [0, time.time()]
        count[0] += 1
        durations = self.durations.get(key[0])
        if durations is None:
            durations = self.durations[key[0]] = Durations(len(self.buckets))
        # The first bound >= the value: a value equal to a bound counts in that bound's bucket.
        durations.counts[bisect_left(self.buckets, seconds)] += 1
        durations.total += seconds

    def collect(self) -> Iterable[Metric]:
        created = getattr(_library, "_use_created", True)
        requests = CounterMetricFamily(
            f"{self.prefix}requests", "Requests by group and outcome.", labels=["group", "outcome"]
        )
        for (group, outcome), (count, since) in list(self.counts.items()):
            requests.add_metric([group, outcome], count, created=since if created else None)
        yield requests
        name = f"{self.prefix}request_duration_seconds"
        duration = HistogramMetricFamily(name, "Time to answer a request.", labels=["group"])
        for group, durations in list(self.durations.items()):
            running = 0
            cumulative = []
            for le, count in zip(self._le, durations.counts, strict=True):
                running += count
                cumulative.append((le, float(running)))
            duration.add_metric([group], cumulative, durations.total)
            if created:
                duration.samples.append(
                    Sample(f"{name}_created", {"group": group}, durations.created)
                )
        yield duration
