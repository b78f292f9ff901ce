"""docker-compose.yml run as processes: several gateways on one bus, without Docker.

The processes are the compose file's own: each service's ``command``, ``environment`` and
``healthcheck`` read from ``docker-compose.yml`` (``tests/test_compose.py`` parses it), with the
container addresses mapped to loopback ports (``nats:4222``, ``broker:7890``, each service's
published ports, ``0.0.0.0``) and ``/data`` to a temporary directory. Services start in
``depends_on`` order, each one after the services it depends on passed their health check, as
``docker compose up`` does. Two variants: NATS as the bus (the compose defaults) and the
embedded broker (the overrides the compose file's header names, :data:`VARIANTS`). Not run:
``lb`` (nginx), ``report`` (a batch Spark job, tested in ``tests/pipeline``), ``prometheus`` and
``grafana`` (their files are checked by ``tests/test_deploy.py``). Then a client
that hits either gateway, as behind the load balancer, gets the same service.
"""

from __future__ import annotations

import asyncio
import graphlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from bus.journal import JournalReader
from bus.message import decode_message
from tests.conftest import NATS_SERVER, NatsServer, free_tcp_port
from tests.gateway.test_events import SseReader
from tests.gateway.test_ws import WsClient
from tests.test_compose import COMPOSE_FILE, SERVICES, as_argv, host_ports, interpolate

# A bound on start-up, not a speed check: six processes start on two loaded cores.
WAIT = 60.0
BUSGATE = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]

#: The compose variables of each variant: NATS (the defaults), or the embedded broker as the
#: bus (what the header of docker-compose.yml says to set).
VARIANTS: dict[str, dict[str, str]] = {
    "nats": {},
    "broker": {
        "BUSGATE_BUS": "bus://broker:4000",
        "BUSGATE_JOURNAL": "/data/journal/broker",
        "BUSGATE_OBJECTS_BUS": "bus://bridge:change-me@127.0.0.1:4000",
    },
}
#: Compose services not run as processes here (see the module doc).
NOT_RUN = frozenset({"lb", "report", "prometheus", "grafana"})
API_KEY = "change-me"  # of the compose default BUSGATE_API_KEYS demo:change-me


def start_order() -> list[str]:
    """The services to run, each after those it ``depends_on``."""
    graph = {
        name: set(service.get("depends_on", {})) - NOT_RUN
        for name, service in SERVICES.items()
        if name not in NOT_RUN
    }
    return list(graphlib.TopologicalSorter(graph).static_order())


@dataclass
class Loopback:
    """Compose addresses mapped to this machine: ``(service, container port)`` -> local port."""

    ports: dict[tuple[str, int], int]
    data: Path
    env: Mapping[str, str]

    @classmethod
    def allocate(cls, data: Path, env: Mapping[str, str]) -> Loopback:
        ports = {
            (name, container): free_tcp_port()
            for name, service in SERVICES.items()
            for _, container in host_ports(service)
        }
        return cls(ports, data, env)

    def port(self, service: str, container: int) -> int:
        return self.ports[(service, container)]

    def text(self, service: str, value: str) -> str:
        """One compose string (an argument, a variable's value) as it reads on loopback."""
        value = interpolate(value, self.env)
        for (name, container), local in self.ports.items():
            value = value.replace(f"{name}:{container}", f"127.0.0.1:{local}")
        for (name, container), local in self.ports.items():
            if name == service:  # the service's own ports, as it names them itself
                value = re.sub(rf"(?<![\d.]){container}(?!\d)", str(local), value)
        return value.replace("0.0.0.0", "127.0.0.1").replace("/data/", f"{self.data}/")

    def argv(self, service: str, command: list[str]) -> list[str]:
        argv = [self.text(service, arg) for arg in as_argv(command, self.env)]
        if argv[0] == "busgate":
            return [*BUSGATE, *argv[1:]]
        if argv[0] == "python":
            return [sys.executable, *argv[1:]]
        return argv

    def environment(self, service: str) -> dict[str, str]:
        given = SERVICES[service].get("environment", {})
        return {key: self.text(service, str(value)) for key, value in given.items()}


