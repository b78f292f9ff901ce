"""docker-compose.yml run as processes: several gateways on one bus, without Docker.

The processes are the compose file's own: each service's ``command``, ``environment`` and
``healthcheck`` read from ``docker-compose.yml`` (``tests/test_compose.py`` parses it), with the
container addresses mapped to loopback ports (``nats1:4222``, ``nats2:6222``, ``broker:7890``:
each service's published and exposed ports, ``0.0.0.0``) and each volume on ``/data`` to a
directory of its own. Services start in ``depends_on`` order, those that do not depend on each
other together (the three NATS nodes), each group once the one before passed its health checks,
as ``docker compose up`` does. Two variants: the NATS cluster as the bus (the compose defaults)
and the embedded broker (the overrides the compose file's header names, :data:`VARIANTS`). Not
run: ``lb`` (nginx), ``report`` and the Spark master and worker (JVMs; the same daemons run in
``tests/pipeline/test_standalone_cluster.py``), ``spark`` (``busgate spark serve``, run in
``tests/pipeline/test_connect.py``), ``prometheus`` and ``grafana`` (their files are
checked by ``tests/test_deploy.py``). Then a client that hits either gateway, as behind the load
balancer, gets the same service, and when the recorder is killed its standby records on.
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
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from bus.asyncio.client import connect
from bus.journal import JournalReader
from bus.message.message import decode_message
from tests.conftest import NATS_SERVER, NatsServer, free_tcp_port
from tests.gateway.routes.test_events import SseReader
from tests.gateway.websocket.test_ws import WsClient
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
NOT_RUN = frozenset(
    {"lb", "report", "prometheus", "grafana", "spark-master", "spark-worker", "spark"}
)
API_KEY = "change-me"  # of the compose default BUSGATE_API_KEYS demo:change-me


def _graph() -> dict[str, set[str]]:
    return {
        name: set(service.get("depends_on", {})) - NOT_RUN
        for name, service in SERVICES.items()
        if name not in NOT_RUN
    }


def start_order() -> list[str]:
    """The services to run, each after those it ``depends_on``."""
    return list(graphlib.TopologicalSorter(_graph()).static_order())


def start_layers() -> list[list[str]]:
    """The services in groups that start together, each once the groups before are healthy
    (as ``docker compose up``: the three NATS nodes are healthy only once they have a quorum)."""
    sorter = graphlib.TopologicalSorter(_graph())
    sorter.prepare()
    layers = []
    while sorter.is_active():
        layer = sorted(sorter.get_ready())
        layers.append(layer)
        sorter.done(*layer)
    return layers


def _container_ports(service: Mapping[str, Any]) -> list[int]:
    """The ports a service's peers reach it on: published ones and ``expose``d ones."""
    ports = [container for _, container in host_ports(dict(service))]
    return ports + [int(str(port)) for port in service.get("expose", [])]


def _data_volume(service: str) -> str:
    """The name of the volume a service mounts on ``/data`` (``busgate-data``, ``nats1-data``)."""
    for volume in SERVICES.get(service, {}).get("volumes", []):
        name, _, path = str(volume).partition(":")
        if path.rstrip("/") == "/data":
            return name
    return "none"


@dataclass
class Loopback:
    """Compose addresses mapped to this machine: ``(service, container port)`` -> local port."""

    ports: dict[tuple[str, int], int]
    data: Path
    env: Mapping[str, str]

    @classmethod
    def allocate(cls, data: Path, env: Mapping[str, str]) -> Loopback:
        ports: dict[tuple[str, int], int] = {}
        for name, service in SERVICES.items():
            for container in _container_ports(service):
                port = free_tcp_port()
                while port in ports.values():  # the kernel may give a port it gave before
                    port = free_tcp_port()
                ports[(name, container)] = port
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
        volume = _data_volume(service)  # each volume mounted on /data is a directory here
        return value.replace("0.0.0.0", "127.0.0.1").replace("/data/", f"{self.data}/{volume}/")

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
    nats: dict[str, NatsServer] = field(default_factory=dict)
    log: IO[bytes] = field(default_factory=tempfile.TemporaryFile)

    def start_layer(self, names: list[str]) -> None:
        """Start services together, then wait until each passes its health check."""
        envs = {name: self.launch(name) for name in names}
        for name in names:
            self.wait_healthy(name, envs[name])

    def launch(self, name: str) -> dict[str, str]:
        """Start one compose service; returns the environment its health check runs in."""
        service = SERVICES[name]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.loopback.environment(name)}
        env.pop("BUSGATE_CONFIG", None)
        if service.get("image", "").startswith("nats:"):
            # the image's entry point is nats-server; its flags come from compose
            port = self.loopback.port(name, 4222)
            flags = self.loopback.argv(name, service["command"])
            (self.loopback.data / _data_volume(name)).mkdir(parents=True, exist_ok=True)
            self.nats[name] = NatsServer(port, *flags)
            self.nats[name].start()
            return env
        self.log.write(f"--- {name}\n".encode())
        self.log.flush()
        self.processes[name] = subprocess.Popen(
            self.loopback.argv(name, service["command"]),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        return env

    def wait_healthy(self, name: str, env: dict[str, str]) -> None:
        test = SERVICES[name]["healthcheck"]["test"]
        assert test[0] == "CMD", f"{name}: exec-form health check"
        probe = self.loopback.argv(name, test[1:])
        process = self.processes.get(name) or self.nats[name].process
        assert process is not None
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.fail(f"{name} exited with {process.returncode}")
            if _probe(probe, env):
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
        for node in self.nats.values():
            node.stop()
        self.log.close()


def _probe(argv: list[str], env: dict[str, str]) -> bool:
    """Run a health check; ``wget -q --spider URL`` (the nats image's) is a GET here."""
    if argv[0] == "wget":
        try:
            with urllib.request.urlopen(argv[-1], timeout=3) as response:
                return bool(response.status == 200)
        except OSError:
            return False
    done = subprocess.run(argv, env=env, capture_output=True, timeout=WAIT, check=False)
    return done.returncode == 0


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
            for layer in start_layers():
                running.start_layer(layer)

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


async def test_the_standby_recorder_takes_over_when_the_recorder_dies(topology: Topology) -> None:
    # Last in the module: it kills a service. The recorder's journal goes on (on either
    # variant the recorders journal the NATS cluster).
    recorder = topology.loopback.argv("journal", SERVICES["journal"]["command"])
    journal = Path(recorder[recorder.index("record") + 1])
    url = recorder[recorder.index("--bus") + 1]
    topology.processes["journal"].kill()
    topology.processes["journal"].wait(10)
    marker = f"standby-{time.monotonic_ns()}"
    client = await connect(url, "probe")
    try:
        assert await client.publish("standby.took", {"m": marker}, confirm=True, timeout=WAIT)
    finally:
        await client.close()
    try:
        async with asyncio.timeout(WAIT):
            while not any(marker.encode() in r.raw for r in JournalReader(journal).records()):
                await asyncio.sleep(0.2)
    except TimeoutError:
        topology.fail(f"the standby did not record within {WAIT:g} s")
    assert topology.processes["journal-standby"].poll() is None
