"""Metrics: the prometheus_client exposition and the recent window for the console."""

from __future__ import annotations

import os

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bus.asyncio.client import Client, connect
from bus.asyncio.service import Service
from bus.demo import create_demo_service
from gateway.process.metrics import Metrics, Outcome
from tests.gateway.conftest import Stack, base_settings, running_stack


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, parsed by prometheus_client's own parser."""
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_requests_by_group_and_outcome_and_the_latency_histogram() -> None:
    metrics = Metrics()
    metrics.observe("demo", Outcome.ACK, 0.002, now=10.0)
    metrics.observe("demo", Outcome.ACK, 0.004, now=10.5)
    metrics.observe("demo", Outcome.TIMEOUT, 5.0, now=11.0)
    metrics.follow(lambda: (True, 2), lambda: {"invalid": 3})
    found = samples(metrics)
    requests = "busgate_gateway_requests_total"
    assert found[(requests, (("group", "demo"), ("outcome", "ack")))] == 2
    assert found[(requests, (("group", "demo"), ("outcome", "timeout")))] == 1
    bucket = "busgate_gateway_request_duration_seconds_bucket"
    # cumulative buckets; a value equal to a bound is counted in that bound's bucket
    for le, count in (("0.001", 0), ("0.0025", 1), ("1.0", 2), ("5.0", 3), ("+Inf", 3)):
        assert found[(bucket, (("group", "demo"), ("le", le)))] == count, le
    assert found[("busgate_gateway_request_duration_seconds_count", (("group", "demo"),))] == 3
    assert found[("busgate_gateway_bus_connected", ())] == 1
    assert found[("busgate_gateway_bus_reconnects_total", ())] == 2
    assert found[("busgate_gateway_auth_refused_total", (("reason", "invalid"),))] == 3


def test_process_and_python_metrics_are_exported() -> None:
    names = {name for name, _ in samples(Metrics())}
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
        "python_gc_collections_total",
    ):
        assert name in names, name
    memory = samples(Metrics())[("process_resident_memory_bytes", ())]
    assert memory > 1_000_000  # this very process, read from /proc
    metrics = Metrics()
    before = samples(metrics)[("process_open_fds", ())]
    files = [open(os.devnull, "rb") for _ in range(5)]
    try:
        assert samples(metrics)[("process_open_fds", ())] == before + 5
    finally:
        for file in files:
            file.close()


def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    metrics = Metrics()
    metrics.observe("demo", Outcome.ACK, 0.1, now=0.0)
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert b'busgate_gateway_requests_total{group="demo",outcome="ack"} 1.0' in body


def test_streams_and_sockets_gauges() -> None:
    metrics = Metrics()
    metrics.stream_opened()
    metrics.stream_opened()
    metrics.stream_closed()
    metrics.socket_opened()
    metrics.event_published()
    found = samples(metrics)
    assert found[("busgate_gateway_open_streams", ())] == 1
    assert found[("busgate_gateway_open_sockets", ())] == 1
    assert found[("busgate_gateway_published_total", ())] == 1
    assert found[("busgate_gateway_bus_connected", ())] == 0


def test_label_values_are_escaped() -> None:
    metrics = Metrics()
    metrics.observe('we"ird\\', Outcome.ACK, 0.1, now=0.0)
    body, _ = metrics.render()
    assert b'group="we\\"ird\\\\"' in body
    assert (
        "busgate_gateway_requests_total",
        (("group", 'we"ird\\'), ("outcome", "ack")),
    ) in samples(metrics)


def test_group_labels_are_bounded() -> None:
    metrics = Metrics(max_groups=2)
    for group in ("a", "b", "c", "d"):
        metrics.observe(group, Outcome.ACK, 0.1, now=0.0)
    found = samples(metrics)
    assert found[("busgate_gateway_requests_total", (("group", "_other"), ("outcome", "ack")))] == 2
    assert not any(dict(labels).get("group") == "c" for _, labels in found)


def test_only_groups_that_answered_get_a_label() -> None:
    metrics = Metrics(max_groups=3)
    for n in range(10):  # made-up groups: nobody answers them
        metrics.observe(f"junk{n}", Outcome.NO_RESPONDERS, 0.001, now=0.0)
        metrics.observe(f"gone{n}", Outcome.TIMEOUT, 5.0, now=0.0)
        metrics.observe(f"refused{n}", Outcome.REJECTED, 0.0, now=0.0)
    metrics.observe("real", Outcome.NAK, 0.01, now=1.0)  # a NAK comes from a responder
    metrics.observe("real", Outcome.TIMEOUT, 5.0, now=1.0)  # labelled from now on
    groups = {dict(labels).get("group") for _, labels in samples(metrics)} - {None}
    assert groups == {"_other", "real"}
    assert metrics.labelled == {"real"}
    assert set(metrics.stats(now=1.0)["groups"]) == {"_other", "real"}


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


async def test_made_up_groups_cannot_use_up_the_labels_of_a_running_gateway() -> None:
    # Issue 12: 210 requests to junk0..209 pushed a real new group into `_other`.
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            for n in range(210):
                response = await http.post(f"/v1/request/junk{n}", json={"CMD": "echo"})
                assert response.status_code == 503  # no responders
            client, service = await stack.run(_start_service(stack, "late"))
            try:
                answered = await http.post("/v1/request/late", json={"CMD": "echo"})
                assert answered.status_code == 200
                text = (await http.get("/metrics")).text
                stats = (await http.get("/v1/stats")).json()
            finally:
                await stack.run(_stop_service(client, service))
    assert 'busgate_gateway_requests_total{group="late",outcome="ack"} 1.0' in text
    assert 'group="_other",outcome="no_responders"} 210.0' in text
    assert 'group="junk' not in text
    assert set(stats["groups"]) == {"_other", "late"}


async def _start_service(stack: Stack, group: str) -> tuple[Client, Service]:
    client = await connect(stack.settings.bus_url)
    service = create_demo_service(client, group=group)
    await service.start()
    return client, service


async def _stop_service(client: Client, service: Service) -> None:
    await service.stop()
    await client.close()
