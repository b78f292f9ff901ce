"""JetStream on a real 3-node nats-server cluster (PROTOCOL.md 10.1, 10.2): the stream's
replicas, and what a link does while a node of the cluster is gone.

- The stream gets 3 replicas; an existing one with fewer is reported, and updated when asked.
- A durable subscription whose JetStream consumer lived on the node that dies, while its own
  connection is on a survivor, gets a new consumer and misses nothing.
- A confirmed publish in flight when the stream's leader dies returns (sent again, stored once).
- While JetStream cannot answer at all (two of three nodes gone: no quorum), a link comes up
  and plain requests work; a durable subscription and a confirmed publish made meanwhile
  succeed once the nodes are back.

Every test that kills a node starts it again and waits for the cluster to be whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from bus.asyncio.client import Client, Subscription, connect
from bus.asyncio.service import Service
from tests.nats_cluster import NatsCluster

pytestmark = [pytest.mark.nats, pytest.mark.slow, pytest.mark.timeout(180)]

#: A bound on waits on two loaded cores (a leader election takes 4-9 s), not a speed check.
WAIT = 60.0


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    made: list[Client] = []
    yield made
    for client in made:
        await client.close()


async def _connect(url: str, name: str, made: list[Client]) -> Client:
    client = await connect(url, name, backoff_initial=0.1, backoff_max=1.0)
    made.append(client)
    return client


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = WAIT) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)


async def _replicas(client: Client) -> int:
    """The stream's replicas once the link has it (``manage.status``), 0 before."""
    return int((await client.status()).get("streamReplicas", 0))


async def _stream_info(cluster: NatsCluster, name: str) -> tuple[int, int]:
    """(replicas, messages) of a stream, asked with nats-py (again while it elects a leader)."""
    nc = await nats.connect([node.url for node in cluster.nodes if node.alive])
    try:
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    info = await nc.jetstream(timeout=5).stream_info(name)
                    break
                except nats.errors.TimeoutError:
                    continue
    finally:
        await nc.close()
    return info.config.num_replicas or 1, info.state.messages


async def _whole(cluster: NatsCluster, *killed: int) -> None:
    for index in killed:
        cluster.restart(index)
    await asyncio.to_thread(cluster.wait_healthy)


async def _take(sub: Subscription, count: int) -> list[int]:
    got: list[int] = []
    async with asyncio.timeout(WAIT):
        while len(got) < count:
            message = await sub.get()
            got.append(int(message.payload_data()["i"]))
    return got


async def test_the_stream_gets_three_replicas_on_a_cluster(
    nats_cluster: NatsCluster, clients: list[Client]
) -> None:
    client = await _connect(nats_cluster.url, "maker", clients)
    await _until(lambda: _replicas_are(client, 3))
    assert await _stream_info(nats_cluster, "BUSGATE") == (3, 0)


async def _replicas_are(client: Client, count: int) -> bool:
    return await _replicas(client) == count


async def test_one_replica_is_reported_and_updated_when_asked(
    nats_cluster: NatsCluster, clients: list[Client], caplog: pytest.LogCaptureFixture
) -> None:
    nc = await nats.connect(nats_cluster.nodes[0].url)
    try:
        config = StreamConfig(name="ONECOPY", subjects=["one.evt.>"], num_replicas=1)
        await nc.jetstream().add_stream(config)
    finally:
        await nc.close()
    caplog.set_level(logging.WARNING, "bus.asyncio.nats")
    url = nats_cluster.url + "?prefix=one&stream=ONECOPY"
    plain = await _connect(url, "plain", clients)
    await _until(lambda: _replicas_are(plain, 1))  # used, but not without a word:
    warned = [r.getMessage() for r in caplog.records if "ONECOPY" in r.getMessage()]
    assert any("has 1 replica(s) on a cluster of 3" in text for text in warned), warned
    assert "?replicas=3" in warned[0]
    assert (await _stream_info(nats_cluster, "ONECOPY"))[0] == 1

    asking = await _connect(url + "&replicas=3", "asking", clients)
    await _until(lambda: _replicas_are(asking, 3))
    assert (await _stream_info(nats_cluster, "ONECOPY"))[0] == 3


async def test_a_two_node_cluster_gets_one_replica_and_says_why(
    tmp_path: Path, clients: list[Client], caplog: pytest.LogCaptureFixture
) -> None:
    small = NatsCluster(tmp_path, size=2, name="small").start()
    try:
        caplog.set_level(logging.WARNING, "bus.asyncio.nats")
        client = await _connect(small.url, "small", clients)
        await _until(lambda: _replicas_are(client, 1))
        assert any("fewer than 3 JetStream servers" in r.getMessage() for r in caplog.records)
    finally:
        small.stop()


