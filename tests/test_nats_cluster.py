"""``tests/nats_cluster.py``: the 3-node cluster the failover tests run on is a real one.

A stream with 3 replicas made through one node is led by some node; killing the leader
(``kill -9``) leaves the other two to elect a new one and go on storing; the killed node comes
back on its ports and store, rejoins, and catches up with what was stored without it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from tests.nats_cluster import NatsCluster, free_tcp_ports

pytestmark = [pytest.mark.nats, pytest.mark.slow, pytest.mark.timeout(120)]


async def _publish(servers: list[str], subject: str, count: int) -> list[int]:
    """Publish ``count`` messages into the stream (retrying while it elects a leader)."""
    nc = await nats.connect(servers, connect_timeout=5)
    js = nc.jetstream(timeout=5)
    seqs = []
    try:
        for index in range(count):
            deadline = time.monotonic() + 30
            while True:
                try:
                    ack = await js.publish(
                        subject, b"%d" % index, headers={"Nats-Msg-Id": f"{subject}-{index}"}
                    )
                    break
                except nats.errors.Error:  # no leader yet (no responders, timeout, 503)
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            seqs.append(ack.seq)
    finally:
        await nc.close()
    return seqs


def _stored(cluster: NatsCluster, index: int, stream: str) -> int:
    """How many messages node ``index`` holds of ``stream`` (its own copy)."""
    _, body = cluster.nodes[index].monitor("/jsz?streams=true")
    for account in body.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail.get("name") == stream:
                return int((detail.get("state") or {}).get("messages", 0))
    return -1


async def test_a_node_dies_and_rejoins(nats_cluster: NatsCluster) -> None:
    cluster = nats_cluster
    assert cluster.url.count(",") == 2
    nc = await nats.connect(cluster.nodes[0].url)
    try:
        await nc.jetstream().add_stream(
            StreamConfig(name="HELPER", subjects=["helper.>"], num_replicas=3)
        )
    finally:
        await nc.close()
    everyone = [node.url for node in cluster.nodes]
    assert await _publish(everyone, "helper.a", 5) == [1, 2, 3, 4, 5]
    leader = cluster.stream_leader("HELPER")
    assert leader >= 0

    cluster.kill(leader)
    assert not cluster.nodes[leader].alive
    survivors = [index for index in range(3) if index != leader]
    seqs = await _publish([cluster.nodes[index].url for index in survivors], "helper.b", 5)
    assert seqs == [6, 7, 8, 9, 10]  # a new leader among the two, nothing lost or doubled
    assert cluster.stream_leader("HELPER") in survivors

    cluster.restart(leader)
    await asyncio.to_thread(cluster.wait_healthy)
    deadline = time.monotonic() + 30
    while _stored(cluster, leader, "HELPER") != 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert _stored(cluster, leader, "HELPER") == 10  # caught up with what it missed


def test_ports_chosen_together_are_distinct() -> None:
    # one at a time, the kernel may hand out a just-closed port again: CI once gave two nodes of a
    # cluster the same client port, and the cluster never became healthy
    ports = free_tcp_ports(64)
    assert len(set(ports)) == 64


def test_a_cluster_whose_port_is_taken_meanwhile_starts_on_new_ports(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path)
    taken = cluster.nodes[1].port
    squatter = socket.socket()  # another process binds the port between choice and start
    squatter.bind(("127.0.0.1", taken))
    squatter.listen()
    try:
        cluster.start()
        try:
            assert taken not in {node.port for node in cluster.nodes}
            assert all(node.healthy() for node in cluster.nodes)
            assert "address already in use" in (tmp_path / "n2.attempt1.log").read_text()
        finally:
            cluster.stop()
    finally:
        squatter.close()
