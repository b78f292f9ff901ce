"""Several gateways on one bus, as processes: the topology of docker-compose.yml without Docker.

For each transport (the embedded broker, and NATS) the test starts real processes: the bus (a
``nats-server``, or ``busgate broker``), ``busgate broker --objects-port`` as the Object System
hub that the gateways link to (bridged to the NATS bus with ``BUSGATE_OBJECTS_BUS_URL``), two
``busgate gateway`` processes (uvicorn) and ``busgate demo --instances 2``. Then a client that
hits either gateway, as behind a load balancer, gets the same service.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import IO

import httpx
import pytest

from tests.conftest import TRANSPORTS, NatsServer, free_tcp_port
from tests.gateway.test_events import SseReader
from tests.gateway.test_ws import WsClient

# A bound on start-up, not a speed check: five processes start on two loaded cores.
WAIT = 60.0
BUSGATE = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]


@dataclass
class Topology:
    """The running processes and their addresses."""

    bus_url: str
    gateways: list[str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log: IO[bytes] = field(default_factory=tempfile.TemporaryFile)

    def spawn(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [*BUSGATE, *args],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.log.close()


async def _wait_ready(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=2.0) as http:
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        response = await http.post("/v1/request/demo", json={"CMD": "echo"})
                        if response.status_code == 200:  # the demo service is there too
                            return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)


@pytest.fixture(scope="module", params=TRANSPORTS)
def topology(request: pytest.FixtureRequest) -> Iterator[Topology]:
    objects_port = free_tcp_port()
    hub = ["broker", "--open", "--objects-port", str(objects_port), "--log-level", "WARNING"]
    nats: NatsServer | None = None
    if request.param == "nats":
        nats = request.getfixturevalue("nats_server")
        bus_url = nats.url
        env = {"BUSGATE_OBJECTS_BUS_URL": bus_url}
        hub_port = free_tcp_port()
    else:
        hub_port = free_tcp_port()
        bus_url, env = f"bus://127.0.0.1:{hub_port}", {}
    ports = [free_tcp_port(), free_tcp_port()]
    running = Topology(bus_url, [f"http://127.0.0.1:{port}" for port in ports])
    try:
        running.spawn(*hub, "--port", str(hub_port), **env)
        for port in ports:
            running.spawn(
                *("gateway", "--bus", bus_url, "--port", str(port), "--auth", "off"),
                *("--web-dir", "", "--log-level", "warning"),
                BUSGATE_OBJECTS_LINK=f"127.0.0.1:{objects_port}",
            )
        running.spawn("demo", "--bus", bus_url, "--instances", "2")

        async def ready() -> None:
            await asyncio.gather(*(_wait_ready(url) for url in running.gateways))

        try:
            asyncio.run(ready())
        except TimeoutError:
            running.log.seek(0)
            errors = running.log.read().decode(errors="replace")[-4000:]
            pytest.fail(f"the topology did not get ready within {WAIT:g} s; stderr:\n{errors}")
        yield running
    finally:
        running.stop()


@pytest.fixture
async def gateways(topology: Topology) -> AsyncIterator[list[httpx.AsyncClient]]:
    clients = [httpx.AsyncClient(base_url=url, timeout=WAIT) for url in topology.gateways]
    yield clients
    for client in clients:
        await client.aclose()


async def test_any_gateway_answers_any_request(gateways: list[httpx.AsyncClient]) -> None:
    for n in range(10):
        http = gateways[n % 2]  # as a load balancer would alternate
        response = await http.post("/v1/request/demo", json={"CMD": "echo", "n": n})
        assert response.status_code == 200, response.text
        assert response.json()["payload"]["n"] == n
    streamed = await gateways[1].post(
        "/v1/request/demo",
        json={"CMD": "count", "n": 3},
        headers={"Accept": "application/x-ndjson"},
    )
    assert len(streamed.text.strip().splitlines()) == 3


async def test_sse_on_one_gateway_gets_what_is_published_via_the_other(
    gateways: list[httpx.AsyncClient],
) -> None:
    first, second = gateways
    for reader_http, writer_http, kind in ((first, second, "a"), (second, first, "b")):
        params = {"types": f"across.{kind}"}
        async with reader_http.stream("GET", "/v1/subscribe", params=params) as response:
            assert response.status_code == 200
            reader = SseReader(response)
            for c in (1, 2):
                posted = await writer_http.post(f"/v1/publish/across.{kind}", json={"c": c})
                assert posted.status_code == 202
            events = [json.loads((await reader.next_event(WAIT))["data"]) for _ in range(2)]
        assert [event["payload"]["c"] for event in events] == [1, 2]


async def test_an_object_client_sees_one_that_left_the_other_gateway(
    topology: Topology,
) -> None:
    urls = [url.replace("http://", "ws://") + "/ws" for url in topology.gateways]
    watcher = await WsClient.open(urls[0], **{"receive-mode": "no_echo"})
    leaver = await WsClient.open(urls[1], **{"receive-mode": "no_echo"})
    try:
        await leaver.send({"event": "hello/there", "from": "b"})
        hello = await watcher.expect("hello/there")
        assert hello.metadata["from"] == "b"  # routed from gateway B to gateway A
        await leaver.close()
        gone = await watcher.expect("routing/disconnect", routing_id=leaver.routing_id)
        assert gone.metadata["routing-id"] == leaver.routing_id
    finally:
        await watcher.close()


async def test_an_object_client_reaches_the_bus_service_on_either_transport(
    topology: Topology,
) -> None:
    # The hub's bridge is a client of the bus in use (NATS or the broker).
    client = await WsClient.open(topology.gateways[1].replace("http://", "ws://") + "/ws")
    try:
        await client.send(
            {
                "event": "services/request",
                "id": "q2",
                "name": "demo",
                "request": "echo",
                "type": "application/json",
            },
            b'{"x": 7}',
        )
        reply = await client.expect("services/reply", in_reply_to="q2")
        assert json.loads(reply.payload) == {"x": 7}
    finally:
        await client.close()
