"""The per-request families render as prometheus_client's own Counter and Histogram would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from gateway.process.metrics import LATENCY_BUCKETS, PREFIX
from gateway.process.metrics_requests import RequestFamilies

# Bounds themselves (a value equal to a bound is in that bound's bucket), between them, past
# the last (+Inf only), zero; several groups and outcomes, a group seen under two outcomes.
OBSERVED = [
    ("demo", "ack", 0.0005), ("demo", "ack", 0.0007), ("demo", "ack", 0.001),
    ("demo", "nak", 0.3), ("demo", "timeout", 30.0), ("demo", "timeout", 31.5),
    ("_other", "no_responders", 0.0), ("billing", "ack", 2.5), ("billing", "ack", 2.5000001),
]  # fmt: skip


def _created_blanked(text: bytes) -> str:
    # The creation times differ by the microseconds between the two registries' first calls.
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text.decode())


def _both() -> tuple[CollectorRegistry, CollectorRegistry]:
    library = CollectorRegistry()
    counter = Counter(f"{PREFIX}requests", "Requests by group and outcome.", ["group", "outcome"],
                      registry=library)  # fmt: skip
    histogram = Histogram(f"{PREFIX}request_duration_seconds", "Time to answer a request.",
                          ["group"], buckets=LATENCY_BUCKETS, registry=library)  # fmt: skip
    ours = CollectorRegistry()
    families = RequestFamilies(PREFIX, LATENCY_BUCKETS)
    ours.register(families)
    for group, outcome, seconds in OBSERVED:
        counter.labels(group, outcome).inc()
        histogram.labels(group).observe(seconds)
        families.observe((group, outcome), seconds)
    return library, ours


@pytest.mark.parametrize("render", [generate_latest, generate_openmetrics])
def test_the_same_exposition_as_the_library_gives(render: object) -> None:
    library, ours = _both()
    expected = _created_blanked(render(library))  # type: ignore[operator]
    assert "_created" in expected and 'le="+Inf"' in expected
    assert _created_blanked(render(ours)) == expected  # type: ignore[operator]


def test_without_created_series_when_the_library_is_told_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prometheus_client import metrics

    monkeypatch.setattr(metrics, "_use_created", False)
    library, ours = _both()
    expected = generate_latest(library).decode()
    assert "_created" not in expected
    assert generate_latest(ours).decode() == expected


def test_buckets_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="ascending"):
        RequestFamilies(PREFIX, (0.5, 0.1))
