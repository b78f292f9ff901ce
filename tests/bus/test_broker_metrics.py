"""The broker's monitoring port: /metrics over real traffic, and its HTTP behaviour.

A real broker on a free port, real clients, a journal on disk, a consumer that never reads
(evicted), and the port scraped over HTTP and parsed with prometheus_client's own parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bus.broker import Broker
from bus.broker.config import BrokerConfig, JournalSetting
from bus.broker.metrics import MAX_HEAD, MetricsServer, start_metrics
from bus.errors import AuthError, ConfigError, NakError, NoRespondersError
from bus.message.message import Message
from tests.bus.test_broker_server import RawLink
from tests.conftest import OFFICES, MakeBroker, MakeClient, free_tcp_ports

WAIT = 10.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        response = await http.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(f"busgate_broker_{name}", tuple(sorted(labels.items())))]


@pytest.fixture
async def metrics_of() -> AsyncIterator[list[MetricsServer]]:
    servers: list[MetricsServer] = []
    yield servers
    for server in servers:
        await server.stop()


async def test_metrics_follow_real_traffic(
    make_broker: MakeBroker,
    make_client: MakeClient,
    tmp_path: Path,
    metrics_of: list[MetricsServer],
) -> None:
    journal = JournalSetting(str(tmp_path / "journal"), fsync="always")
    broker = await make_broker(open=True, journal=journal, max_queue_bytes=256 * 1024)
    server = await start_metrics(broker, 0)
    metrics_of.append(server)
    url = f"http://127.0.0.1:{server.port}/metrics"
    bus = f"bus://127.0.0.1:{broker.port}"
    before = await scrape(url)
    assert value(before, "links") == 0
    assert value(before, "messages_routed_total") == 0

    service = await make_client(bus, "bob")
    consumer = await service.consume("work")
    caller = await make_client(bus)

    async def answer() -> None:
        request = await consumer.get(WAIT)
        await service.send(request.ack({"done": True}))

    answering = asyncio.create_task(answer())
    await caller.request("work", "do", {}, timeout=WAIT)
    await answering
    await caller.publish("nobody.listens", {"x": 1})  # dropped: no subscriber
    with pytest.raises(NoRespondersError):
        await caller.request("empty", "do", {}, timeout=WAIT)
    with pytest.raises(NakError):
        await caller.mail("ghost.po", {"x": 1}, expect=True, timeout=WAIT)  # no such office
    with pytest.raises(AuthError):
        await make_client(bus, "carol", secret="wrong", reconnect=False)
    middle = await scrape(url)
    assert value(middle, "messages_dropped_total", reason="no_responders") == 1
    assert value(middle, "messages_dropped_total", reason="no_route") == 2
    assert value(middle, "auth_failures_total") == 1
    await _evict_a_slow_consumer(broker, caller)

    async def settled() -> Samples:
        async with asyncio.timeout(WAIT):
            while True:
                found = await scrape(url)
                if value(found, "slow_consumer_evictions_total") >= 1:
                    return found
                await asyncio.sleep(0.05)

    after = await settled()
    assert value(after, "links") == 2  # bob and the caller; carol refused, the slow one evicted
    assert value(after, "offices") == 2  # bob and alice (the caller)
    assert value(after, "auth_failures_total") == 1
    assert value(after, "slow_consumer_evictions_total") == 1
    # the publishes after the eviction found no subscriber
    assert value(after, "messages_dropped_total", reason="no_route") >= 2
    assert value(after, "messages_routed_total") >= 5
    assert value(after, "received_bytes_total") > value(before, "received_bytes_total")
    assert value(after, "queued_bytes") == 0
    appended = value(after, "journal_appends_total")
    assert appended == broker.journal.appended > 0  # type: ignore[union-attr]
    # fsync=always: everything appended is on disk, one fsync per input batch (group commit)
    assert 1 <= value(after, "journal_fsyncs_total") == broker.journal.fsyncs <= appended  # type: ignore[union-attr]
    assert broker.journal.synced_seq == broker.journal.last_seq  # type: ignore[union-attr]
    assert value(after, "journal_errors_total") == 0
    names = {name for name, _ in after}
    assert {"process_resident_memory_bytes", "process_open_fds", "python_info"} <= names


async def _evict_a_slow_consumer(broker: Broker, publisher: object) -> None:
    slow = await RawLink.open(broker.port, receive_buffer=4096)
    try:
        await slow.connect_sha256("carol", "AB.carol")
        subscribe = {"MID": "s1", "TYP": "OAM", "CMD": "manage.subscribe"}
        slow.send({**subscribe, "PLD": {"pattern": "feed"}})
        assert isinstance(await slow.next(), Message)  # from now on it never reads
        async with asyncio.timeout(WAIT):
            while broker.stats["slow_consumers"] == 0:
                for _ in range(20):
                    await publisher.publish("feed.data", {"blob": "x" * 8000})  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
    finally:
        slow.close()


async def test_queued_bytes_and_links_are_read_at_scrape_time(
    make_broker: MakeBroker, make_client: MakeClient, metrics_of: list[MetricsServer]
) -> None:
    broker = await make_broker(open=True, max_queue_bytes=64 * 1024 * 1024)
    server = await start_metrics(broker, 0)
    metrics_of.append(server)
    url = f"http://127.0.0.1:{server.port}/metrics"
    slow = await RawLink.open(broker.port, receive_buffer=4096)
    try:
        await slow.connect_sha256("carol", "AB.carol")
        slow.send({"MID": "s1", "TYP": "OAM", "CMD": "manage.subscribe", "PLD": {"pattern": "q"}})
        assert isinstance(await slow.next(), Message)
        publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
        async with asyncio.timeout(WAIT):
            while broker.queued_bytes() == 0:
                for _ in range(20):
                    await publisher.publish("q.data", {"blob": "x" * 8000})
                await asyncio.sleep(0.01)
        found = await scrape(url)
        assert value(found, "queued_bytes") == broker.queued_bytes() > 0
        assert value(found, "links") == 2
    finally:
        slow.close()


async def test_requests_lost_with_their_consumer_are_counted(
    make_broker: MakeBroker, make_client: MakeClient, metrics_of: list[MetricsServer]
) -> None:
    broker = await make_broker(max_queue_bytes=64 * 1024 * 1024)
    server = await start_metrics(broker, 0)
    metrics_of.append(server)
    dying = await RawLink.open(broker.port, receive_buffer=4096)
    await dying.connect_sha256("carol", "AB.carol")
    dying.send({"MID": "c1", "TYP": "OAM", "CMD": "manage.consume", "PLD": {"group": "dying"}})
    assert isinstance(await dying.next(), Message)  # consuming; it never reads again
    caller = await make_client(f"bus://127.0.0.1:{broker.port}", "bob")
    calls: list[asyncio.Task[Message]] = []
    async with asyncio.timeout(WAIT):  # until requests wait in the broker's queue for it
        while broker.queued_bytes() == 0:
            calls += [
                asyncio.create_task(caller.request("dying", "w", {"blob": "x" * 8000}, timeout=2))
                for _ in range(50)
            ]
            await asyncio.sleep(0.01)
    dying.writer.transport.abort()  # the service process dies
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
    lost = [r for r in results if isinstance(r, NakError) and "link was lost" in r.msg]
    found = await scrape(f"http://127.0.0.1:{server.port}/metrics")
    assert value(found, "messages_dropped_total", reason="consumer_lost") == len(lost) > 0


async def test_the_monitoring_port_speaks_plain_http(
    make_broker: MakeBroker, metrics_of: list[MetricsServer]
) -> None:
    broker = await make_broker(open=True)
    server = await start_metrics(broker, 0)
    metrics_of.append(server)
    base = f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient(base_url=base, timeout=WAIT) as http:
        assert (await http.get("/healthz")).text == "ok\n"
        assert "/metrics" in (await http.get("/")).text
        assert (await http.get("/nope")).status_code == 404
        refused = await http.post("/metrics", content=b"x")
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
        head = await http.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) > 0
        openmetrics = await http.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.endswith("# EOF\n")
        # keep-alive: several requests on one connection
        for _ in range(3):
            assert (await http.get("/metrics?x=1")).status_code == 200
    # Not HTTP, and a head over the limit: a clear 400/431, and the port goes on serving.
    for junk, status in ((b"\x00\x01 hello\r\n\r\n", 400), (_huge_head(), 431)):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:  # closed whatever happens: left to the garbage collector, it fails a later test
            writer.write(junk)
            answer = await asyncio.wait_for(reader.read(), WAIT)
        finally:
            writer.close()
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:40]
    # A client that sends half a request does not hold up the others.
    reader, stalled = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        stalled.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        found = await scrape(f"{base}/metrics")
    finally:
        stalled.close()
    assert value(found, "links") == 0


def _huge_head() -> bytes:  # never ends: the limit is on what must be held to parse it
    return b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD + 1024)


async def test_a_taken_port_is_a_clear_error(make_broker: MakeBroker) -> None:
    broker = await make_broker(open=True)
    first = await start_metrics(broker, 0)
    try:
        with pytest.raises(
            ConfigError, match=f"cannot listen for metrics on 127.0.0.1:{first.port}"
        ):
            await start_metrics(broker, first.port)
    finally:
        await first.stop()


def test_metrics_are_off_by_default_and_the_port_is_checked() -> None:
    # tests/bus/test_broker_config.py checks the flag, the variable and the file key.
    assert BrokerConfig().metrics_port is None
    with pytest.raises(ConfigError, match="metrics_port"):
        BrokerConfig(metrics_port=70000)


@pytest.mark.slow
async def test_busgate_broker_serves_metrics_on_its_port() -> None:
    port, metrics = free_tcp_ports(2)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("BUSGATE_CONFIG", None)
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    offices = [arg for name in ("alice",) for arg in ("--office", f"{name}:{OFFICES[name]}")]
    process = subprocess.Popen(
        [*command, "broker", "--port", str(port), "--metrics-port", str(metrics), *offices],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{metrics}/metrics"
        async with asyncio.timeout(30.0):
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    found = await scrape(url)
                    break
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                await asyncio.sleep(0.1)
        assert value(found, "links") == 0
        assert value(found, "max_connections") == 1000
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0
    assert b"Traceback" not in err


async def test_busgate_run_serves_the_brokers_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    from bus.cli.run import RunOptions, run_all

    # run_all points BUSGATE_OBJECTS_LINK at its bridge: put back at the end, or the later
    # tests of this process link their gateways' /ws there (test_ws_link_fixed_port failed)
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")

    options = RunOptions(port=0, bus_port=0, objects_port=0, metrics_port=0, gateway=False)
    running = await run_all(options)
    try:
        assert running.metrics_url is not None
        found = await scrape(running.metrics_url.replace("localhost", "127.0.0.1"))
        assert value(found, "links") >= 2  # the demo service and the Object System bridge
        assert value(found, "groups") >= 1
    finally:
        await running.stop()