async def _durables_until_one_elsewhere(
    client: Client, cluster: NatsCluster, home: int
) -> tuple[Subscription, int]:
    """Durable subscriptions of ``client`` (on node ``home``) until the JetStream consumer of
    one lives on another node: that subscription and the node."""
    for index in range(20):
        sub = await client.subscribe(f"far{index}.*", resume=True)
        jetstream = client._transport.jetstream  # type: ignore[union-attr]
        consumer = jetstream._followers[sub.key].consumer
        for node_index, node in enumerate(cluster.nodes):
            _, body = node.monitor("/jsz?consumers=true")
            for account in body.get("account_details") or []:
                for stream in account.get("stream_detail") or []:
                    for detail in stream.get("consumer_detail") or []:
                        leader = (detail.get("cluster") or {}).get("leader")
                        if detail.get("name") == consumer and leader == node.name:
                            if node_index != home:
                                return sub, node_index
    raise AssertionError("20 consumers, all on the subscriber's own node")


async def test_a_consumer_on_a_node_that_dies_is_replaced(
    nats_cluster: NatsCluster, clients: list[Client]
) -> None:
    cluster = nats_cluster
    home = 0
    subscriber = await _connect(cluster.urls(home), "subscriber", clients)
    await _until(lambda: _replicas_are(subscriber, 3))
    sub, far = await _durables_until_one_elsewhere(subscriber, cluster, home)
    survivor = next(index for index in range(3) if index not in (home, far))
    publisher = await _connect(cluster.urls(survivor), "publisher", clients)
    for i in range(3):
        await publisher.publish(f"{sub.key[:-2]}.x", {"i": i}, confirm=True, timeout=30.0)
    assert await _take(sub, 3) == [0, 1, 2]

    cluster.kill(far)
    try:
        for i in range(3, 8):
            await publisher.publish(f"{sub.key[:-2]}.x", {"i": i}, confirm=True, timeout=30.0)
        assert await _take(sub, 5) == [3, 4, 5, 6, 7]  # its consumer went with the node
        assert subscriber.reconnects == 0  # the connection itself stayed
    finally:
        await _whole(cluster, far)


async def test_a_confirmed_publish_in_flight_when_the_leader_dies_returns(
    nats_cluster: NatsCluster, clients: list[Client]
) -> None:
    cluster = nats_cluster
    probe = await _connect(cluster.url, "probe", clients)
    await _until(lambda: _replicas_are(probe, 3))
    leader = cluster.stream_leader("BUSGATE")
    home = next(index for index in range(3) if index != leader)
    publisher = await _connect(cluster.urls(home), "steady", clients)
    _, before = await _stream_info(cluster, "BUSGATE")
    seqs: list[int] = []

    async def publish(count: int) -> None:
        for i in range(count):
            seq = await publisher.publish("inflight.x", {"i": i}, confirm=True, timeout=30.0)
            assert seq is not None
            seqs.append(seq)
            await asyncio.sleep(0.05)  # the publishes span the election

    publishing = asyncio.create_task(publish(40))
    await _until(lambda: _at_least(seqs, 5))
    cluster.kill(leader)
    try:
        await asyncio.wait_for(publishing, WAIT)  # no RequestTimeout: sent again until stored
        assert publisher.reconnects == 0
        assert seqs == sorted(set(seqs))
        _, after = await _stream_info(cluster, "BUSGATE")
        assert after - before == 40  # each stored once
    finally:
        await _whole(cluster, leader)


async def _at_least(items: list[int], count: int) -> bool:
    return len(items) >= count


async def test_without_jetstream_requests_work_and_durables_wait_for_it(
    nats_cluster: NatsCluster, clients: list[Client]
) -> None:
    cluster = nats_cluster
    probe = await _connect(cluster.url, "probe2", clients)
    await _until(lambda: _replicas_are(probe, 3))
    cluster.kill(1)
    cluster.kill(2)  # no quorum: JetStream answers nothing
    try:
        # a link comes up at once, and requests work: they do not need JetStream
        server = await asyncio.wait_for(_connect(cluster.urls(0), "server", clients), 15.0)
        service = Service(server, "nojs")

        @service.command("echo")
        async def echo(request: object) -> dict[str, int]:
            return {"ok": 1}

        await service.start()
        caller = await asyncio.wait_for(_connect(cluster.urls(0), "caller", clients), 15.0)
        answer = await caller.request("nojs", "echo", {}, timeout=10.0)
        assert answer.payload_data() == {"ok": 1}
        # a durable subscription and a confirmed publish made now succeed once it is back
        sub = await caller.subscribe("late.*", resume=True)
        publishing = asyncio.create_task(
            caller.publish("late.x", {"i": 1}, confirm=True, timeout=WAIT)
        )
        await asyncio.sleep(1.0)
        assert not publishing.done()
    finally:
        await _whole(cluster, 1, 2)
    assert await asyncio.wait_for(publishing, WAIT) is not None
    assert await _take(sub, 1) == [1]
    await service.stop()
