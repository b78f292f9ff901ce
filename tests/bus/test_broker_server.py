"""The real broker over real loopback sockets (``bus/broker/server.py``, PROTOCOL.md 4-5).

Clients are the real client library, or a raw link (wire frames written by hand) where a test
must misbehave: speak before authenticating, replay an id, never read, send too much.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bus.asyncio.client import Client, Subscription, connect
from bus.broker import Broker
from bus.broker.routing import MAX_NAME
from bus.errors import (
    AuthError,
    BusError,
    ConnectError,
    DisconnectedError,
    LimitError,
    NakError,
    NoRespondersError,
    RefusedError,
    RequestTimeout,
)
from bus.frame.enums import CloseReason
from bus.journal import JournalReader
from bus.link import auth, wire
from bus.message.message import Message, decode_message, encode_message
from tests.conftest import OFFICES, MakeBroker, MakeClient

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

WAIT = 10.0  # bound on every wait: nothing can hang


class RawLink:
    """A hand-driven link: writes messages, reads wire events."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = wire.WireDecoder()

    @classmethod
    async def open(cls, port: int, receive_buffer: int | None = None) -> RawLink:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        return cls(reader, writer)

    def send(self, message: Message | dict[str, Any]) -> None:
        if isinstance(message, dict):
            message = Message(message)
        self.writer.write(wire.encode_message(encode_message(message)))

    async def next(self) -> Message | CloseReason | None:
        """The next message, a Disconnect reason, or None at end of stream (pings skipped)."""
        async with asyncio.timeout(WAIT):
            while True:
                event = self.decoder.next_event()
                if isinstance(event, wire.MessageReceived):
                    return decode_message(event.data)
                if isinstance(event, wire.DisconnectReceived):
                    return event.reason
                if event is wire.NEED_DATA:
                    data = await self.reader.read(65536)
                    if not data:
                        return None
                    self.decoder.receive_data(data)

    async def connect_sha256(
        self, name: str, mid: str, secret: str | None = None, inbox: str | None = None
    ) -> Message:
        secret_bytes = (secret or OFFICES[name]).encode()
        self.send(
            {
                "MID": mid,
                "TYP": "OAM",
                "CMD": "manage.connect",
                "SRC": name,
                "PLD": {
                    "mode": "sha256",
                    "inbox": inbox or f"_INBOX.raw{mid.replace('.', '')}",
                    "authenticator": auth.mop_authenticator(secret_bytes, name, mid),
                },
            }
        )
        reply = await self.next()
        assert isinstance(reply, Message)
        return reply

    def close(self) -> None:
        self.writer.close()


OpenRaw = Callable[..., Awaitable[RawLink]]


@pytest.fixture
async def raw() -> AsyncIterator[OpenRaw]:
    """Open raw links (``await raw(port, receive_buffer=None)``); all closed at the end."""
    links: list[RawLink] = []

    async def open_link(port: int, receive_buffer: int | None = None) -> RawLink:
        link = await RawLink.open(port, receive_buffer)
        links.append(link)
        return link

    yield open_link
    for link in links:
        link.writer.close()
        with contextlib.suppress(OSError):
            await link.writer.wait_closed()


async def _serve(client: Client, group: str, tag: str, seen: list[str] | None = None) -> None:
    """A tiny service: answers every request with its tag."""
    consumer = await client.consume(group)
    async for request in consumer:
        if seen is not None:
            seen.append(tag)
        await client.send(request.ack({"by": tag, "x": request.payload.get("x")}))


# --- routing ------------------------------------------------------------------------------------


async def test_competing_consumers_share_requests_evenly(make_client: MakeClient) -> None:
    services = [await make_client(name="bob") for _ in range(3)]
    tasks = [asyncio.create_task(_serve(c, "work", f"s{i}")) for i, c in enumerate(services)]
    await asyncio.sleep(0)
    requester = await make_client()
    answers: Counter[str] = Counter()
    for _ in range(10):  # 10 waves of 30 requests in flight
        replies = await asyncio.gather(
            *(requester.request("work", "do", {"x": i}, timeout=WAIT) for i in range(30))
        )
        answers.update(str(reply.payload["by"]) for reply in replies)
    assert answers == {"s0": 100, "s1": 100, "s2": 100}
    for task in tasks:
        task.cancel()


