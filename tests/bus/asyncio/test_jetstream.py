"""NATS with JetStream (``bus/asyncio/jetstream.py``, PROTOCOL.md 10.1) against a real nats-server.

Each test starts its own ``nats-server -js -sd <tmp>`` on a free port: confirmed publishes
return the stream sequence and a retry (same MID) is stored once; a durable subscriber loses
nothing and sees nothing twice across kill -9 and restarts of the server; ``since`` replays
from a stream sequence; without JetStream a confirmed publish is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from bus.asyncio.client import Client, Subscription, connect
from bus.discovery.nats_subjects import url_stream
from bus.errors import BusError, ConfigError, NotJournaledError
from bus.message.message import Message
from tests.conftest import NATS_SERVER, NatsServer
from tests.docexamples import examples

pytestmark = [pytest.mark.nats, pytest.mark.timeout(90)]

WAIT = 15.0


@pytest.fixture
def js_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with JetStream storing under tmp_path, on a free port."""
    if not os.path.exists(NATS_SERVER):
        pytest.skip("nats-server is not installed")
    server = NatsServer(0, "-js", "-sd", str(tmp_path / "jetstream")).start()
    yield server
    server.stop()


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    made: list[Client] = []
    yield made
    for client in made:
        await client.close()


async def _connect(url: str, name: str, made: list[Client], backoff: float = 0.05) -> Client:
    client = await connect(url, name, backoff_initial=backoff, backoff_max=max(backoff, 0.3))
    made.append(client)
    return client


async def _take(sub: Subscription, count: int) -> list[Message]:
    got: list[Message] = []
    async with asyncio.timeout(WAIT):
        while len(got) < count:
            got.append(await sub.get())
    return got