@dataclass
class Topology:
    """The running processes and their addresses."""

    loopback: Loopback
    gateways: list[str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    nats: NatsServer | None = None
    log: IO[bytes] = field(default_factory=tempfile.TemporaryFile)

    def start(self, name: str) -> None:
        """Start one compose service and wait until its health check passes."""
        service = SERVICES[name]
        if name == "nats":  # the image's entry point is nats-server; its flags come from compose
            port = self.loopback.port("nats", 4222)
            flags = self.loopback.argv(name, service["command"])
            self.nats = NatsServer(port, *flags).start()
            return
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.loopback.environment(name)}
        env.pop("BUSGATE_CONFIG", None)
        self.log.write(f"--- {name}\n".encode())
        self.log.flush()
        self.processes[name] = subprocess.Popen(
            self.loopback.argv(name, service["command"]),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self.wait_healthy(name, env)

    def wait_healthy(self, name: str, env: dict[str, str]) -> None:
        test = SERVICES[name]["healthcheck"]["test"]
        assert test[0] == "CMD", f"{name}: exec-form health check"
        probe = self.loopback.argv(name, test[1:])
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                self.fail(f"{name} exited with {self.processes[name].returncode}")
            done = subprocess.run(probe, env=env, capture_output=True, timeout=WAIT, check=False)
            if done.returncode == 0:
                return
            time.sleep(0.2)
        self.fail(f"{name} did not pass its health check within {WAIT:g} s")

    def fail(self, why: str) -> None:
        self.log.seek(0)
        errors = self.log.read().decode(errors="replace")[-4000:]
        pytest.fail(f"{why}; stderr of the processes:\n{errors}")

    def stop(self) -> None:
        running = list(reversed(self.processes.values()))
        for process in running:
            if process.poll() is None:
                process.terminate()
        for process in running:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if self.nats is not None:
            self.nats.stop()
        self.log.close()


async def _wait_ready(url: str) -> None:
    """Until the gateway has the bus and the demo service answers through it."""
    headers = {"X-API-Key": API_KEY}
    async with httpx.AsyncClient(base_url=url, timeout=2.0, headers=headers) as http:
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        response = await http.post("/v1/request/demo", json={"CMD": "echo"})
                        if response.status_code == 200:
                            return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def topology(request: pytest.FixtureRequest) -> Iterator[Topology]:
    if not os.path.exists(NATS_SERVER):
        pytest.skip("nats-server is not installed")
    with tempfile.TemporaryDirectory(prefix="busgate-compose-") as data:
        loopback = Loopback.allocate(Path(data), VARIANTS[request.param])
        gateways = [
            f"http://127.0.0.1:{loopback.port(name, 8080)}"
            for name in sorted(SERVICES)
            if name.startswith("gateway")
        ]
        running = Topology(loopback, gateways)
        try:
            for name in start_order():
                running.start(name)

            async def ready() -> None:
                await asyncio.gather(*(_wait_ready(url) for url in running.gateways))

            try:
                asyncio.run(ready())
            except TimeoutError:
                running.fail(f"the gateways did not get ready within {WAIT:g} s")
            yield running
        finally:
            running.stop()


@pytest.fixture
async def gateways(topology: Topology) -> AsyncIterator[list[httpx.AsyncClient]]:
    headers = {"X-API-Key": API_KEY}
    clients = [
        httpx.AsyncClient(base_url=url, timeout=WAIT, headers=headers) for url in topology.gateways
    ]
    yield clients
    for client in clients:
        await client.aclose()


def _ws_urls(topology: Topology) -> list[str]:
    return [f"{url.replace('http://', 'ws://')}/ws?key={API_KEY}" for url in topology.gateways]


def test_the_variants_are_the_ones_the_compose_file_documents() -> None:
    header = COMPOSE_FILE.read_text(encoding="utf-8").split("\nname:", 1)[0]
    for name, value in VARIANTS["broker"].items():
        assert f"{name}={value}" in header
    assert set(start_order()) | NOT_RUN == set(SERVICES)


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
    lines = [json.loads(line) for line in streamed.text.splitlines() if line.strip()]
    responses = [line for line in lines if line.get("event") == "response"]
    assert len(responses) == 3, lines  # and the end-of-stream marker


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
    urls = _ws_urls(topology)
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


async def test_a_websocket_subscriber_gets_bus_events_published_via_the_other_gateway(
    topology: Topology, gateways: list[httpx.AsyncClient]
) -> None:
    # The hub's bridge turns bus events into objects for every gateway's WebSocket clients.
    for reader, writer in ((0, 1), (1, 0)):
        kind = f"ws{reader}"
        ws = await WsClient.open(_ws_urls(topology)[reader], types=[f"bus/across.{kind}"])
        try:
            async with asyncio.timeout(WAIT):
                while True:  # until the subscription has crossed gateway, hub and bus
                    posted = await gateways[writer].post(f"/v1/publish/across.{kind}", json={})
                    assert posted.status_code == 202, posted.text
                    try:
                        obj = await asyncio.wait_for(ws.recv(), 0.5)
                    except TimeoutError:
                        continue
                    if obj.event is None:
                        break
            assert obj.type == f"bus/across.{kind}"
        finally:
            await ws.close()


async def test_an_object_client_reaches_the_bus_service_on_either_transport(
    topology: Topology,
) -> None:
    # The hub's bridge is a client of the bus in use (NATS or the broker).
    client = await WsClient.open(_ws_urls(topology)[1])
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


async def test_the_journal_the_report_reads_records_the_traffic(
    topology: Topology, gateways: list[httpx.AsyncClient]
) -> None:
    # The report job reads ${BUSGATE_JOURNAL}: the NATS recorder's, or the broker's own.
    report: Any = SERVICES["report"]["command"]
    argv = topology.loopback.argv("report", report)
    journal = Path(argv[argv.index("--journal") + 1])
    marker = f"journal-{time.monotonic_ns()}"
    response = await gateways[0].post("/v1/request/demo", json={"CMD": "echo", "m": marker})
    assert response.status_code == 200, response.text
    async with asyncio.timeout(WAIT):
        while True:
            records = JournalReader(journal).records()
            found = [decode_message(r.raw).typ for r in records if marker.encode() in r.raw]
            if {"RQS", "ACK"} <= set(found):
                return
            await asyncio.sleep(0.2)