async def test_a_request_for_all_reaches_every_consumer(make_client: MakeClient) -> None:
    consumers = [await (await make_client(name="bob")).consume("fleet") for _ in range(3)]
    requester = await make_client()
    await requester.send(Message.request("fleet", "reload", reply_to=requester.inbox, to_all=True))
    for consumer in consumers:
        message = await consumer.get(WAIT)
        assert message.cmd == "reload" and message.to_all


async def test_no_responders_is_answered_not_timed_out(client: Client) -> None:
    with pytest.raises(NoRespondersError) as caught:
        await client.request("nobody-home", "ping", timeout=60.0)
    assert caught.value.group == "nobody-home"


async def test_several_responses_arrive_in_order_and_end_without_more(
    make_client: MakeClient,
) -> None:
    service = await make_client(name="bob")
    consumer = await service.consume("counter")

    async def count() -> None:
        request = await consumer.get(WAIT)
        for i in range(5):
            await service.send(request.ack({"i": i}, more=i < 4))

    task = asyncio.create_task(count())
    client = await make_client()
    got = [r.payload["i"] async for r in client.request_stream("counter", "count", timeout=WAIT)]
    assert got == [0, 1, 2, 3, 4]
    await task


async def test_publish_reaches_matching_subscribers_only(make_client: MakeClient) -> None:
    alice, bob = await make_client(), await make_client(name="bob")
    temps = await alice.subscribe("sensor.*")
    everything = await bob.subscribe(">")
    pumps = await bob.subscribe("pump")
    await alice.publish("sensor.temp", {"c": 18.2})
    await alice.publish("pump.on", {"id": 3})
    assert (await temps.get(WAIT)).payload["c"] == 18.2
    assert [(await everything.get(WAIT)).grp for _ in range(2)] == ["sensor.temp", "pump.on"]
    assert (await pumps.get(WAIT)).grp == "pump.on"
    assert temps.pending() == 0 and pumps.pending() == 0


async def test_direct_mail_with_expect_and_reply(make_client: MakeClient) -> None:
    alice, bob = await make_client(), await make_client(name="bob")
    box = await bob.mailbox("pump")

    async def answer() -> None:
        mail = await box.get(WAIT)
        assert mail.src == "alice.po" and mail.payload["pump"] == "off"
        await bob.send(mail.ack({"done": True}))

    task = asyncio.create_task(answer())
    reply = await alice.mail("bob.pump", {"pump": "off"}, expect=True, timeout=WAIT)
    assert reply is not None and reply.payload["done"] is True
    await task
    with pytest.raises(NakError) as caught:
        await alice.mail("nobody.po", {"x": 1}, expect=True, timeout=WAIT)
    assert caught.value.rcd == 404
    with pytest.raises(NakError) as no_box:
        await alice.mail("bob.other", {"x": 1}, expect=True, timeout=WAIT)
    assert no_box.value.rcd == 404


async def test_a_json_client_gets_json_answers(
    raw: OpenRaw, broker: Broker, client: Client
) -> None:
    consumer = await client.consume("jsonsvc")
    link = await raw(broker.port)
    await link.connect_sha256("bob", "AB.bob")
    request = Message.request("jsonsvc", "hi", {"n": 1}, reply_to="_INBOX.rawABbob", enc="JSON")
    link.send(request)
    got = await consumer.get(WAIT)
    assert got.enc == "JSON"  # forwarded as the JSON text the raw client wrote
    await client.send(got.ack({"ok": 1}))
    answer = await link.next()
    assert isinstance(answer, Message) and answer.enc == "JSON" and answer.rid == request.mid


async def test_mops_subscribe_argument_name_is_accepted(
    raw: OpenRaw, broker: Broker, client: Client
) -> None:
    link = await raw(broker.port)
    await link.connect_sha256("bob", "AB.bob")
    link.send({"MID": "m1", "TYP": "OAM", "CMD": "manage.subscribe", "PLD": {"type": "sensor"}})
    ack = await link.next()
    assert isinstance(ack, Message) and ack.typ == "ACK" and ack.rid == "m1"
    await client.publish("sensor.temperature", {"c": 18.22})
    event = await link.next()
    assert isinstance(event, Message) and event.grp == "sensor.temperature"


