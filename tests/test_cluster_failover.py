"""A real 3-node NATS cluster loses a node under traffic (issue 31 item 1; PROTOCOL.md 10.4).

The cluster (``tests/nats_cluster.py``) runs JetStream; the bus's stream gets 3 replicas by
default. On node L, the leader of that stream: gateway A (``--bus nats://L``: one server, the
others learnt from it), the demo service, a confirmed publisher and a durable subscriber
(``bus.asyncio`` clients). Gateway B is on the two other nodes (``nats://M,N``: a URL of several
servers). An SSE client on each gateway, and one that leaves A a second after the kill and
comes back on B with ``Last-Event-ID``. Then ``kill -9`` L, not started again until the end:

- every confirmed publish returns (none raises: one in flight when the leader died is sent
  again with the same MID) and is stored once;
- the durable subscriber gets every confirmed event once, in stream order;
- no SSE client misses one or gets one twice, the one that moved included (ids are stream
  sequences);
- every HTTP request sent more than 5 s after the kill succeeds, on both gateways (the demo
  service moved to a survivor, and its heartbeats reach both gateways again);
- confirmed publishes over HTTP on both gateways (``?timeout=30``) are stored once and reach
  everybody too, and ``busgate listen`` started on L prints what is published afterwards.

Then L comes back, rejoins and holds the stream's events again. The figures (requests failed,
seconds until the last failure) are printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import nats
import pytest

from bus.asyncio.client import Client, Subscription, connect
from tests.conftest import free_tcp_port
from tests.gateway.routes.test_events import SseReader
from tests.nats_cluster import NatsCluster

pytestmark = [pytest.mark.nats, pytest.mark.slow, pytest.mark.timeout(240)]

BUSGATE = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
#: A bound on start-up and recovery waits on two loaded cores, not a speed check.
WAIT = 60.0
#: After the kill, HTTP requests must all succeed from this many seconds on (the issue's bound).
RECOVER = 5.0
#: Seconds of traffic after the kill.
AFTER_KILL = 12.0


@dataclass
class Proc:
    """A busgate process of the test, its output in a file."""

    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        env = {**os.environ, "BUSGATE_OBJECTS_LINK": ""}  # no Object System hub here
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name}\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class Traffic:
    """What the traffic saw."""

    confirmed: list[int] = field(default_factory=list)  # seqs the publisher got, in order
    over_http: dict[str, list[int]] = field(default_factory=dict)  # seqs per gateway, in order
    unavailable: list[float] = field(default_factory=list)  # when a publish got 503 over HTTP
    longest: float = 0.0  # seconds the slowest confirmed publish took
    publish_errors: list[str] = field(default_factory=list)
    requests: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # sent, status


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    failed = [proc for proc in started if proc.process is not None]
    for proc in failed:
        proc.stop()


def _gateway(name: str, url: str, root: Path) -> tuple[Proc, str]:
    port = free_tcp_port()
    argv = [*BUSGATE, "gateway", "--bus", url, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--timeout", "5", "--log-level", "info", "--web-dir", ""]
    return Proc(name, argv, root / f"{name}.log"), f"http://127.0.0.1:{port}"


async def _until(check: object, timeout: float = WAIT, every: float = 0.1) -> None:
    async with asyncio.timeout(timeout):
        while not await check():  # type: ignore[operator]
            await asyncio.sleep(every)


async def _stream_replicas(servers: list[str]) -> tuple[int, list[tuple[str, bool]]]:
    """The BUSGATE stream's replicas and its peers (name, current), asked with nats-py."""
    nc = await nats.connect(servers, connect_timeout=5)
    try:
        info = await nc.jetstream(timeout=5).stream_info("BUSGATE")
    finally:
        await nc.close()
    cluster = info.cluster
    peers = [(cluster.leader or "", True)] if cluster is not None else []
    peers += [(p.name, bool(p.current)) for p in (cluster.replicas or [])] if cluster else []
    return info.config.num_replicas or 1, peers


