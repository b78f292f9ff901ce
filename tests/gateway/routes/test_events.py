"""Publish, subscribe (SSE with ids and Last-Event-ID replay) and the live services list."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.conftest import GATEWAY_HTTP, Stack, eventually

#: The shared stack runs the gateway's own protocol: its SSE streams are answered there.
STACK_HTTP = GATEWAY_HTTP

pytestmark = [
    pytest.mark.transports,
    pytest.mark.stack_loops,
]  # broker and NATS, each on both loops


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


class SseReader:
    """Reads SSE events from an open streaming response."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def next_event(self, timeout: float = 5.0) -> dict[str, str]:
        fields: dict[str, str] = {}
        async with asyncio.timeout(timeout):
            async for line in self.lines:
                if not line:
                    if "data" in fields:
                        return fields
                    fields = {}
                    continue
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
        raise AssertionError("stream ended")


async def test_publish_answers_202_with_the_mid(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/publish/sensor.temp", json={"c": 18.5})
    assert response.status_code == 202
    body = response.json()
    assert body["type"] == "sensor.temp" and len(body["mid"]) >= 32


@pytest.mark.parametrize("type_", ["sensor", "sensor.*", "a..b"])
async def test_publish_needs_a_major_minor_type(http: httpx.AsyncClient, type_: str) -> None:
    response = await http.post(f"/v1/publish/{type_}", json={"c": 1})
    assert response.status_code == 400


async def test_publish_needs_a_json_object(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/publish/sensor.temp", content=b"[1,2]")
    assert response.status_code == 400


async def test_subscribe_streams_published_events_with_ids(http: httpx.AsyncClient) -> None:
    async with http.stream("GET", "/v1/subscribe", params={"types": "room1.*"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(response)
        for c in (1, 2, 3):
            assert (await http.post("/v1/publish/room1.temp", json={"c": c})).status_code == 202
        await http.post("/v1/publish/room2.temp", json={"c": 99})  # not subscribed
        events = [await reader.next_event() for _ in range(3)]
    assert [e["event"] for e in events] == ["message"] * 3
    data = [json.loads(e["data"]) for e in events]
    assert [d["payload"]["c"] for d in data] == [1, 2, 3]
    assert {d["type"] for d in data} == {"room1.temp"}
    ids = [e["id"] for e in events]
    assert len(set(ids)) == 3 and ids == sorted(ids, key=lambda i: int(i.split("-")[1]))


async def test_last_event_id_replays_what_was_missed(http: httpx.AsyncClient) -> None:
    async with http.stream("GET", "/v1/subscribe", params={"types": "replay.x"}) as response:
        reader = SseReader(response)
        await http.post("/v1/publish/replay.x", json={"n": 1})
        first = await reader.next_event()
    for n in (2, 3):  # published while the client is away
        await http.post("/v1/publish/replay.x", json={"n": n})
    headers = {"Last-Event-ID": first["id"]}
    async with http.stream(
        "GET", "/v1/subscribe", params={"types": "replay.x"}, headers=headers
    ) as response:
        reader = SseReader(response)
        missed = [json.loads((await reader.next_event())["data"])["payload"]["n"] for _ in range(2)]
    assert missed == [2, 3]


async def test_events_published_on_the_bus_reach_sse(http: httpx.AsyncClient, stack: Stack) -> None:
    async with http.stream("GET", "/v1/subscribe", params={"types": "bus.side"}) as response:
        reader = SseReader(response)

        async def publish() -> None:
            client = await stack.bus_client()
            try:
                await client.publish("bus.side", {"from": "bus"})
            finally:
                await client.close()

        await stack.run(publish())
        event = json.loads((await reader.next_event())["data"])
    assert event["payload"] == {"from": "bus"}


async def test_a_burst_reaches_a_client_that_reads(http: httpx.AsyncClient, stack: Stack) -> None:
    # 3,000 events at once (a publisher's burst) to a client that reads all along: it was
    # dropped as "too slow" once 1,000 piled up in the gateway while the stream was written.
    burst = 3000
    async with http.stream("GET", "/v1/subscribe", params={"types": "burst.x"}) as response:
        reader = SseReader(response)

        async def publish() -> None:
            client = await stack.bus_client()
            try:
                for n in range(burst):
                    await client.publish("burst.x", {"n": n})
            finally:
                await client.close()

        await stack.run(publish())
        seen = []
        for _ in range(burst):
            event = await reader.next_event(timeout=15.0)
            assert event.get("event", "message") != "error", event
            seen.append(json.loads(event["data"])["payload"]["n"])
    assert seen == list(range(burst))


@pytest.mark.parametrize("types", ["", "a..b", "a.>.b"])
async def test_subscribe_with_bad_types_is_400(http: httpx.AsyncClient, types: str) -> None:
    response = await http.get("/v1/subscribe", params={"types": types})
    assert response.status_code == 400


async def test_services_lists_the_demo_service(http: httpx.AsyncClient) -> None:
    async def listed() -> bool:
        services = (await http.get("/v1/services")).json()["services"]
        return any(s["group"] == "demo" and s["instances"] == 1 for s in services)

    await eventually(listed)
    services = (await http.get("/v1/services")).json()["services"]
    demo = next(s for s in services if s["group"] == "demo")
    assert demo["status"] == "Running" and "echo" in demo["commands"]


@pytest.mark.parametrize("type_", ["OAM.SERVICE", "OAM.PROBE", "_INBOX.abc"])
async def test_the_systems_types_cannot_be_published_over_http(
    http: httpx.AsyncClient, type_: str
) -> None:
    # A made-up heartbeat published over HTTP added a service to /v1/services.
    forged = {
        "Event": "Heartbeat",
        "InstanceId": "forged-1",
        "GroupName": "bank",
        "Status": "Running",
    }
    response = await http.post(f"/v1/publish/{type_}", json=forged)
    assert response.status_code == 403
    assert "reserved for the system" in response.json()["error"]["message"]
    services = (await http.get("/v1/services")).json()["services"]
    assert all(service["group"] != "bank" for service in services)


async def test_a_subscription_ends_after_its_linger() -> None:
    from tests.gateway.conftest import base_settings, running_stack

    with running_stack(
        base_settings(subscription_linger=0.2), demo=False, http=GATEWAY_HTTP
    ) as stack:
        assert stack.gateway is not None
        hub = stack.gateway.bridge.hub
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            params = {"types": "short.lived,short.*"}
            async with http.stream("GET", "/v1/subscribe", params=params) as response:
                assert response.status_code == 200
                assert hub.patterns == ["short.*", "short.lived"]

        async def dropped() -> bool:
            return hub.patterns == []

        await eventually(dropped)


async def test_a_client_that_lets_events_pile_up_is_dropped() -> None:
    from tests.gateway.conftest import base_settings, running_stack

    with running_stack(base_settings(sse_queue=3), demo=False) as stack:
        assert stack.gateway is not None
        hub = stack.gateway.bridge.hub

        async def flood() -> bool:
            # A listener nobody reads, as a client whose socket stopped taking data.
            listener = await hub.open(["flood.x"])
            client = await stack.bus_client()
            try:
                for n in range(10):
                    await client.publish("flood.x", {"n": n})
                async with asyncio.timeout(5.0):
                    while not listener.overflowed:
                        await asyncio.sleep(0.01)
            finally:
                await client.close()
                hub.close(listener)
            return listener.queue.qsize() == 3

        assert await stack.run(flood())


@pytest.mark.slow
async def test_a_client_that_reads_nothing_is_cut_not_kept_forever() -> None:
    # Issue 12: an SSE client whose socket takes nothing was marked too slow, but its stream
    # stayed open (blocked on a write) until it read again, which may be never. Now its socket
    # is cut SLOW_CUT_S after it overflowed, and the gateway's open streams go back to 0.
    from gateway.routes.routes_events import SLOW_CUT_S
    from tests.gateway.conftest import base_settings, running_stack

    with running_stack(base_settings(sse_queue=50), demo=False, http=GATEWAY_HTTP) as stack:
        gateway = stack.gateway
        assert gateway is not None

        async def flood() -> float:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", stack.settings.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            client = None
            try:  # the socket and the client closed whatever happens (a leak otherwise)
                writer.write(b"GET /v1/subscribe?types=flood.x HTTP/1.1\r\nHost: x\r\n\r\n")
                await asyncio.wait_for(reader.readuntil(b": subscribed\n\n"), 5.0)
                client = await stack.bus_client()
                # 12 MB, paced so the stream keeps up until the socket buffers are full and
                # its write blocks; only then do events pile up past the queue
                for n in range(3000):
                    await client.publish("flood.x", {"n": n, "pad": "x" * 4000})
                    await asyncio.sleep(0.002)
                overflowed = time.monotonic()
                async with asyncio.timeout(SLOW_CUT_S + 10):
                    while gateway.metrics.open_streams:
                        await asyncio.sleep(0.05)
                cut_after = time.monotonic() - overflowed
                async with asyncio.timeout(5):  # what the socket held, then its end
                    with contextlib.suppress(ConnectionError):
                        while await reader.read(1 << 20):
                            pass
            finally:
                if client is not None:
                    await client.close()
                writer.close()
            return cut_after

        assert await stack.run(flood(), timeout=60) < SLOW_CUT_S + 10


@pytest.mark.broker_only
async def test_a_confirmed_publish_answers_with_its_journal_seq(tmp_path: Path) -> None:
    from bus.journal import JournalReader
    from bus.message.message import decode_message
    from tests.gateway.conftest import base_settings, running_stack

    with running_stack(base_settings(), demo=False, journal=str(tmp_path)) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            confirmed = await http.post(
                "/v1/publish/sensor.temp?confirm=1&timeout=20", json={"c": 1}
            )
            plain = await http.post("/v1/publish/sensor.temp", json={"c": 2})
            # how long a confirm may wait: ?timeout= as on /v1/request (a cluster elects)
            bad = await http.post("/v1/publish/sensor.temp?confirm=1&timeout=soon", json={})
        assert bad.status_code == 400 and "timeout must be a number" in bad.text
        assert confirmed.status_code == 200, confirmed.text
        seq = confirmed.json()["seq"]
        assert plain.status_code == 202 and "seq" not in plain.json()
    journaled = {r.seq: decode_message(r.raw) for r in JournalReader(tmp_path).records()}
    assert journaled[seq].payload["c"] == 1 and journaled[seq].mid == confirmed.json()["mid"]
    with running_stack(base_settings(), demo=False, http=GATEWAY_HTTP) as stack:  # no journal
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            refused = await http.post("/v1/publish/sensor.temp?confirm=1", json={"c": 3})
            # resuming from the journal: refused before the stream starts (issue 30 item 2)
            resume = await http.get("/v1/subscribe?types=sensor.*&since=0")
    assert refused.status_code == 503 and "not journaled" in refused.json()["error"]["message"]
    assert resume.status_code == 409 and resume.json()["error"]["code"] == "not_journaled"
    assert "--journal DIR" in resume.json()["error"]["message"]
