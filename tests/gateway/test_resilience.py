"""The gateway survives the bus going away, starts before it, and drains on shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace

import httpx
import pytest

from tests.gateway.conftest import Stack, base_settings, eventually, running_stack

ECHO = {"CMD": "echo", "x": 1}


async def ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 200


async def test_bus_restart_fails_in_flight_then_recovers() -> None:
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            assert (await http.post("/v1/request/demo", json=ECHO)).status_code == 200
            in_flight = asyncio.create_task(
                http.post("/v1/request/demo", json={"CMD": "sleep", "seconds": 4})
            )

            async def sent() -> bool:
                assert stack.gateway is not None
                return stack.gateway.bridge.in_flight == 1

            await eventually(sent)
            await stack.run(stack.stop_broker())

            # the request already sent fails at once with a clear error, not after its timeout
            response = await asyncio.wait_for(in_flight, 3.0)
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "bus_unavailable"

            # while the bus is away: not ready, and new requests are refused at once
            not_ready = await http.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json()["error"]["code"] == "not_ready"
            refused = await http.post("/v1/request/demo", json=ECHO)
            assert refused.status_code == 503
            assert "not connected to the bus" in refused.json()["error"]["message"]
            assert (await http.get("/healthz")).status_code == 200

            await stack.run(stack.start_broker())
            await eventually(lambda: ready(http), timeout=15.0)

            async def answered() -> bool:
                return (await http.post("/v1/request/demo", json=ECHO)).status_code == 200

            await eventually(answered, timeout=15.0, every=0.2)
            metrics = (await http.get("/metrics")).text
            assert "busgate_gateway_bus_reconnects_total 1.0" in metrics
            assert 'outcome="unavailable"' in metrics


async def test_services_list_is_kept_and_marked_stale_while_the_bus_is_away() -> None:
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:

            async def demo_listed(stale: bool) -> bool:
                body = (await http.get("/v1/services")).json()
                groups = {s["group"]: s["instances"] for s in body["services"]}
                return groups.get("demo") == 1 and body["stale"] is stale

            await eventually(lambda: demo_listed(False))
            assert (await http.get("/v1/services")).json()["as_of"] is None
            await stack.run(stack.stop_broker())
            # the demo heartbeats every second and expires after 3 missed ones: wait past that
            await asyncio.sleep(4.0)
            response = await http.get("/v1/services")
            assert response.status_code == 200
            body = response.json()
            assert body["stale"] is True and isinstance(body["as_of"], float)
            assert [(s["group"], s["instances"]) for s in body["services"]] == [("demo", 1)]

            await stack.run(stack.start_broker())
            await eventually(lambda: demo_listed(False), timeout=20.0, every=0.2)


async def test_subscriptions_survive_a_bus_restart() -> None:
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            async with http.stream("GET", "/v1/subscribe", params={"types": "after.restart"}) as r:
                lines = r.aiter_lines()
                await stack.run(stack.stop_broker())
                await stack.run(stack.start_broker())
                await eventually(lambda: ready(http), timeout=15.0)

                async def published() -> bool:
                    response = await http.post("/v1/publish/after.restart", json={"ok": 1})
                    return response.status_code == 202

                await eventually(published, timeout=10.0, every=0.2)
                async with asyncio.timeout(10.0):
                    async for line in lines:
                        if line.startswith("data:"):
                            assert '"ok":1' in line
                            break


async def test_gateway_starts_before_the_bus() -> None:
    stack = Stack(base_settings(), demo=False)
    stack.thread.start()
    try:

        async def start_without_bus() -> None:
            await stack._start_gateway_only()

        stack.call(start_without_bus())
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code == 503
            response = await http.post("/v1/request/demo", json=ECHO)
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "bus_unavailable"
            await stack.run(stack.start_broker())
            await eventually(lambda: ready(http), timeout=15.0)
            # nobody serves demo yet: 503 no_responders, answered at once
            response = await http.post("/v1/request/demo", json=ECHO)
            assert response.json()["error"]["code"] == "no_responders"
    finally:
        stack.stop()


async def test_shutdown_drains_in_flight_requests() -> None:
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            slow = asyncio.create_task(
                http.post("/v1/request/demo", json={"CMD": "sleep", "seconds": 0.8})
            )

            async def sent() -> bool:
                assert stack.gateway is not None
                return stack.gateway.bridge.in_flight == 1

            await eventually(sent)
            assert stack.server is not None
            stack.server.should_exit = True
            response = await asyncio.wait_for(slow, 10.0)
            assert response.status_code == 200
            assert response.json()["payload"]["slept"] >= 0.8


async def test_shutdown_lets_an_ndjson_stream_finish() -> None:
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            body = {"CMD": "count", "n": 3, "interval": 0.3}
            headers = {"Accept": "application/x-ndjson"}
            async with http.stream("POST", "/v1/request/demo", json=body, headers=headers) as r:
                lines = r.aiter_lines()
                first = json.loads(await anext(lines))
                assert stack.server is not None
                stack.server.should_exit = True
                rest = [json.loads(line) async for line in lines]
            *responses, end = [first, *rest]
            assert [e["payload"]["i"] for e in responses] == [1, 2, 3]
            assert end["event"] == "end" and end["final"] is True


async def test_begin_shutdown_ends_sse_streams_and_readiness() -> None:
    with running_stack(base_settings()) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            async with http.stream("GET", "/v1/subscribe", params={"types": "x.y"}) as response:
                assert response.status_code == 200
                gateway = stack.gateway
                assert gateway is not None
                stack.loop.call_soon_threadsafe(gateway.begin_shutdown)
                async with asyncio.timeout(5.0):
                    text = "".join([chunk async for chunk in response.aiter_text()])
            assert "shutting down" in text
            ready = await http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["error"]["message"] == "shutting down"


async def test_server_stop_ends_sse_streams_without_a_hook() -> None:
    # As `busgate run` stops its gateway: uvicorn's should_exit only, no begin_shutdown().
    stack = Stack(base_settings())
    stack.graceful_shutdown = 60  # the stream must end by itself, not by this timeout
    stack.start()
    try:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            async with http.stream("GET", "/v1/subscribe", params={"types": "x.y"}) as response:
                assert response.status_code == 200
                server = stack.server
                assert server is not None and stack.serve_task is not None

                def stop() -> None:
                    server.should_exit = True

                stack.loop.call_soon_threadsafe(stop)
                async with asyncio.timeout(5.0):
                    text = "".join([chunk async for chunk in response.aiter_text()])
            assert "shutting down" in text

            async def stopped() -> bool:
                assert stack.serve_task is not None
                return stack.serve_task.done()

            await eventually(stopped, timeout=5.0)
    finally:
        stack.stop()


async def test_the_bus_password_is_shown_nowhere(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 30 item 8: the public /readyz answered the gateway's bus URL with its password,
    and the gateway logged it; that post office is the one the broker trusts to set CLR."""
    caplog.set_level(logging.INFO)
    secret = "s3cret-never-shown"
    stack = Stack(base_settings())
    stack.offices = {"gw": secret}
    where = f"bus://gw:***@127.0.0.1:{stack.broker_port}"
    stack.settings = replace(stack.settings, bus_url=where.replace("***", secret))
    shown: list[str] = []
    try:
        stack.start()
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["bus"] == where
            await stack.run(stack.stop_broker())
            await eventually(lambda: not_ready(http))
            answers = [
                await http.get("/readyz"),
                await http.post("/v1/request/demo", json=ECHO),
                await http.get("/v1/admin/status"),
            ]
            for answer in answers:
                assert answer.status_code == 503
                assert f"not connected to the bus at {where}" in answer.text, answer.text
            shown += [ready.text, *(answer.text for answer in answers)]
    finally:
        stack.stop()
    assert f"connected to the bus at {where}" in caplog.text
    assert secret not in caplog.text
    assert not [text for text in shown if secret in text]


async def not_ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 503
