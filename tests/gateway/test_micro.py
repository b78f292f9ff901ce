"""NATS micro (gateway/micro.py, bus/asyncio/micro.py; PROTOCOL.md 10.3) against a real
nats-server and nats.py's own micro framework: a NATS shop's services are listed in
``/v1/services`` and reached at ``POST /v1/{service}/{endpoint}``, and busgate's services answer
``$SRV.PING``, ``$SRV.INFO`` and ``$SRV.STATS`` as nats.py reads them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import nats
import nats.micro
import pytest
from nats.micro.request import Request as MicroRequest
from nats.micro.service import ServiceInfo, ServicePing, ServiceStats

from bus.asyncio.micro import micro_name
from tests.conftest import NatsServer
from tests.gateway.conftest import Stack, base_settings, eventually, running_stack

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module")
def nats_stack(nats_server: NatsServer) -> Iterator[Stack]:
    """A gateway and the demo service on the session's nats-server."""
    with running_stack(base_settings(), bus_url=nats_server.url) as stack:
        yield stack


@pytest.fixture
async def calc(nats_server: NatsServer) -> AsyncIterator[list[Any]]:
    """Two instances of a service written with nats.py's micro framework."""

    async def add(req: MicroRequest) -> None:
        args = json.loads(req.data)
        await req.respond(json.dumps({"sum": args["a"] + args["b"]}).encode())

    async def div(req: MicroRequest) -> None:
        args = json.loads(req.data)
        if args["b"] == 0:
            await req.respond_error("400", "division by zero")
            return
        await req.respond(json.dumps({"q": args["a"] / args["b"]}).encode())

    async def raw(req: MicroRequest) -> None:
        await req.respond(b"\x00\x01 not json")

    connections, services = [], []
    for _ in range(2):
        nc = await nats.connect(nats_server.url)
        service = await nats.micro.add_service(nc, name="calc", version="1.2.0",
                                               description="arithmetic")  # fmt: skip
        group = service.add_group(name="calc")
        for name, handler in (("add", add), ("div", div), ("raw", raw)):
            await group.add_endpoint(name=name, handler=handler)
        connections.append(nc)
        services.append(service)
    yield services
    for service in services:
        await service.stop()
    for nc in connections:
        await nc.close()


async def test_micro_services_are_listed_and_reached(nats_stack: Stack, calc: list[Any]) -> None:
    async with httpx.AsyncClient(base_url=nats_stack.url, timeout=15.0) as http:

        async def listed() -> bool:
            services = (await http.get("/v1/services")).json()["services"]
            return any(s["group"] == "calc" and s["instances"] == 2 for s in services)

        await eventually(listed, timeout=15)
        services = (await http.get("/v1/services")).json()["services"]
        (entry,) = [s for s in services if s["group"] == "calc"]
        assert entry["kind"] == "micro" and entry["commands"] == ["add", "div", "raw"]
        assert entry["micro"]["version"] == "1.2.0"
        assert {e["subject"] for e in entry["micro"]["endpoints"]} == {
            "calc.add", "calc.div", "calc.raw"
        }  # fmt: skip
        assert [s["group"] for s in services].count("demo") == 1  # busgate's: from heartbeats
        added = await http.post("/v1/calc/add", json={"a": 2, "b": 3})
        assert added.status_code == 200 and added.json() == {"sum": 5}
        refused = await http.post("/v1/calc/div", json={"a": 1, "b": 0})
        assert refused.status_code == 400
        assert refused.json()["error"] == {"code": "nak", "message": "division by zero", "rcd": 400}
        raw = await http.post("/v1/calc/raw", content=b"{}")
        assert raw.status_code == 200 and raw.content == b"\x00\x01 not json"
        assert raw.headers["content-type"] == "application/octet-stream"
        unknown = await http.post("/v1/calc/mul", json={})
        assert unknown.status_code == 404 and "add, div, raw" in unknown.json()["error"]["message"]
        demo = await http.post("/v1/demo/echo", json={"x": 1})  # busgate's typed route still
        assert demo.status_code == 200 and demo.json()["payload"] == {"x": 1}


async def test_busgate_services_answer_micro_discovery(
    nats_stack: Stack, nats_server: NatsServer
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        async with httpx.AsyncClient(base_url=nats_stack.url, timeout=15.0) as http:
            assert (await http.post("/v1/demo/echo", json={"x": 1})).status_code == 200
        info = ServiceInfo.from_dict(json.loads((await nc.request("$SRV.INFO.demo", b"")).data))
        assert info.name == "demo" and info.metadata["busgate"] == "1"
        assert {e.name for e in info.endpoints} >= {"echo", "count", "time"}
        echo = next(e for e in info.endpoints if e.name == "echo")
        assert (echo.subject, echo.queue_group) == ("bus.grp.demo", "demo")
        ping = ServicePing.from_dict(json.loads((await nc.request(f"$SRV.PING.demo.{info.id}",
                                                                 b"")).data))  # fmt: skip
        assert ping.id == info.id
        stats = ServiceStats.from_dict(json.loads((await nc.request("$SRV.STATS.demo", b"")).data))
        by_name = {e.name: e for e in stats.endpoints}
        assert by_name["echo"].num_requests >= 1
        everyone: list[dict[str, Any]] = []
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SRV.PING", b"", reply=inbox)
        with_timeout = asyncio.timeout(1.0)
        try:
            async with with_timeout:
                while True:
                    everyone.append(json.loads((await sub.next_msg()).data))
        except TimeoutError:
            pass
        assert "demo" in {answer["name"] for answer in everyone}
    finally:
        await nc.close()


def test_micro_names() -> None:
    assert micro_name("demo") == "demo"
    assert micro_name("shop.orders:v2") == "shop_orders_v2"
