"""Metrics: Prometheus text and the recent window for the console."""

from __future__ import annotations

from gateway.metrics import Metrics, Outcome


def test_prometheus_text_counts_requests_by_group_and_outcome() -> None:
    metrics = Metrics()
    metrics.observe("demo", Outcome.ACK, 0.002, now=10.0)
    metrics.observe("demo", Outcome.ACK, 0.004, now=10.5)
    metrics.observe("demo", Outcome.TIMEOUT, 5.0, now=11.0)
    text = metrics.render(bus_connected=True, bus_reconnects=2)
    assert 'busgate_gateway_requests_total{group="demo",outcome="ack"} 2' in text
    assert 'busgate_gateway_requests_total{group="demo",outcome="timeout"} 1' in text
    assert 'busgate_gateway_request_duration_seconds_bucket{group="demo",le="0.0025"} 1' in text
    # cumulative buckets; a value equal to a bound is counted in that bound's bucket
    assert 'busgate_gateway_request_duration_seconds_bucket{group="demo",le="0.001"} 0' in text
    assert 'busgate_gateway_request_duration_seconds_bucket{group="demo",le="1"} 2' in text
    assert 'busgate_gateway_request_duration_seconds_bucket{group="demo",le="5"} 3' in text
    assert 'busgate_gateway_request_duration_seconds_bucket{group="demo",le="+Inf"} 3' in text
    assert 'busgate_gateway_request_duration_seconds_count{group="demo"} 3' in text
    assert "busgate_gateway_bus_connected 1" in text
    assert "busgate_gateway_bus_reconnects_total 2" in text
    assert text.endswith("\n")


def test_streams_and_sockets_gauges() -> None:
    metrics = Metrics()
    metrics.stream_opened()
    metrics.stream_opened()
    metrics.stream_closed()
    metrics.socket_opened()
    text = metrics.render(bus_connected=False, bus_reconnects=0)
    assert "busgate_gateway_open_streams 1" in text
    assert "busgate_gateway_open_sockets 1" in text
    assert "busgate_gateway_bus_connected 0" in text


def test_label_values_are_escaped() -> None:
    metrics = Metrics()
    metrics.observe('we"ird\\', Outcome.ACK, 0.1, now=0.0)
    assert 'group="we\\"ird\\\\"' in metrics.render(bus_connected=True, bus_reconnects=0)


def test_group_labels_are_bounded() -> None:
    metrics = Metrics(max_groups=2)
    for group in ("a", "b", "c", "d"):
        metrics.observe(group, Outcome.ACK, 0.1, now=0.0)
    text = metrics.render(bus_connected=True, bus_reconnects=0)
    assert 'group="_other",outcome="ack"} 2' in text
    assert 'group="c"' not in text


def test_stats_window_gives_rate_and_percentiles() -> None:
    metrics = Metrics(window=10)
    for i in range(100):
        metrics.observe("demo", Outcome.ACK, (i + 1) / 1000, now=100.0 + i / 100)
    metrics.observe("other", Outcome.NAK, 0.5, now=101.0)
    stats = metrics.stats(now=101.5)
    demo = stats["groups"]["demo"]
    assert demo["requests"] == 100 and demo["rps"] == 10.0
    assert demo["latency_ms"]["p50"] == 50.0 and demo["latency_ms"]["p99"] == 99.0
    assert stats["groups"]["other"]["outcomes"] == {"nak": 1}
    assert stats["requests"] == 101
    assert sum(point["requests"] for point in stats["series"]) == 101


def test_stats_forget_what_left_the_window() -> None:
    metrics = Metrics(window=10)
    metrics.observe("demo", Outcome.ACK, 0.1, now=100.0)
    assert metrics.stats(now=109.9)["requests"] == 1
    assert metrics.stats(now=110.0)["requests"] == 0
    assert metrics.stats(now=110.0)["groups"] == {}