@contextlib.asynccontextmanager
async def _sse(base: str, types: str) -> AsyncIterator[tuple[SseReader, list[int]]]:
    """An SSE client of ``types``; what it got (ids) is collected into the list."""
    got: list[int] = []
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(10.0, read=None)) as http:
        async with http.stream("GET", "/v1/subscribe", params={"types": types}) as response:
            assert response.status_code == 200
            yield SseReader(response), got


async def _collect_sse(reader: SseReader, got: list[int]) -> None:
    while True:
        event = await reader.next_event(timeout=3600)
        if event.get("id", "").isdigit():
            got.append(int(event["id"]))


async def _moving_sse(first: str, then: str, got: list[int], switch: asyncio.Event) -> None:
    """An SSE client on ``first`` that leaves when ``switch`` is set and comes back on ``then``
    with ``Last-Event-ID``, as a browser behind a load balancer would."""
    async with _sse(first, "fo.*") as (reader, _):
        reading = asyncio.create_task(_collect_sse(reader, got))
        await switch.wait()
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    headers = {"Last-Event-ID": str(got[-1])}
    async with httpx.AsyncClient(base_url=then, timeout=httpx.Timeout(10.0, read=None)) as http:
        params = {"types": "fo.*"}
        async with http.stream("GET", "/v1/subscribe", params=params, headers=headers) as response:
            assert response.status_code == 200
            await _collect_sse(SseReader(response), got)


async def _collect_sub(sub: Subscription, got: list[int]) -> None:
    async for message in sub:
        assert message.seq is not None
        got.append(message.seq)


async def _publisher(client: Client, traffic: Traffic, stop: asyncio.Event) -> None:
    index = 0
    while not stop.is_set():
        index += 1
        began = time.monotonic()
        try:
            seq = await client.publish("fo.tick", {"i": index}, confirm=True, timeout=30.0)
        except Exception as exc:  # what the test reports: none may happen
            traffic.publish_errors.append(f"{index}: {type(exc).__name__}: {exc}")
            continue
        assert seq is not None
        traffic.confirmed.append(seq)
        traffic.longest = max(traffic.longest, time.monotonic() - began)
        await asyncio.sleep(0.02)


async def _http_publisher(name: str, base: str, traffic: Traffic, stop: asyncio.Event) -> None:
    """Confirmed publishes over HTTP; a cluster's confirm may wait for an election: 30 s. A 503
    (the gateway's link is moving to another node: nothing was sent) is tried again, as an
    HTTP client does, and noted."""
    seqs = traffic.over_http.setdefault(name, [])
    async with httpx.AsyncClient(base_url=base, timeout=60.0) as http:
        index = 0
        while not stop.is_set():
            index += 1
            params = {"confirm": "1", "timeout": "30"}
            at = time.monotonic()
            try:
                response = await http.post("/v1/publish/fo.http", params=params, json={"i": index})
            except httpx.HTTPError as exc:
                traffic.publish_errors.append(f"{name} {index}: {type(exc).__name__}")
                continue
            if response.status_code == 503:
                traffic.unavailable.append(at)
                await asyncio.sleep(0.1)
                continue
            if response.status_code != 200:
                traffic.publish_errors.append(f"{name} {index}: {response.text}")
                continue
            seqs.append(int(response.json()["seq"]))
            await asyncio.sleep(0.1)


async def _requester(name: str, base: str, traffic: Traffic, stop: asyncio.Event) -> None:
    sent = traffic.requests.setdefault(name, [])
    async with httpx.AsyncClient(base_url=base, timeout=15.0) as http:
        index = 0
        while not stop.is_set():
            index += 1
            at = time.monotonic()
            try:
                response = await http.post("/v1/request/demo", json={"CMD": "echo", "i": index})
                status = response.status_code
                if status == 200:
                    assert response.json()["payload"] == {"i": index}
            except httpx.HTTPError:
                status = 0
            sent.append((at, status))
            await asyncio.sleep(0.05)


