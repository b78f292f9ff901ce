"""MOP post offices on the bus, over real sockets (``bus/mop/listener.py``, PROTOCOL.md 11).

The post offices are :class:`tests.bus.mopclient.MopClient`, written from the seed and the
document; the bus side is the real broker and the real client library.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.transport import BrokerTransport
from bus.broker import Broker
from bus.errors import AuthError
from bus.link.auth import b64_encode
from bus.mop.listener import open_mop_listener
from tests.bus.mopclient import SEED_ENV, MopClient, content, env
from tests.conftest import OFFICES, MakeBroker, MakeClient
from tests.docexamples import examples

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

WAIT = 10.0
#: An address that guesses secrets (Linux routes all of 127/8 to lo).
GUESSER = "127.0.0.2"
MOP_OFFICES = {"test1": "secret", "test2": "secret2", "boss": "boss-secret"}


class Mop:
    def __init__(self, broker: Broker, port: int) -> None:
        self.broker = broker
        self.port = port
        self.clients: list[MopClient] = []

    async def open(self, name: str, **kwargs: object) -> MopClient:
        client = await MopClient.open(self.port, name, MOP_OFFICES[name], **kwargs)  # type: ignore[arg-type]
        self.clients.append(client)
        return client


async def _mop(broker: Broker) -> AsyncIterator[Mop]:
    listener = await open_mop_listener(broker, "127.0.0.1", 0)
    mop = Mop(broker, listener.port)
    yield mop
    for client in mop.clients:
        await client.close()
    await listener.stop()


@pytest.fixture
async def mop(make_broker: MakeBroker) -> AsyncIterator[Mop]:
    broker = await make_broker(
        offices={**OFFICES, **MOP_OFFICES}, managers=frozenset({"admin", "boss"})
    )
    async for value in _mop(broker):
        yield value


@pytest.fixture
async def bob(mop: Mop, make_client: MakeClient) -> Client:
    return await make_client(f"bus://127.0.0.1:{mop.broker.port}", "bob")


async def test_connect_is_answered_connect_then_reconnect(mop: Mop) -> None:
    first = await mop.open("test1")
    assert first.accept is not None
    accept = env(first.accept)
    assert (accept["type"], accept["to"], accept["reply"]) == (
        "manage.connect",
        "test1.po",
        "AB.test1",
    )
    assert content(first.accept) == {
        "maxMessageSize": mop.broker.config.max_message_size,
        "pingIntervalMS": mop.broker.config.ping_interval_ms,
    }
    await first.close()
    # The post office connects again (counter going on): the listener says reconnect.
    again = await mop.open("test1", reconnect=True, counter=5, envelope=SEED_ENV)
    assert again.accept is not None and env(again.accept)["type"] == "manage.reconnect"


@pytest.mark.parametrize(
    ("name", "secret"), [("test1", "wrong"), ("nobody", "whatever")], ids=["bad-secret", "unknown"]
)
async def test_a_refused_connect_closes_the_link(
    mop: Mop, name: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "bus.mop.listener")
    client = await MopClient.open(mop.port, name, secret, connect=False)
    mop.clients.append(client)
    client.send_connect()
    assert await client.closed()
    assert any(name in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)


@pytest.mark.loops
async def test_failed_mop_logins_are_throttled_per_address_as_on_the_bus_port(
    make_broker: MakeBroker, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 30 item 11: failed MOP logins were never throttled (38 refusals in 11 s, then
    # accepted). The broker's throttle counts them per address, on both ports.
    caplog.set_level(logging.WARNING, "bus.mop.listener")
    broker = await make_broker(offices={**OFFICES, **MOP_OFFICES}, max_auth_failures=3)
    async for mop in _mop(broker):
        for _ in range(3):
            guess = await MopClient.open(mop.port, "test1", "guess", connect=False, source=GUESSER)
            mop.clients.append(guess)
            guess.send_connect()
            assert await guess.closed()
        # the right secret from that address: refused at the door, before any login
        late = await MopClient.open(mop.port, "test1", "secret", connect=False, source=GUESSER)
        mop.clients.append(late)
        late.send_connect()
        assert await late.closed() and late.accept is None
        refusals = [r.getMessage() for r in caplog.records if GUESSER in r.getMessage()]
        assert any("too many failed logins" in text for text in refusals)
        # the same address on the bus port is refused too; another address is not touched
        assert broker.throttle.refused(GUESSER, time.monotonic())
        assert (await mop.open("test2")).accept is not None


@pytest.mark.loops
async def test_a_throttled_bus_port_address_does_not_lock_mop_post_offices_out(
    mop: Mop, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 30 item 11: a local program with a wrong secret got 127.0.0.1 throttled on the bus
    # port; every MOP post office, from any address, was then refused ("the bus is not
    # reachable ... too many connections"), as the listener's bus clients came from 127.0.0.1.
    caplog.set_level(logging.WARNING, "bus.mop.listener")
    url = f"bus://127.0.0.1:{mop.broker.port}"
    for _ in range(mop.broker.config.max_auth_failures):
        with pytest.raises(AuthError):
            await connect(url, "alice", "wrong", reconnect=False)
    assert mop.broker.throttle.refused("127.0.0.1", time.monotonic())
    post_office = await MopClient.open(mop.port, "test1", "secret", source="127.0.0.3")
    mop.clients.append(post_office)
    assert post_office.accept is not None
    post_office.publish("io", "sensor.tick", n=1)  # and its bus client works

    # a subscriber inside the broker's process (127.0.0.1 is refused for a minute)
    def factory(inbox: str, reconnecting: bool) -> BrokerTransport:
        return BrokerTransport(
            "in-process", 0, name="bob", secret=OFFICES["bob"], inbox=inbox,
            socket_source=mop.broker.local_link,
        )  # fmt: skip

    listener = await Client(factory, reconnect=False).open()
    try:
        sub = await listener.subscribe("sensor.tick")
        post_office.publish("io", "sensor.tick", n=2)
        assert (await sub.get(WAIT)).payload["n"] == 2
    finally:
        await listener.close()
    assert not [r for r in caplog.records if "not reachable" in r.getMessage()]


async def test_pings_are_answered_and_a_silent_post_office_is_closed(
    make_broker: MakeBroker,
) -> None:
    broker = await make_broker(offices={**OFFICES, **MOP_OFFICES}, ping_interval_ms=200)
    async for mop in _mop(broker):
        talker = await mop.open("test1")
        listening = asyncio.create_task(talker.closed())  # reads, answering every ping
        mute = await mop.open("test2", answer_pings=False)
        assert await mute.closed()  # no pong for 1.5 intervals: closed
        assert mute.pings >= 1
        async with asyncio.timeout(WAIT):
            while talker.pings < 5:  # five intervals, each ping answered: the link lives on
                assert not listening.done()
                await asyncio.sleep(0.05)
        listening.cancel()


async def test_a_replayed_connect_is_refused_and_a_restarted_post_office_gets_in(
    mop: Mop,
) -> None:
    live = await mop.open("test1")  # connect id AB.test1
    for _ in range(3):
        live.publish("io", "sensor.tick")
    # An attacker replays the recorded AB.test1 connect on a new link: refused, live link stays.
    attacker = await MopClient.open(mop.port, "test1", "secret", connect=False)
    mop.clients.append(attacker)
    attacker.send_connect(message_id="AB.test1")
    assert await attacker.closed()
    ping_id = live.mail("po", "central.po", "manage.connected")
    reply = await live.expect_reply(ping_id)
    assert "test1" in content(reply)["postOffices"]
    # The post office process dies and starts again: its counter is back at AB.
    await live.close()
    restarted = await mop.open("test1")
    assert restarted.accept is not None and env(restarted.accept)["reply"] == "AB.test1"


async def test_publications_reach_bus_subscribers_as_documented(mop: Mop, bob: Client) -> None:
    [example] = [e for e in examples("mop-bridge") if e.id == "publish"]
    sub = await bob.subscribe("sensor")
    test1 = await mop.open("test1")
    test1.publish("io", "sensor.temp", c=18.5)
    event = await asyncio.wait_for(sub.get(), WAIT)
    documented = json.loads(example.body["bus"])
    assert event.grp == documented["GRP"] and event.typ == documented["TYP"]
    assert event.src == documented["SRC"] and event.payload.to_dict() == documented["PLD"]


async def test_bus_events_reach_a_mop_subscriber_from_the_source_it_named(
    mop: Mop, bob: Client
) -> None:
    test2 = await mop.open("test2")
    sub_id = test2.mail(
        "po",
        "weather.po",
        "manage.subscribe",
        expect=True,
        source="weather.station",
        type="sensor",
        requestor="test2.display",
    )
    # No post office "weather" exists: the listener answers, so the subscriber stops resending.
    await test2.expect_reply(sub_id)
    await bob.publish("sensor.temp", {"c": 21.0})
    got = await test2.expect(type="sensor.temp")
    assert env(got)["from"] == "weather.station" and content(got) == {"c": 21.0}
    await bob.publish("pump.on", {"x": 1})  # not subscribed
    await bob.publish("sensor.humidity", {"h": 40})
    got = await test2.expect(type="sensor.humidity")
    assert content(got) == {"h": 40}


async def test_mop_to_mop_publish_subscribe_through_the_bus(mop: Mop) -> None:
    source = await mop.open("test1")
    subscriber = await mop.open("test2")
    sub_id = subscriber.mail(
        "po",
        "test1.po",
        "manage.subscribe",
        expect=True,
        source="test1.io",
        type="sensor.temperature",
        requestor="test2.display",
    )
    # The source post office is told (as MOP's central forwards it) and answers.
    asked = await source.expect(type="manage.subscribe")
    assert env(asked)["to"] == "test1.po" and env(asked)["from"] == "test2.po"
    assert content(asked) == {
        "source": "test1.io",
        "type": "sensor.temperature",
        "requestor": "test2.display",
    }
    assert env(asked)["expect"] is True
    source.send(
        {
            "from": "test1.po",
            "to": "test2.po",
            "type": "manage.subscribe",
            "reply": env(asked)["id"],
        }
    )
    await subscriber.expect_reply(sub_id)
    source.publish("other", "sensor.temperature", c=1)  # another mailbox: not subscribed
    source.publish("io", "sensor.temperature", c=2)
    got = await subscriber.expect(type="sensor.temperature")
    assert env(got)["from"] == "test1.io" and content(got) == {"c": 2}


async def test_direct_mail_from_mop_to_the_bus_and_its_reply(mop: Mop, bob: Client) -> None:
    [example] = [e for e in examples("mop-bridge") if e.id == "mail"]
    documented = json.loads(example.body["bus"])
    desk = await bob.mailbox("desk")
    test1 = await mop.open("test1")
    mail_id = test1.mail("io", "bob.desk", "pump.off", expect=True, pump="off")
    mail = await asyncio.wait_for(desk.get(), WAIT)
    assert (mail.tgt, mail.src, mail.typ, mail.cmd) == (
        documented["TGT"],
        documented["SRC"],
        documented["TYP"],
        documented["CMD"],
    )
    assert mail.payload.to_dict() == documented["PLD"] and mail.rpy
    await bob.send(mail.ack({"ok": True}))
    reply = await test1.expect_reply(mail_id)
    assert env(reply)["from"] == "bob.desk" and env(reply)["to"] == "test1.io"
    assert content(reply) == {"ok": True}


async def test_direct_mail_from_the_bus_to_mop_and_its_reply(mop: Mop, bob: Client) -> None:
    test1 = await mop.open("test1")
    asking = asyncio.create_task(
        bob.mail("test1.io", {"x": 1}, expect=True, cmd="ask", timeout=WAIT)
    )
    got = await test1.expect(to="test1.io")
    assert env(got)["type"] == "ask" and env(got)["expect"] is True
    assert env(got)["from"] == "bob.po" and content(got) == {"x": 1}
    test1.send({"from": "test1.io", "to": "bob.po", "reply": env(got)["id"]}, answer=42)
    reply = await asyncio.wait_for(asking, WAIT)
    assert reply is not None and reply.payload.to_dict() == {"answer": 42}


async def test_mail_between_two_mop_post_offices(mop: Mop) -> None:
    a = await mop.open("test1")
    b = await mop.open("test2")
    mail_id = a.mail("io", "test2.box", "hello", expect=True, text="hi")
    got = await b.expect(to="test2.box")
    assert env(got)["from"] == "test1.io" and content(got) == {"text": "hi"}
    b.send({"from": "test2.box", "to": "test1.io", "type": "hello", "reply": env(got)["id"]}, ok=1)
    reply = await a.expect_reply(mail_id)
    assert content(reply) == {"ok": 1} and env(reply)["from"] == "test2.box"


async def test_failures_a_post_office_waits_on_are_answered(mop: Mop) -> None:
    test1 = await mop.open("test1")
    nobody = test1.mail("io", "nobody.box", "x", expect=True)
    reply = await test1.expect_reply(nobody)
    assert content(reply)["rcd"] == 404 and "nobody" in content(reply)["error"]
    euro = test1.mail("io", "test1.other", "x", expect=True, price="5 €")
    reply = await test1.expect_reply(euro)
    assert content(reply)["rcd"] == 400 and "Latin-1" in content(reply)["error"]
    secure = test1.send({"from": "test1.io", "to": "test2.box", "expect": True, "secure": "AAAA"})
    reply = await test1.expect_reply(secure)
    assert content(reply)["rcd"] == 415


async def test_management_is_for_managers_and_connected_lists_post_offices(mop: Mop) -> None:
    test1 = await mop.open("test1")
    boss = await mop.open("boss")
    refused = test1.mail("po", "central.po", "manage.status")
    reply = await test1.expect_reply(refused)
    assert content(reply)["rcd"] == 403
    status = boss.mail("po", "central.po", "manage.status")
    reply = await boss.expect_reply(status)
    assert env(reply)["type"] == "manage.status" and content(reply)["name"] == "central"
    assert content(reply)["connections"] >= 2
    connected = boss.mail("po", "central.po", "manage.connected")
    reply = await boss.expect_reply(connected)
    assert content(reply)["postOffices"].split(",") == ["boss", "test1"]


async def test_a_restarted_post_office_is_told_the_subscriptions_to_it(mop: Mop) -> None:
    subscriber = await mop.open("test2")
    subscriber.mail(
        "po", "test1.po", "manage.subscribe", source="test1.io", type="sensor", requestor="test2.x"
    )
    # Its messages are handled in order: once this is answered, the subscription is snooped.
    await subscriber.expect_reply(subscriber.mail("po", "central.po", "manage.connected"))
    source = await mop.open("test1")  # manage.connect: it started
    told = await source.expect(type="manage.subscribe")
    assert content(told) == {"source": "test1.io", "type": "sensor", "requestor": "test2.x"}


async def test_a_burst_of_publications_reaches_the_bus_in_order(mop: Mop, bob: Client) -> None:
    sub = await bob.subscribe("count.up")
    test1 = await mop.open("test1")
    for i in range(200):
        test1.publish("io", "count.up", i=i)
    got = [(await asyncio.wait_for(sub.get(), WAIT)).payload["i"] for _ in range(200)]
    assert got == list(range(200))


async def test_publications_reach_the_gateways_sse_and_its_publications_come_back(
    mop: Mop,
) -> None:
    import httpx
    import uvicorn

    from gateway.app import create_app
    from tests.gateway.conftest import base_settings, free_port
    from tests.gateway.routes.test_events import SseReader

    port = free_port()
    settings = base_settings(
        bus_url=f"bus://127.0.0.1:{mop.broker.port}", bus_name="carol", bus_secret=OFFICES["carol"]
    )
    app = create_app(settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(WAIT):
            while not server.started:
                await asyncio.sleep(0.01)
        test1 = await mop.open("test1")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as http:
            params = {"types": "sensor.*"}
            async with asyncio.timeout(WAIT):
                while (await http.get("/readyz")).status_code != 200:  # the gateway is on the bus
                    await asyncio.sleep(0.05)
            async with http.stream("GET", "/v1/subscribe", params=params) as response:
                assert response.status_code == 200
                reader = SseReader(response)
                async with asyncio.timeout(WAIT):
                    while True:  # until the stream's bus subscription is in place
                        test1.publish("io", "sensor.temp", c=18.5)
                        try:
                            event = await reader.next_event(0.3)
                        except TimeoutError:
                            continue
                        break
            data = json.loads(event["data"])
            assert data["type"] == "sensor.temp" and data["payload"] == {"c": 18.5}
            assert data["header"]["SRC"] == "test1.io"
            # And back: a MOP mailbox subscribed to the type gets the gateway's publication.
            test2 = await mop.open("test2")
            sub = test2.mail(
                "po", "web.po", "manage.subscribe", expect=True,
                source="web.api", type="alarm", requestor="test2.panel",
            )  # fmt: skip
            await test2.expect_reply(sub)
            posted = await http.post("/v1/publish/alarm.fire", json={"room": "kitchen"})
            assert posted.status_code == 202
            got = await test2.expect(type="alarm.fire")
            assert content(got) == {"room": "kitchen"} and env(got)["from"] == "web.api"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def test_unsubscribe_stops_the_events(mop: Mop, bob: Client) -> None:
    test2 = await mop.open("test2")
    for type_ in ("tick", "tock"):
        fields = {"source": "w.s", "type": type_, "requestor": "test2.x"}
        await test2.expect_reply(
            test2.mail("po", "w.po", "manage.subscribe", expect=True, **fields)
        )
    await bob.publish("tick.a", {"n": 1})
    assert content(await test2.expect(type="tick.a")) == {"n": 1}
    fields = {"source": "w.s", "type": "tick", "requestor": "test2.x"}
    await test2.expect_reply(test2.mail("po", "w.po", "manage.unsubscribe", expect=True, **fields))
    # One publisher's events arrive in order: a tick still followed would come before the tock.
    await bob.publish("tick.a", {"n": 2})
    await bob.publish("tock.b", {"n": 3})
    seen = []
    while True:
        message = await test2.recv()
        assert message is not None
        if env(message).get("type") == "tock.b":
            break
        seen.append(env(message).get("type"))
    assert "tick.a" not in seen


async def test_a_mop_manager_adds_and_deletes_post_offices(mop: Mop) -> None:
    boss = await mop.open("boss")
    secret = "newbie-secret"
    added = boss.mail(
        "po", "central.po", "manage.add", name="newbie", secret=b64_encode(secret.encode())
    )
    assert "error" not in content(await boss.expect_reply(added))
    newbie = await MopClient.open(mop.port, "newbie", secret)  # it can connect now
    assert newbie.accept is not None
    await newbie.close()
    deleted = boss.mail("po", "central.po", "manage.delete", name="newbie")
    assert "error" not in content(await boss.expect_reply(deleted))
    refused = await MopClient.open(mop.port, "newbie", secret, connect=False)
    mop.clients.append(refused)
    refused.send_connect()
    assert await refused.closed()
    write = boss.mail("po", "central.po", "manage.write")  # no --config: a clear error
    assert content(await boss.expect_reply(write))["rcd"] == 400