async def test_the_journal_gets_every_routed_message(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    from bus.broker import JournalSetting

    broker = await make_broker(journal=JournalSetting(str(tmp_path)))
    alice = await make_client(f"bus://127.0.0.1:{broker.port}")
    sub = await alice.subscribe("audit.*")
    await alice.publish("audit.login", {"user": "x"})
    await sub.get(WAIT)
    broker.journal.flush()
    records = list(JournalReader(tmp_path).records())
    assert [decode_message(r.raw).grp for r in records] == ["audit.login"]


# --- refusals -----------------------------------------------------------------------------------


async def test_a_wrong_secret_is_refused(bus_url: str, make_client: MakeClient) -> None:
    for mode in ("hmac-sha256", "sha256"):
        with pytest.raises(AuthError, match="rcd 401"):
            await make_client(bus_url, "alice", secret="wrong", mode=mode)


async def test_an_unknown_post_office_is_refused_as_a_wrong_secret_is(
    bus_url: str, make_client: MakeClient
) -> None:
    # One text for both, in every mode: a stranger cannot find out which post offices exist.
    for mode in ("hmac-sha256", "sha256"):
        with pytest.raises(AuthError) as unknown:
            await make_client(bus_url, "mallory", secret="x", mode=mode)
        with pytest.raises(AuthError) as wrong:
            await make_client(bus_url, "alice", secret="wrong", mode=mode)
        assert auth.LOGIN_REFUSED in str(unknown.value) and auth.LOGIN_REFUSED in str(wrong.value)
        assert "mallory" not in str(unknown.value)


async def test_open_mode_is_refused_unless_enabled(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    closed = await make_broker(open=False)
    with pytest.raises(AuthError, match="open mode"):
        await make_client(f"bus://127.0.0.1:{closed.port}", None)


async def test_a_replayed_connect_id_is_refused(raw: OpenRaw, broker: Broker) -> None:
    first = await raw(broker.port)
    assert (await first.connect_sha256("alice", "AB.alice")).typ == "ACK"
    second = await raw(broker.port)
    refusal = await second.connect_sha256("alice", "AB.alice")
    assert refusal.typ == "NAK" and refusal.rcd == 401 and "already used" in (refusal.msg or "")
    assert await second.next() is CloseReason.AUTHENTICATION_FAILURE
    assert await second.next() is None


async def test_challenge_response_is_the_default_on_both_sides(
    raw: OpenRaw, broker: Broker
) -> None:
    # The broker: a manage.connect that names no mode is challenged (hmac-sha256).
    link = await raw(broker.port)
    link.send(
        {
            "MID": "d1",
            "TYP": "OAM",
            "CMD": "manage.connect",
            "SRC": "alice",
            "PLD": {"inbox": "_INBOX.d1", "nonce": os.urandom(auth.NONCE_SIZE)},
        }
    )
    challenge = await link.next()
    assert isinstance(challenge, Message) and challenge.cmd == "manage.challenge"
    assert len(challenge.payload["nonce"]) == auth.NONCE_SIZE
    # The client: with a secret and no mode, it asks for the challenge (a listener that only
    # records what the client says first).
    first: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = wire.WireDecoder()
        while not first.done() and (data := await reader.read(65536)):
            decoder.receive_data(data)
            for event in decoder.events():
                if isinstance(event, wire.MessageReceived) and not first.done():
                    first.set_result(decode_message(event.data))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    attempt = asyncio.create_task(
        connect(f"bus://127.0.0.1:{port}", "alice", "secret", connect_timeout=WAIT)
    )
    hello = await asyncio.wait_for(first, WAIT)
    with contextlib.suppress(BusError):
        await asyncio.wait_for(attempt, WAIT)
    server.close()
    await server.wait_closed()
    assert hello.cmd == "manage.connect" and hello.payload["mode"] == "hmac-sha256"
    assert len(hello.payload["nonce"]) == auth.NONCE_SIZE


async def test_a_message_before_authentication_is_refused_and_not_routed(
    raw: OpenRaw, broker: Broker, client: Client
) -> None:
    consumer = await client.consume("victim")
    link = await raw(broker.port)
    link.send(Message.request("victim", "drop-tables", reply_to="_INBOX.evil"))
    refusal = await link.next()
    assert isinstance(refusal, Message) and refusal.typ == "NAK" and refusal.rcd == 401
    assert await link.next() is CloseReason.AUTHENTICATION_FAILURE
    echo = await client.subscribe("sync")  # a round trip through the broker, then look
    await client.publish("sync", {})
    await echo.get(WAIT)
    assert consumer.pending() == 0


async def test_a_reconnecting_link_takes_its_inbox_back_from_its_stale_link(
    raw: OpenRaw, broker: Broker
) -> None:
    stale = await raw(broker.port)
    assert (await stale.connect_sha256("alice", "AB.alice", inbox="_INBOX.same")).typ == "ACK"
    fresh = await raw(broker.port)
    assert (await fresh.connect_sha256("alice", "AC.alice", inbox="_INBOX.same")).typ == "ACK"
    assert await stale.next() is CloseReason.SERVER_CLOSING
    thief = await raw(broker.port)
    refusal = await thief.connect_sha256("bob", "AB.bob", inbox="_INBOX.same")
    assert refusal.typ == "NAK" and refusal.rcd == 409
    assert await thief.next() is CloseReason.AUTHENTICATION_FAILURE


async def test_an_oversized_message_is_refused(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(max_message_size=2000)
    client = await make_client(f"bus://127.0.0.1:{broker.port}")
    with pytest.raises(LimitError) as caught:
        await client.publish("big.blob", {"data": "x" * 5000})
    assert caught.value.limit == "max_message_size" and caught.value.maximum == 2000
    link = await raw(broker.port)
    await link.connect_sha256("bob", "AB.bob")
    link.send(Message.event("big.blob", {"data": "x" * 5000}))
    assert await link.next() is CloseReason.PROTOCOL_ERROR


async def test_connections_beyond_the_maximum_are_refused(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(max_connections=2)
    url = f"bus://127.0.0.1:{broker.port}"
    await make_client(url)
    await make_client(url, "bob")
    with pytest.raises(ConnectError, match="refused"):
        await make_client(url, "carol")
    link = await raw(broker.port)
    assert await link.next() is CloseReason.CONNECTION_REFUSED


async def test_subscriptions_beyond_the_maximum_are_refused(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(max_subscriptions=3)
    client = await make_client(f"bus://127.0.0.1:{broker.port}")
    await client.subscribe("a")
    await client.subscribe("b")
    await client.consume("c")
    with pytest.raises(LimitError) as caught:
        await client.subscribe("d")
    assert (caught.value.limit, caught.value.maximum) == ("max_subscriptions", 3)


async def test_a_silent_link_is_dropped_with_timeout(raw: OpenRaw, make_broker: MakeBroker) -> None:
    broker = await make_broker(ping_interval_ms=200)
    link = await raw(broker.port)
    await link.connect_sha256("alice", "AB.alice")
    assert await link.next() is CloseReason.TIMEOUT  # pings arrive, we never answer


async def test_a_link_that_never_connects_is_dropped_at_the_deadline(
    raw: OpenRaw, make_broker: MakeBroker
) -> None:
    broker = await make_broker(connect_timeout_ms=200)
    link = await raw(broker.port)
    assert await link.next() is CloseReason.TIMEOUT


async def test_the_client_keeps_a_quiet_link_alive(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(ping_interval_ms=100)
    client = await make_client(f"bus://127.0.0.1:{broker.port}")
    await asyncio.sleep(0.6)  # four ping intervals without any traffic
    assert client.connected and client.reconnects == 0


# --- slow consumers -----------------------------------------------------------------------------


async def test_a_never_reading_consumer_is_evicted_and_others_get_everything_in_order(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(max_queue_bytes=256 * 1024)
    url = f"bus://127.0.0.1:{broker.port}"
    slow = await raw(broker.port, receive_buffer=4096)
    await slow.connect_sha256("carol", "AB.carol")
    slow.send({"MID": "s1", "TYP": "OAM", "CMD": "manage.subscribe", "PLD": {"pattern": "feed"}})
    assert isinstance(await slow.next(), Message)  # subscribed; from now on it never reads
    reader = await make_client(url, "bob")
    sub = await reader.subscribe("feed")
    publisher = await make_client(url)
    total, batch, blob = 2000, 20, "x" * 8000  # 16 MB: far more than socket buffers
    received: list[int] = []
    for start in range(0, total, batch):
        for seq in range(start, start + batch):
            await publisher.publish("feed.data", {"seq": seq, "blob": blob})
        for _ in range(batch):
            received.append(int((await sub.get(WAIT)).payload["seq"]))
    assert received == list(range(total))
    admin = await make_client(url, "admin")
    status = await admin.status()
    assert status["slowConsumers"] == 1
    assert "carol" not in status["offices"]


async def test_a_consumer_whose_socket_takes_nothing_is_evicted_at_the_write_deadline(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # Far below max_queue_bytes, but its output has not moved for write_deadline_ms: evicted,
    # as nats-server does a consumer past its write deadline.
    broker = await make_broker(write_deadline_ms=1000)
    slow = await raw(broker.port, receive_buffer=4096)
    await slow.connect_sha256("carol", "AB.carol")
    slow.send({"MID": "s1", "TYP": "OAM", "CMD": "manage.subscribe", "PLD": {"pattern": "feed"}})
    assert isinstance(await slow.next(), Message)  # subscribed; from now on it never reads
    publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
    for seq in range(600):  # 4.8 MB: more than the socket buffers, far less than 64 MiB
        await publisher.publish("feed.data", {"seq": seq, "blob": "x" * 8000})
    async with asyncio.timeout(WAIT):
        while broker.stats["slow_consumers"] == 0:
            await asyncio.sleep(0.05)
    while isinstance(item := await slow.next(), Message):
        pass  # what its socket held, then the eviction
    assert item is CloseReason.APPLICATION_ERROR


async def test_a_burst_of_20_mb_does_not_evict_a_subscriber_that_reads(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # Issue 13: the 4 MiB queue acted as a burst limit and evicted healthy subscribers. With
    # 64 MiB and a write deadline, a subscriber that reads gets the whole burst.
    broker = await make_broker()
    url = f"bus://127.0.0.1:{broker.port}"
    sub = await (await make_client(url, "bob", queue_size=5000)).subscribe("burst")
    publisher = await make_client(url)
    total = 2500  # 20 MB at once
    for seq in range(total):
        await publisher.publish("burst.data", {"seq": seq, "blob": "x" * 8000})
    received = [int((await sub.get(WAIT)).payload["seq"]) for _ in range(total)]
    assert received == list(range(total)) and broker.stats["slow_consumers"] == 0


async def test_requests_queued_for_an_evicted_consumer_are_answered_503(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # A service that stops reading is evicted; the requests the broker still held for it are
    # answered at once (NAK 503), not left to time out. (Those already in its socket buffers
    # left the broker: only their timeout tells.)
    broker = await make_broker(max_queue_bytes=256 * 1024)
    stuck = await raw(broker.port, receive_buffer=4096)
    await stuck.connect_sha256("carol", "AB.carol")
    stuck.send({"MID": "c1", "TYP": "OAM", "CMD": "manage.consume", "PLD": {"group": "stuck"}})
    assert isinstance(await stuck.next(), Message)  # consuming; from now on it never reads
    caller = await make_client(f"bus://127.0.0.1:{broker.port}", "bob")
    admin = await make_client(f"bus://127.0.0.1:{broker.port}", "admin")
    calls: list[asyncio.Task[Message]] = []
    async with asyncio.timeout(WAIT):  # until the socket buffers and then its queue overflow
        while (await admin.status())["slowConsumers"] == 0:
            calls += [
                asyncio.create_task(caller.request("stuck", "w", {"blob": "x" * 8000}, timeout=2))
                for _ in range(50)
            ]
            await asyncio.sleep(0.01)
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
    kinds = Counter(type(result).__name__ for result in results)
    assert set(kinds) <= {"NakError", "NoRespondersError", "RequestTimeout"}, kinds
    evicted = [r for r in results if isinstance(r, NakError) and "evicted" in r.msg]
    assert evicted and all(r.rcd == 503 for r in evicted)
    assert (await admin.status())["failedRequests"] == len(evicted)


async def test_requests_queued_for_a_consumer_whose_link_dies_are_answered_503(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(max_queue_bytes=64 * 1024 * 1024)
    dying = await raw(broker.port, receive_buffer=4096)
    await dying.connect_sha256("carol", "AB.carol")
    dying.send({"MID": "c1", "TYP": "OAM", "CMD": "manage.consume", "PLD": {"group": "dying"}})
    assert isinstance(await dying.next(), Message)
    caller = await make_client(f"bus://127.0.0.1:{broker.port}", "bob")
    admin = await make_client(f"bus://127.0.0.1:{broker.port}", "admin")
    calls: list[asyncio.Task[Message]] = []
    async with asyncio.timeout(WAIT):  # until requests wait in the broker's queue for it
        while (await admin.status())["queuedBytes"] == 0:
            calls += [
                asyncio.create_task(caller.request("dying", "w", {"blob": "x" * 8000}, timeout=2))
                for _ in range(50)
            ]
            await asyncio.sleep(0.01)
    dying.writer.transport.abort()  # the service process dies
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
    lost = [r for r in results if isinstance(r, NakError) and "link was lost" in r.msg]
    assert lost and all(r.rcd == 503 for r in lost)
    assert all(isinstance(r, NakError | NoRespondersError | RequestTimeout) for r in results)


# --- management ---------------------------------------------------------------------------------


async def test_only_managers_may_manage(make_client: MakeClient) -> None:
    alice = await make_client()
    for cmd in ("manage.status", "manage.monitor", "manage.write"):
        with pytest.raises(RefusedError, match="not a manager"):
            await alice.manage(cmd)
    with pytest.raises(RefusedError):
        await alice.manage("manage.add", {"name": "eve", "secret": "x", "manager": True})
    with pytest.raises(AuthError):
        await make_client(name="eve", secret="x")


async def test_status_and_monitor(make_client: MakeClient) -> None:
    admin = await make_client(name="admin")
    await (await make_client(name="bob")).consume("demo")
    status = await admin.status()
    assert status["name"] == "central" and status["groups"] == {"demo": 1}
    assert status["offices"] == {"admin": 1, "bob": 1}
    monitor = (await admin.manage("monitor")).payload.to_dict()
    assert monitor["process"]["pid"] == os.getpid() and monitor["host"]["cpus"] >= 1


async def test_add_delete_and_write_post_offices(
    make_broker: MakeBroker, make_client: MakeClient, tmp_path: Path
) -> None:
    config_file = tmp_path / "broker.json"
    broker = await make_broker(config_file=str(config_file))
    url = f"bus://127.0.0.1:{broker.port}"
    admin = await make_client(url, "admin")
    await admin.manage("add", {"name": "dave", "secret": "dave-secret"})
    dave = await make_client(url, "dave", secret="dave-secret", reconnect=False)
    sub = await dave.subscribe("x")
    written = (await admin.manage("write")).payload["file"]
    saved = json.loads(Path(written).read_text())
    assert saved["postOffices"]["dave"] == {"secret": "dave-secret"}
    await admin.manage("delete", {"name": "dave"})
    with pytest.raises(DisconnectedError) as caught:
        await sub.get(WAIT)
    assert caught.value.close_reason is CloseReason.AUTHORIZATION_FAILURE
    with pytest.raises(AuthError):
        await make_client(url, "dave", secret="dave-secret")
    with pytest.raises(NakError) as unknown:
        await admin.manage("delete", {"name": "dave"})
    assert unknown.value.rcd == 404


# --- shutdown -----------------------------------------------------------------------------------


async def test_graceful_shutdown_tells_every_client(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker()
    link = await raw(broker.port)
    await link.connect_sha256("bob", "AB.bob")
    client = await make_client(f"bus://127.0.0.1:{broker.port}", reconnect=False)
    sub: Subscription = await client.subscribe("x")
    await broker.stop()
    assert await link.next() is CloseReason.SERVER_SHUTDOWN
    with pytest.raises(DisconnectedError) as caught:
        await sub.get(WAIT)
    assert caught.value.close_reason is CloseReason.SERVER_SHUTDOWN
    with pytest.raises(OSError):
        _, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.close()  # something else took the port meanwhile: the test fails, leaking nothing


async def test_graceful_shutdown_drains_what_is_queued_before_saying_shutdown(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # A subscriber that is not reading has events queued in the broker when it stops: it still
    # gets every one of them, in order, and then Disconnect(SERVER_SHUTDOWN).
    broker = await make_broker(max_queue_bytes=64 * 1024 * 1024)
    lagging = await raw(broker.port, receive_buffer=4096)
    await lagging.connect_sha256("carol", "AB.carol")
    lagging.send({"MID": "s1", "TYP": "OAM", "CMD": "manage.subscribe", "PLD": {"pattern": "feed"}})
    assert isinstance(await lagging.next(), Message)
    publisher = await make_client(f"bus://127.0.0.1:{broker.port}")
    admin = await make_client(f"bus://127.0.0.1:{broker.port}", "admin")
    total = 1500  # 12 MB: more than the socket buffers hold
    for seq in range(total):
        await publisher.publish("feed.data", {"seq": seq, "blob": "x" * 8000})
    async with asyncio.timeout(WAIT):  # every event is routed; most wait in the broker
        while (await admin.status())["routed"] < total:
            await asyncio.sleep(0.01)
    assert (await admin.status())["queuedBytes"] > 0
    stopping = asyncio.create_task(broker.stop())
    received = []
    while isinstance(item := await lagging.next(), Message):
        received.append(int(item.payload["seq"]))
    assert received == list(range(total))
    assert item is CloseReason.SERVER_SHUTDOWN
    await asyncio.wait_for(stopping, WAIT)


async def test_the_broker_echoes_a_ping_frame(make_broker: MakeBroker) -> None:
    # A DtronixMQ client pings and waits for the server's echo (seed 002, issue 14). The
    # broker's own pings come every 60 s here, so the Ping read back is the echo.
    broker = await make_broker(ping_interval_ms=60_000)
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    try:
        writer.write(wire.encode_ping())
        assert await asyncio.wait_for(reader.readexactly(1), WAIT) == wire.encode_ping()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_connections_count_what_each_link_moved(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # The console's Bus view shows who is on the bus "and how much": per link, each way.
    broker = await make_broker()
    url = f"bus://127.0.0.1:{broker.port}"
    reader, publisher = await make_client(url, "bob"), await make_client(url, "carol")
    sub = await reader.subscribe("meter.*")
    admin = await make_client(url, "admin")

    async def links() -> dict[str, dict[str, Any]]:
        answer = await admin.manage("manage.connections")
        return {link["office"]: link for link in answer.payload.to_dict()["connections"]}

    before = await links()
    for n in range(5):
        await publisher.publish("meter.kwh", {"n": n, "pad": "x" * 1000})
    for _ in range(5):
        await sub.get(WAIT)
    after = await links()
    sent, got = after["carol"], after["bob"]
    assert sent["messagesIn"] - before["carol"]["messagesIn"] == 5
    assert sent["bytesIn"] - before["carol"]["bytesIn"] > 5 * 1000
    assert got["messagesOut"] - before["bob"]["messagesOut"] == 5
    assert got["bytesOut"] - before["bob"]["bytesOut"] > 5 * 1000
    assert got["messagesIn"] == before["bob"]["messagesIn"]  # it sent nothing meanwhile
    assert 0 <= got["connectedS"] < 60


async def test_names_longer_than_the_limit_are_not_routed(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # An event type was bounded only by the 1 MiB message limit, and cached.
    broker = await make_broker()
    url = f"bus://127.0.0.1:{broker.port}"
    client = await make_client(url, "bob")
    long_group = "g" * (MAX_NAME + 1)
    await client.consume("g" * MAX_NAME)  # at the limit: fine
    with pytest.raises(NakError) as refused:
        await client.request(long_group, "x", timeout=WAIT)
    assert refused.value.rcd == 400 and f"longer than {MAX_NAME}" in refused.value.msg
    sub = await client.subscribe(">")
    dropped = broker.stats["dropped"]
    await client.publish("t." + "x" * MAX_NAME, {"big": True})
    await client.publish("t.ok", {})
    assert (await sub.get(WAIT)).grp == "t.ok"  # the long one never came
    assert broker.stats["dropped"] == dropped + 1
    assert broker.router.cache_size()[1] <= MAX_NAME


# --- before login: what a stranger can cost the broker (issue 12) ------------------------------


async def test_a_message_bigger_than_the_handshake_budget_is_refused_before_login(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # A stranger cannot make the broker buffer up to max_message_size per socket: before the
    # handshake the limit is max_handshake_bytes; once logged in, the full size is allowed.
    broker = await make_broker(max_handshake_bytes=4096)
    link = await raw(broker.port)
    link.send({"MID": "c1", "TYP": "OAM", "CMD": "manage.connect", "PLD": {"pad": "x" * 8000}})
    assert await link.next() is CloseReason.PROTOCOL_ERROR
    client = await make_client(f"bus://127.0.0.1:{broker.port}")
    sub = await client.subscribe("big")
    await client.publish("big.one", {"pad": "x" * 100_000})
    assert len((await sub.get(WAIT)).payload["pad"]) == 100_000


async def test_sockets_that_never_log_in_do_not_lock_clients_out(
    raw: OpenRaw, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # 40 idle sockets against a bound of 8 handshakes: the oldest are closed (TIMEOUT) as new
    # ones come, and a client that logs in still gets in at once, far before connect_timeout.
    broker = await make_broker(max_pending_connections=8, connect_timeout_ms=60_000)
    idle = [await raw(broker.port) for _ in range(40)]
    assert await idle[0].next() is CloseReason.TIMEOUT
    client = await asyncio.wait_for(make_client(f"bus://127.0.0.1:{broker.port}"), WAIT)
    sub = await client.subscribe("still")
    await client.publish("still.here", {"ok": 1})
    assert (await sub.get(WAIT)).payload["ok"] == 1
    for link in idle:
        link.close()


async def test_an_address_guessing_secrets_is_refused_for_a_while(
    bus_url: str, make_broker: MakeBroker, make_client: MakeClient
) -> None:
    broker = await make_broker(max_auth_failures=3)
    url = f"bus://127.0.0.1:{broker.port}"
    for _ in range(3):
        with pytest.raises(AuthError):
            await make_client(url, "alice", secret="guess", reconnect=False)
    # the fourth socket from this address is refused at the door, even with the right secret
    with pytest.raises(ConnectError, match="refused"):
        await make_client(url, "alice", reconnect=False)
    assert broker.stats["refused_connections"] >= 1 and broker.stats["refused_auth"] == 3
    # another broker (another address book) is not affected: the limit is per broker and address
    assert await make_client(bus_url, "alice") is not None


async def test_an_evicted_subscriber_is_told_and_comes_back(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    # Issue 13: an evicted slow consumer lost events with no signal to the application.
    broker = await make_broker(write_deadline_ms=1000)
    url = f"bus://127.0.0.1:{broker.port}"
    subscriber = await make_client(url, "bob", backoff_initial=0.1, backoff_max=0.2)
    sub = await subscriber.subscribe("feed")
    wire_transport = subscriber._transport._wire.transport  # type: ignore[union-attr]
    wire_transport.pause_reading()  # its process hangs: the socket takes nothing
    publisher = await make_client(url)
    for seq in range(600):
        await publisher.publish("feed.data", {"seq": seq, "blob": "x" * 8000})
    async with asyncio.timeout(WAIT):
        while broker.stats["slow_consumers"] == 0:
            await asyncio.sleep(0.05)
    wire_transport.resume_reading()
    async with asyncio.timeout(WAIT):
        while sub.gaps == 0 or not subscriber.connected:
            await asyncio.sleep(0.05)
    assert sub.gaps == 1 and "slow consumer" in sub.last_gap
    await publisher.publish("feed.data", {"seq": "after"})
    async with asyncio.timeout(WAIT):
        while (await sub.get(WAIT)).payload["seq"] != "after":
            pass