async def test_a_node_killed_under_traffic_loses_nothing_and_clients_move(
    nats_cluster: NatsCluster, procs: list[Proc], tmp_path: Path
) -> None:
    cluster = nats_cluster
    everyone = [node.url for node in cluster.nodes]

    # The first link makes the stream: 3 replicas by default on a 3-node cluster.
    first = await connect(cluster.url, "maker")
    try:
        await _until(lambda: _status_has_replicas(first))
    finally:
        await first.close()
    replicas, _ = await _stream_replicas(everyone)
    assert replicas == 3

    leader = cluster.stream_leader("BUSGATE")
    assert leader >= 0
    others = [index for index in range(3) if index != leader]
    on_leader = cluster.urls(leader)  # one server: the rest learnt from it
    gateway_a, url_a = _gateway("gateway-a", on_leader, tmp_path)
    gateway_b, url_b = _gateway("gateway-b", cluster.urls(*others), tmp_path)
    demo = Proc("demo", [*BUSGATE, "demo", "--bus", on_leader], tmp_path / "demo.log")
    procs.extend([gateway_a, gateway_b, demo])
    for proc in (demo, gateway_a, gateway_b):
        proc.start()
    try:
        await _run(cluster, leader, on_leader, url_a, url_b)
    except BaseException:
        print("\n".join(proc.tail() for proc in procs))
        print("\n".join(f"--- {node.name}\n{node.tail(15)}" for node in cluster.nodes))
        raise


async def _status_has_replicas(client: Client) -> bool:
    return bool((await client.status()).get("streamReplicas"))


async def _echo_ok(base: str) -> bool:
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
        try:
            response = await http.post("/v1/request/demo", json={"CMD": "echo", "x": 1})
        except httpx.HTTPError:
            return False
        return response.status_code == 200


async def _run(cluster: NatsCluster, leader: int, on_leader: str, url_a: str, url_b: str) -> None:
    await _until(lambda: _echo_ok(url_a))
    await _until(lambda: _echo_ok(url_b))
    publisher = await connect(on_leader, "publisher")
    durable = await connect(on_leader, "durable")
    listen = await asyncio.create_subprocess_exec(
        *BUSGATE, "listen", "fo.after", "--bus", on_leader,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        sub = await durable.subscribe("fo.*", resume=True)
        async with (
            _sse(url_a, "fo.*") as (reader_a, sse_a),
            _sse(url_b, "fo.*") as (
                reader_b,
                sse_b,
            ),
        ):
            got: list[int] = []
            collectors = [
                asyncio.create_task(_collect_sub(sub, got)),
                asyncio.create_task(_collect_sse(reader_a, sse_a)),
                asyncio.create_task(_collect_sse(reader_b, sse_b)),
            ]
            moved: list[int] = []  # an SSE client that moves from A to B after the kill
            switch = asyncio.Event()
            collectors.append(asyncio.create_task(_moving_sse(url_a, url_b, moved, switch)))
            await _listening(listen, publisher)
            # A mark everybody has seen: what comes after it must reach everybody.
            mark = await publisher.publish("fo.mark", {}, confirm=True, timeout=30.0)
            assert mark is not None
            await _until(lambda: _seen_all(mark, got, sse_a, sse_b, moved), timeout=30.0)

            traffic = Traffic()
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(_publisher(publisher, traffic, stop)),
                asyncio.create_task(_http_publisher("a", url_a, traffic, stop)),
                asyncio.create_task(_http_publisher("b", url_b, traffic, stop)),
                asyncio.create_task(_requester("a", url_a, traffic, stop)),
                asyncio.create_task(_requester("b", url_b, traffic, stop)),
            ]
            await asyncio.sleep(2.0)
            killed_at, killed_wall = time.monotonic(), time.time()
            cluster.kill(leader)
            await asyncio.sleep(1.0)
            switch.set()
            await asyncio.sleep(AFTER_KILL - 1.0)
            stop.set()
            await asyncio.gather(*tasks)

            print(
                f"{len(traffic.confirmed)} confirmed publishes, the slowest took "
                f"{traffic.longest:.2f} s"
            )
            assert traffic.publish_errors == []
            late = [at - killed_at for at in traffic.unavailable if at - killed_at > RECOVER]
            assert late == [], "HTTP confirmed publishes refused > 5 s after the kill"
            confirmed = list(traffic.confirmed)
            for seqs in [traffic.confirmed, *traffic.over_http.values()]:
                assert seqs == sorted(set(seqs))  # in order
            for seqs in traffic.over_http.values():
                confirmed += seqs
            assert len(confirmed) == len(set(confirmed))  # each stored once
            last = max(confirmed)
            await _until(lambda: _seen_all(last, got, sse_a, sse_b, moved), timeout=30.0)
            for task in collectors:
                task.cancel()
            await asyncio.gather(*collectors, return_exceptions=True)
        clients = [("durable subscriber", got), ("SSE on A", sse_a), ("SSE on B", sse_b)]
        for name, seqs in [*clients, ("SSE moved from A to B by Last-Event-ID", moved)]:
            after = [seq for seq in seqs if seq > mark]
            assert after == sorted(set(after)), f"{name}: twice or out of order"
            missing = sorted(set(confirmed) - set(after))
            assert missing == [], f"{name} missed {len(missing)} confirmed events: {missing[:10]}"
        _check_requests(traffic, killed_at)
        for base in (url_a, url_b):  # the demo service's heartbeats come again from a survivor
            await _until(lambda base=base: _demo_seen_since(base, killed_wall), timeout=30.0)  # type: ignore[misc]
        # the CLI moved too: `busgate listen` on the dead node prints what comes now
        assert listen.stdout is not None
        await publisher.publish("fo.after", {"after": 1}, confirm=True, timeout=30.0)
        async with asyncio.timeout(30.0):
            while (await _listened(listen)) != {"after": 1}:
                pass
    finally:
        await publisher.close()
        await durable.close()
        if listen.returncode is None:
            listen.terminate()
        await listen.wait()
    await _rejoin(cluster, leader)