async def _stored(url: str, stream: str = "BUSGATE") -> int:
    """How many messages the stream holds (asked with nats-py, not through busgate)."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()


async def test_confirm_returns_the_stream_sequence_and_a_retry_is_stored_once(
    js_server: NatsServer, clients: list[Client]
) -> None:
    client = await _connect(js_server.url, "alice", clients)
    assert await client.publish("sensor.temp", {"c": 1}, confirm=True) == 1
    event = Message.event("sensor.temp", {"c": 2})
    assert await client.publish_event(event, confirm=True) == 2
    # the same event again (same MID), as the client sends it after a lost link
    again = Message.event("sensor.temp", {"c": 2})
    again.frame["MID"] = event.mid
    assert await client.publish_event(again, confirm=True) == 2
    retry = Message.event("sensor.temp", {"c": 2})
    retry.frame["MID"] = event.mid
    retry.rpy = client.inbox
    answer = await client.call(retry, timeout=WAIT)  # the answer itself says "duplicate"
    assert answer.payload.to_dict() == {"seq": 2, "stream": "BUSGATE", "duplicate": True}
    assert await _stored(js_server.url) == 2
    # plain publishes are stored too (the stream holds the bus's events): a durable
    # subscriber resumes them as well
    await client.publish("sensor.temp", {"c": 3})
    assert await client.publish("sensor.temp", {"c": 4}, confirm=True) == 4
    # requests and responses are not events: not in the stream
    with pytest.raises(BusError):
        await client.request("nobody", "echo", {}, timeout=2.0)
    assert await _stored(js_server.url) == 4
    status = await client.status()
    assert status["jetstream"] is True and status["stream"] == "BUSGATE"


async def test_since_replays_from_that_sequence_then_live_and_plain_subscribers_get_live_only(
    js_server: NatsServer, clients: list[Client]
) -> None:
    publisher = await _connect(js_server.url, "alice", clients)
    for i in range(1, 11):
        assert await publisher.publish("sensor.temp", {"i": i}, confirm=True) == 2 * i - 1
        await publisher.publish("door.open", {"i": -i}, confirm=True)
    subscriber = await _connect(js_server.url, "bob", clients)
    durable = await subscriber.subscribe("sensor.*", since=10)  # after seq 10 (i = 5)
    plain = await subscriber.subscribe("sensor.*")
    major = await subscriber.subscribe("door", since=16)  # a major type: door and door.>
    replayed = await _take(durable, 5)
    assert [m.payload["i"] for m in replayed] == [6, 7, 8, 9, 10]
    assert [m.seq for m in replayed] == [11, 13, 15, 17, 19]
    assert [m.payload["i"] for m in await _take(major, 2)] == [-9, -10]
    live = await publisher.publish("sensor.temp", {"i": 11}, confirm=True)
    (message,) = await _take(durable, 1)
    assert (message.payload["i"], message.seq) == (11, live)
    (message,) = await _take(plain, 1)
    assert message.payload["i"] == 11  # live only, once
    await asyncio.sleep(0.3)
    assert durable.pending() == plain.pending() == major.pending() == 0
    assert durable.position == live
    # by time: from a moment between two publishes
    await asyncio.sleep(0.05)
    moment = time.time()
    await publisher.publish("sensor.temp", {"i": 12}, confirm=True)
    by_time = await subscriber.subscribe("sensor.temp", since_time=moment)
    assert [m.payload["i"] for m in await _take(by_time, 1)] == [12]


async def test_durable_subscriber_across_kill_9_of_the_server_loses_nothing_sees_nothing_twice(
    js_server: NatsServer, clients: list[Client]
) -> None:
    publisher = await _connect(js_server.url, "alice", clients)
    # the subscriber comes back 0.5 to 1 s after the server, the publisher at once: what is
    # published meanwhile reaches it only from the stream
    subscriber = await _connect(js_server.url, "bob", clients, backoff=1.0)
    sub = await subscriber.subscribe("plant.*", resume=True)
    confirmed: list[int] = []
    sent = 0
    for _round in range(3):
        for _ in range(40):
            try:
                await publisher.publish("plant.level", {"i": sent}, confirm=True, timeout=5.0)
                confirmed.append(sent)
            except BusError:
                pass  # the caller heard: not counted as delivered
            sent += 1
            if sent % 40 == 20:  # mid-round: kill -9, restart on the same port, same store
                js_server.kill()
                await asyncio.to_thread(js_server.restart)
        await publisher.wait_connected(WAIT)
    assert len(confirmed) > sent // 2
    messages = await _take(sub, len(confirmed))
    await asyncio.sleep(0.3)
    while sub.pending():
        messages.append(await sub.get())
    got = [int(message.payload["i"]) for message in messages]
    assert len(got) == len(set(got)), "an event was delivered twice"
    assert set(confirmed) <= set(got), "a confirmed event was lost"
    assert got == sorted(got), "events came out of order"
    seqs = [message.seq or 0 for message in messages]
    assert seqs == sorted(set(seqs)) and seqs[0] >= 1  # the stream's sequence numbers
    assert subscriber.reconnects >= 1 and sub.resumes >= 1
    # the stream holds each event once: retries after a lost link were de-duplicated
    assert await _stored(js_server.url) == len(got)


async def test_without_jetstream_confirm_and_resume_are_refused(
    nats_server: NatsServer, clients: list[Client]
) -> None:
    client = await _connect(nats_server.url, "alice", clients)
    with pytest.raises(ConfigError, match="JetStream"):
        await client.publish("plain.old", {"i": 0}, confirm=True)
    await client.publish("plain.old", {"i": 0})
    await client.flush()
    # nothing to replay from: refused, not a live subscription that looks durable (issue 30)
    with pytest.raises(NotJournaledError, match="without JetStream.*durable"):
        await client.subscribe("plain.*", since=0)
    sub = await client.subscribe("plain.*")
    await client.publish("plain.new", {"i": 1})
    (message,) = await _take(sub, 1)
    assert (message.payload["i"], message.seq) == (1, None)
    assert (await client.status())["stream"] == ""


async def test_a_stream_named_in_the_url_and_a_bad_name(
    js_server: NatsServer, clients: list[Client]
) -> None:
    client = await _connect(f"{js_server.url}?stream=PLANT_1", "alice", clients)
    assert await client.publish("a.b", {}, confirm=True) == 1
    assert await _stored(js_server.url, "PLANT_1") == 1
    assert url_stream("nats://h:4222") is None
    with pytest.raises(ConfigError, match="bad JetStream stream name"):
        url_stream("nats://h:4222?stream=a.b")


async def test_the_documented_examples(js_server: NatsServer, clients: list[Client]) -> None:
    dedup, resume = examples("jetstream")
    client = await _connect(js_server.url, "alice", clients)
    for key in ("first", "second", "retry"):
        sent, _, shown = dedup.body[key].partition(" -> ACK ")
        type_, mid = sent.split(" MID=")
        event = Message.event(type_, {})
        event.frame["MID"] = mid
        event.rpy = client.inbox
        answer = await client.call(event, timeout=WAIT)
        assert answer.payload.to_dict() == json.loads(shown), key
    assert await _stored(js_server.url) == int(dedup.body["stored"])

    url = f"{js_server.url}?stream=RESUME&prefix=doc"
    client = await _connect(url, "bob", clients)
    for item in resume.body["stream"].split("; "):
        seq, type_, payload = item.split(" ", 2)
        assert await client.publish(type_, json.loads(payload), confirm=True) == int(seq)
    request = json.loads(resume.body["request"].split(" ", 1)[1])
    expected = json.loads(resume.body["answer"])
    expected["stream"] = "RESUME"
    reply = await client.manage("manage.subscribe", request)
    assert reply.payload.to_dict() == expected
    sub = await client.subscribe(request["pattern"], since=request["since"])
    shown = [
        f"SEQ={m.seq} RPL={m.rpl} {json.dumps(m.payload_data())}"
        for m in await _take(sub, len(resume.body["events"].split("; ")))
    ]
    assert "; ".join(shown) == resume.body["events"]
