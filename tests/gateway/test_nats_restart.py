"""The gateway on NATS survives a nats-server killed mid-traffic and started again (same port)."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import NatsServer
from tests.gateway.conftest import Stack, base_settings, eventually, running_stack


async def _ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 200


async def test_a_nats_restart_fails_in_flight_clearly_and_streams_go_on() -> None:
    server = NatsServer().start()
    try:
        with running_stack(base_settings(), bus_url=server.url) as stack:
            async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
                await _restart_under_the_gateway(server, stack, http)
    finally:
        server.stop()


async def _restart_under_the_gateway(
    server: NatsServer, stack: Stack, http: httpx.AsyncClient
) -> None:
    params = {"types": "after.restart"}
    async with http.stream("GET", "/v1/subscribe", params=params) as stream:
        lines = stream.aiter_lines()
        in_flight = asyncio.create_task(
            http.post("/v1/request/demo", json={"CMD": "sleep", "seconds": 4})
        )

        async def sent() -> bool:
            assert stack.gateway is not None
            return stack.gateway.bridge.in_flight == 1

        await eventually(sent)
        server.kill()
        response = await asyncio.wait_for(in_flight, 3.0)  # at once, not after its timeout
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "bus_unavailable"
        assert (await http.get("/readyz")).status_code == 503

        await asyncio.to_thread(server.restart)
        await eventually(lambda: _ready(http), timeout=15.0)

        async def answered() -> bool:
            echo = await http.post("/v1/request/demo", json={"CMD": "echo", "x": 1})
            return echo.status_code == 200  # the demo service is back on NATS too

        await eventually(answered, timeout=15.0, every=0.2)
        posted = await http.post("/v1/publish/after.restart", json={"ok": 1})
        assert posted.status_code == 202
        async with asyncio.timeout(10.0):  # the SSE stream opened before the restart
            async for line in lines:
                if line.startswith("data:"):
                    assert '"ok":1' in line
                    break