async def _listened(listen: asyncio.subprocess.Process) -> object:
    """The payload of the next event ``busgate listen`` prints (it ended: why, as an error)."""
    assert listen.stdout is not None and listen.stderr is not None
    line = await listen.stdout.readline()
    if not line:
        raise AssertionError((await listen.stderr.read()).decode(errors="replace"))
    return json.loads(line)["payload"]


async def _listening(listen: asyncio.subprocess.Process, publisher: Client) -> None:
    """Until ``busgate listen`` prints what is published (it has started and subscribed)."""
    async with asyncio.timeout(WAIT):
        while True:
            await publisher.publish("fo.after", {"probe": 1}, confirm=True, timeout=30.0)
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(_listened(listen), 1.0) == {"probe": 1}:
                    return


async def _demo_seen_since(base: str, when: float) -> bool:
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
        body = (await http.get("/v1/services")).json()
    return any(
        s["group"] == "demo" and s["instances"] == 1 and (s["last_seen"] or 0) > when
        for s in body["services"]
    )


async def _seen_all(seq: int, *lists: list[int]) -> bool:
    return all(seq in got for got in lists)


def _check_requests(traffic: Traffic, killed_at: float) -> None:
    for name, sent in traffic.requests.items():
        late = [(at - killed_at, status) for at, status in sent if at - killed_at > RECOVER]
        assert len(late) >= 10, f"gateway {name}: too few requests after the kill to judge"
        failed = [(round(at, 2), status) for at, status in late if status != 200]
        assert failed == [], f"gateway {name}: requests sent > {RECOVER} s after the kill failed"
        bad = [at - killed_at for at, status in sent if status != 200 and at >= killed_at]
        recovered = max(bad) if bad else 0.0
        print(
            f"gateway {name}: {len(bad)} of {len(sent)} requests failed after the kill, the last "
            f"sent {recovered:.2f} s after it"
        )


async def _rejoin(cluster: NatsCluster, leader: int) -> None:
    cluster.restart(leader)
    await asyncio.to_thread(cluster.wait_healthy)
    name = cluster.nodes[leader].name
    everyone = [node.url for node in cluster.nodes]

    async def current() -> bool:
        _, peers = await _stream_replicas(everyone)
        return (name, True) in peers and all(ok for _, ok in peers) and len(peers) == 3

    await _until(current)
