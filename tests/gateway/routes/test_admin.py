"""``/v1/admin/...``: connections, health, the journal and a manager's actions, through a real
gateway (under uvicorn) to a real broker with a journal, as the console's Bus view uses them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from bus.asyncio.client import Client, connect
from bus.asyncio.service import Service
from bus.broker import Broker, BrokerConfig
from bus.broker.config import merge_journal
from bus.demo import create_demo_service
from gateway.app import create_app
from gateway.process.settings import ApiKey
from tests.gateway.conftest import base_settings, free_port

WAIT = 10.0


@dataclass
class Site:
    broker: Broker
    bus_url: str
    service_client: Client
    demo: Service


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    config = BrokerConfig(
        host="127.0.0.1",
        port=0,
        open=True,
        offices={"admin": "pw"},
        managers=frozenset({"admin"}),
        journal=merge_journal(None, {"directory": str(tmp_path / "journal")}),
    )
    async with Broker(config) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        client = await connect(url, name="svc")
        demo = create_demo_service(client, heartbeat_interval=1.0)
        await demo.start()
        yield Site(broker, url, client, demo)
        await demo.stop()
        await client.close()


@contextlib.asynccontextmanager
async def gateway(site: Site, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    options: dict[str, Any] = {"bus_url": site.bus_url, "port": free_port(), "web_dir": ""}
    options.update(settings)
    app = create_app(base_settings(**options))
    config = uvicorn.Config(app, host="127.0.0.1", port=options["port"], log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await asyncio.wait_for(app.state.gateway.bridge.wait_connected(WAIT), WAIT)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{options['port']}", timeout=WAIT
        ) as http:
            yield http
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def test_connections_say_who_is_on_the_bus_from_where_and_what_they_hold(
    site: Site,
) -> None:
    async with gateway(site, bus_name="admin", bus_secret="pw") as http:
        links = (await http.get("/v1/admin/connections")).json()["connections"]
    by_office = {link["office"]: link for link in links}
    assert {"svc", "admin"} <= set(by_office)
    service = by_office["svc"]
    assert service["ready"] is True and service["peer"].startswith("127.0.0.1:")
    assert "demo" in service["groups"] and "OAM.PROBE" in service["patterns"]
    assert service["inbox"].startswith("_INBOX.") and service["inbox"] not in service["groups"]
    assert isinstance(service["queuedBytes"], int)


async def test_status_has_the_journal_health_and_the_journal_can_be_browsed(site: Site) -> None:
    async with gateway(site, bus_name="admin", bus_secret="pw") as http:
        answered = await http.post("/v1/request/demo", json={"CMD": "echo", "x": 1})
        assert answered.status_code == 200
        status = (await http.get("/v1/admin/status")).json()
        assert status["journal"]["appended"] >= 2 and status["journal"]["errors"] == 0
        records = (await http.get("/v1/admin/journal?limit=20&group=demo")).json()["records"]
        assert records and all(record["GRP"] == "demo" for record in records)
        assert any(record["TYP"] == "RQS" and record["CMD"] == "echo" for record in records)
        newest = (await http.get("/v1/admin/journal?limit=1")).json()["records"]
        assert len(newest) == 1 and newest[0]["ts"] >= records[-1]["ts"]
        assert (await http.get("/v1/admin/journal?limit=0")).status_code == 400


async def test_drain_a_group_and_disconnect_a_link(site: Site) -> None:
    async with gateway(site, bus_name="admin", bus_secret="pw") as http:
        drained = await http.post("/v1/admin/groups/demo/drain")
        assert drained.json() == {"group": "demo", "drained": 1}
        refused = await http.post("/v1/request/demo", json={"CMD": "echo"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (503, "no_responders")
        links = (await http.get("/v1/admin/connections")).json()["connections"]
        number = next(link["link"] for link in links if link["office"] == "svc")
        closed = await http.post(f"/v1/admin/connections/{number}/disconnect")
        assert closed.json() == {"link": number}

        async def gone() -> bool:
            listing = (await http.get("/v1/admin/connections")).json()["connections"]
            return all(link["link"] != number for link in listing)

        async with asyncio.timeout(WAIT):
            while not await gone():
                await asyncio.sleep(0.05)
        missing = await http.post("/v1/admin/connections/999999/disconnect")
        assert missing.status_code == 404


async def test_a_gateway_that_is_not_a_manager_says_so(site: Site) -> None:
    async with gateway(site) as http:
        response = await http.get("/v1/admin/connections")
    assert response.status_code == 403
    assert "not one of the broker's managers" in response.json()["error"]["message"]


async def test_only_a_key_for_everything_may_manage(site: Site) -> None:
    keys = (
        ApiKey("ops", "ops-key"),
        ApiKey("ci", "ci-key", groups=("demo",), types=("ci.*",)),
    )
    async with gateway(site, bus_name="admin", bus_secret="pw", api_keys=keys) as http:
        assert (await http.get("/v1/admin/connections")).status_code == 401
        limited = await http.get("/v1/admin/connections", headers={"X-API-Key": "ci-key"})
        assert limited.status_code == 403
        full = await http.get("/v1/admin/connections", headers={"X-API-Key": "ops-key"})
        assert full.status_code == 200
