"""MOP publications reach the bus on their own (``bus/mop/follow.py``, PROTOCOL.md 11.4).

First the sans-I/O :class:`~bus.mop.follow.Follower`; then the listener against
:class:`tests.bus.mop_postoffice.MopPostOffice`, a post office that forwards a publication only
when a subscription names its source, as MOP's real ``PostOffice`` does (the listener tests in
``test_mop_listener.py`` use a stand-in that always publishes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bus.asyncio.client import Client
from bus.broker import Broker
from bus.errors import ConfigError
from bus.mop.follow import REQUESTOR, Change, Follower, mop_type
from bus.mop.listener import MopListener, open_mop_listener
from tests.bus.mop_postoffice import CENTRAL_BOX, MopPostOffice
from tests.bus.mopclient import content, env
from tests.conftest import OFFICES, MakeBroker, MakeClient

WAIT = 10.0
MOP_OFFICES = {"test1": "secret", "test2": "secret2"}

# -- the core ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("sensor", "sensor"),
        ("sensor.temp", "sensor.temp"),
        ("sensor.*", "sensor"),
        ("sensor.>", "sensor"),
        ("a.b.*", "a.b"),
        ("*.temp", None),
        (">", None),
        ("OAM.SERVICE", None),
        ("_INBOX.x", None),
    ],
)
def test_a_bus_pattern_asks_mop_for_its_literal_prefix(pattern: str, expected: str | None) -> None:
    assert mop_type(pattern) == expected


def test_the_follower_asks_each_source_for_each_type_and_takes_back_what_goes() -> None:
    follower = Follower(["test1.io"])
    assert follower.changes("test1") == []  # the bus wants nothing yet
    assert follower.follow(["sensor.*", "pump.on", ">"])
    assert follower.changes("test1") == [
        Change(True, "test1.io", "pump.on"),
        Change(True, "test1.io", "sensor"),
    ]
    assert follower.changes("test1") == []  # asked already
    assert follower.learn("test1.pump") and not follower.learn("test1.pump")
    assert not follower.learn("test1.po") and not follower.learn("central.x")
    assert follower.changes("test1") == [
        Change(True, "test1.pump", "pump.on"),
        Change(True, "test1.pump", "sensor"),
    ]
    follower.follow(["sensor.temp"])
    held = {("test1.io", "pump.on")}  # another MOP subscriber holds this one
    changes = follower.changes("test1", held=lambda s, t: (s, t) in held)
    assert changes == [
        Change(False, "test1.io", "sensor"),
        Change(False, "test1.pump", "pump.on"),
        Change(False, "test1.pump", "sensor"),
        Change(True, "test1.io", "sensor.temp"),
        Change(True, "test1.pump", "sensor.temp"),
    ]
    assert follower.asked("test1.io", "sensor.temp") and not follower.asked("test1.io", "pump.on")
    follower.restarted("test1")  # a restarted post office holds nothing: asked again, all
    assert [c.subscribe for c in follower.changes("test1")] == [True, True]


def test_the_follower_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    follower = Follower(max_sources=2, max_subscriptions=3)
    assert [follower.learn(f"po1.m{i}") for i in range(3)] == [True, True, False]
    follower.follow(["a", "b"])
    assert len(follower.changes("po1")) == 3  # 2 sources x 2 types, cut to 3
    assert any("left out" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="po.mailbox"):
        Follower(["nodot"])


# -- the listener and a post office that routes as MOP's ----------------------------------------


class Net:
    def __init__(self, broker: Broker, listener: MopListener) -> None:
        self.broker = broker
        self.listener = listener
        self.offices: list[MopPostOffice] = []

    async def office(self, name: str, **kwargs: object) -> MopPostOffice:
        po = await MopPostOffice.open(self.listener.port, name, MOP_OFFICES[name], **kwargs)
        self.offices.append(po)
        return po


@pytest.fixture
async def net(make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Net]:
    monkeypatch.setenv("BUSGATE_MOP_SOURCES", "test1.io")
    broker = await make_broker(offices={**OFFICES, **MOP_OFFICES})
    listener = await open_mop_listener(broker, "127.0.0.1", 0, follow_interval=0.05)
    net = Net(broker, listener)
    yield net
    for po in net.offices:
        await po.close()
    await listener.stop()


@pytest.fixture
async def bob(net: Net, make_client: MakeClient) -> Client:
    return await make_client(f"bus://127.0.0.1:{net.broker.port}", "bob")


async def _publish_until_received(po: MopPostOffice, sub: object, type_: str, **fields: object):  # type: ignore[no-untyped-def]
    """Publish every 0.1 s until the bus subscription gets one (the listener's subscribe is on
    its way); returns the event."""
    async with asyncio.timeout(WAIT):
        while True:
            po.publish("io", type_, **fields)
            try:
                return await sub.get(timeout=0.1)  # type: ignore[attr-defined]
            except TimeoutError:
                continue


async def test_a_mop_publisher_reaches_a_bus_subscriber_once_the_bus_subscribes(
    net: Net, bob: Client
) -> None:
    po = await net.office("test1")
    po.publish("io", "sensor.temp", c=1)  # nobody on the bus wants it: MOP keeps it
    await asyncio.sleep(0.3)
    assert po.forwarded == [] and po.central_buckets() == set()
    sub = await bob.subscribe("sensor.*")
    await po.wait_for(lambda: po.central_buckets() == {"test1.io.sensor"})
    (asked,) = po.requests
    assert env(asked)["type"] == "manage.subscribe" and env(asked)["to"] == "test1.po"
    assert content(asked) == {"source": "test1.io", "type": "sensor", "requestor": REQUESTOR}
    event = await _publish_until_received(po, sub, "sensor.temp", c=18.5)
    assert event.grp == "sensor.temp" and event.src == "test1.io"
    assert event.payload.to_dict() == {"c": 18.5}
    # The bus stops wanting it: the post office is told, and forwards nothing more.
    await sub.unsubscribe()
    await po.wait_for(lambda: po.central_buckets() == set())
    assert env(po.requests[-1])["type"] == "manage.unsubscribe"


async def test_a_mailbox_the_post_office_uses_becomes_a_source(net: Net, bob: Client) -> None:
    sub = await bob.subscribe("pump")
    desk = await bob.mailbox("desk")
    po = await net.office("test1")
    await po.wait_for(lambda: po.central_buckets() == {"test1.io.pump"})  # the operator's
    po.link.mail("valve", "bob.desk", "hello")  # test1.valve is seen in use
    await asyncio.wait_for(desk.get(), WAIT)
    await po.wait_for(lambda: "test1.valve.pump" in po.central_buckets())
    po.publish("valve", "pump.on", n=1)
    event = await sub.get(timeout=WAIT)
    assert event.grp == "pump.on" and event.src == "test1.valve"


async def test_a_publication_in_two_buckets_reaches_the_bus_once(net: Net, bob: Client) -> None:
    wide = await bob.subscribe("sensor.*")
    narrow = await bob.subscribe("sensor.temp")
    po = await net.office("test1")
    await po.wait_for(lambda: po.central_buckets() == {"test1.io.sensor", "test1.io.sensor.temp"})
    first = po.publish("io", "sensor.temp", n=1)
    po.publish("io", "sensor.end", n=2)
    assert [env(m)["id"] for m in po.forwarded].count(first) == 2  # as MOP's post office does
    seen = []
    while (event := await wide.get(timeout=WAIT)).grp != "sensor.end":
        seen.append(event.payload["n"])
    assert seen == [1]  # the listener dropped the copy
    assert (await narrow.get(timeout=WAIT)).payload["n"] == 1 and narrow.pending() == 0


async def test_a_mop_subscriber_leaving_does_not_cut_the_bus_off(net: Net, bob: Client) -> None:
    sub = await bob.subscribe("sensor.*")
    source = await net.office("test1")
    await source.wait_for(lambda: source.central_buckets() == {"test1.io.sensor"})
    subscriber = await net.office("test2")
    fields = {"source": "test1.io", "type": "sensor", "requestor": "test2.panel"}
    asked = subscriber.link.mail("po", "test1.po", "manage.subscribe", expect=True, **fields)
    await subscriber.expect_reply(asked)
    left = subscriber.link.mail("po", "test1.po", "manage.unsubscribe", expect=True, **fields)
    await subscriber.expect_reply(left)  # answered, but not passed on: the bus holds it
    assert [env(m)["type"] for m in source.requests].count("manage.unsubscribe") == 0
    assert CENTRAL_BOX in source.subscribers("test1.io", "sensor")
    event = await _publish_until_received(source, sub, "sensor.temp", c=1)
    assert event.src == "test1.io"


async def test_a_restarted_post_office_is_asked_again(net: Net, bob: Client) -> None:
    sub = await bob.subscribe("sensor")
    first = await net.office("test1")
    await first.wait_for(lambda: first.central_buckets() == {"test1.io.sensor"})
    await first.close()
    net.offices.remove(first)
    again = await net.office("test1")  # a new process: ids from 1, an empty table
    await again.wait_for(lambda: again.central_buckets() == {"test1.io.sensor"})
    event = await _publish_until_received(again, sub, "sensor.temp", c=2)
    assert event.payload.to_dict() == {"c": 2}


async def test_types_the_operator_names_reach_subscribers_of_everything(
    make_broker: MakeBroker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pattern that names no type (``>``, the Object System bridge's) gets MOP publications of
    the types in BUSGATE_MOP_TYPES."""
    monkeypatch.setenv("BUSGATE_MOP_SOURCES", "test1.io")
    monkeypatch.setenv("BUSGATE_MOP_TYPES", "alarm,sensor.temp")
    broker = await make_broker(offices={**OFFICES, **MOP_OFFICES})
    listener = await open_mop_listener(broker, "127.0.0.1", 0, follow_interval=0.05)
    po = await MopPostOffice.open(listener.port, "test1", MOP_OFFICES["test1"])
    try:
        everything = await (await make_client(f"bus://127.0.0.1:{broker.port}", "bob")).subscribe(
            ">"
        )
        await po.wait_for(
            lambda: po.central_buckets() == {"test1.io.alarm", "test1.io.sensor.temp"}
        )
        po.publish("io", "alarm.fire", room="kitchen")
        event = await everything.get(timeout=WAIT)
        while event.grp != "alarm.fire":  # heartbeats and the like
            event = await everything.get(timeout=WAIT)
        assert event.payload.to_dict() == {"room": "kitchen"}
    finally:
        await po.close()
        await listener.stop()
    for name, value in (("SOURCES", "nodot"), ("TYPES", "a.b.c"), ("TYPES", "*")):
        monkeypatch.setenv(f"BUSGATE_MOP_{name}", value)
        with pytest.raises(ConfigError, match=f"BUSGATE_MOP_{name}"):
            await open_mop_listener(broker, "127.0.0.1", 0)
        monkeypatch.delenv(f"BUSGATE_MOP_{name}")
