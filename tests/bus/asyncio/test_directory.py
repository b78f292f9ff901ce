"""The service directory: its sans-I/O table here, the live driver in test_service.py's style."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest

from bus.asyncio.client import Client
from bus.asyncio.directory import ServiceDirectory
from bus.demo import create_demo_service
from bus.discovery.services import (
    HEARTBEAT_TYPE,
    PROBE_TYPE,
    Heartbeat,
    HeartbeatEvent,
    InstanceJoined,
    InstanceLeft,
    Load,
    ServiceTable,
    heartbeat_payload,
    parse_heartbeat,
)
from bus.errors import DecodeError
from bus.frame.frame import DataFrame
from bus.message.message import Message, MessageType
from tests.conftest import MakeClient
from tests.docexamples import Example, examples


def beat(instance: str, group: str = "demo", interval: float = 5.0, **kw: object) -> Heartbeat:
    return Heartbeat(instance_id=instance, group=group, interval=interval, **kw)  # type: ignore[arg-type]


def test_payload_round_trip() -> None:
    hb = Heartbeat(
        instance_id="i-1",
        group="demo",
        load=Load(in_flight=2, queued=1, handled=40, failed=3),
        interval=5.0,
        commands=("echo", "time"),
        host="h:1",
    )
    assert parse_heartbeat(heartbeat_payload(hb)) == hb


def test_kestrel_terminating_message_is_understood() -> None:
    # Kestrel's exit message: PLD {Event: "Terminating", InstanceId}
    hb = parse_heartbeat({"Event": "Terminating", "InstanceId": "k-1"})
    assert hb.event == HeartbeatEvent.TERMINATING
    assert hb.status == "Terminating"


@pytest.mark.parametrize(
    "payload",
    [{}, {"InstanceId": ""}, {"InstanceId": 5}, {"InstanceId": "a", "IntervalMS": "x"}],
)
def test_malformed_heartbeat_is_a_decode_error(payload: dict[str, object]) -> None:
    with pytest.raises(DecodeError):
        parse_heartbeat(payload)


def test_instances_are_counted_per_group() -> None:
    table = ServiceTable()
    assert table.observe(beat("a1"), now=100.0) == [InstanceJoined(table.instances()[0])]
    table.observe(beat("a2"), now=100.5)
    table.observe(beat("b1", group="other"), now=101.0)
    assert table.observe(beat("a1"), now=102.0) == []  # known instance: no event
    services = {s.group: s for s in table.services()}
    assert services["demo"].instances == 2
    assert services["other"].instances == 1
    assert services["demo"].last_seen == 102.0
    assert services["demo"].status == "Running"


def test_loads_are_summed_over_instances() -> None:
    table = ServiceTable()
    table.observe(beat("a1", load=Load(1, 0, 10, 1)), now=0.0)
    table.observe(beat("a2", load=Load(2, 3, 5, 0)), now=0.0)
    assert table.services()[0].load == Load(3, 3, 15, 1)


def test_terminating_removes_the_instance_at_once() -> None:
    table = ServiceTable()
    table.observe(beat("a1"), now=0.0)
    table.observe(beat("a2"), now=0.0)
    events = table.observe(beat("a1", event=HeartbeatEvent.TERMINATING), now=1.0)
    assert [type(e) for e in events] == [InstanceLeft]
    assert isinstance(events[0], InstanceLeft) and events[0].reason == "terminating"
    assert table.services()[0].instances == 1


def test_terminating_of_an_unknown_instance_is_ignored() -> None:
    table = ServiceTable()
    assert table.observe(beat("x", event=HeartbeatEvent.TERMINATING), now=0.0) == []
    assert table.services() == []


def test_an_instance_expires_after_three_missed_intervals_of_its_own() -> None:
    table = ServiceTable(missed_intervals=3)
    table.observe(beat("fast", interval=1.0), now=0.0)
    table.observe(beat("slow", interval=10.0), now=0.0)
    assert table.expire(now=2.9) == []
    assert table.next_deadline() == 3.0
    gone = table.expire(now=3.0)
    assert [e.instance.instance_id for e in gone] == ["fast"]
    assert all(isinstance(e, InstanceLeft) and e.reason == "expired" for e in gone)
    assert [i.instance_id for i in table.instances()] == ["slow"]


def test_a_heartbeat_keeps_an_instance_alive() -> None:
    table = ServiceTable()
    table.observe(beat("a", interval=1.0), now=0.0)
    table.observe(beat("a", interval=1.0), now=2.5)
    assert table.expire(now=5.0) == []
    assert table.instances()[0].first_seen == 0.0
    assert len(table.expire(now=5.5)) == 1


def test_group_status_shows_draining_when_no_instance_runs() -> None:
    table = ServiceTable()
    table.observe(beat("a", status="Draining"), now=0.0)
    assert table.services()[0].status == "Draining"
    table.observe(beat("b"), now=0.0)
    assert table.services()[0].status == "Running"


# --- PROTOCOL.md 5.10: the documented heartbeat and probe, checked on a real service ----------

HEARTBEATS = {example.id: example for example in examples("heartbeat")}
WAIT = 10.0


def _payload(example: Example) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(example.body["payload"])
    return payload


def _types(example: Example) -> dict[str, str]:
    return dict(item.split("=") for item in example.body["types"].split())


def _field_types(frame: DataFrame) -> dict[str, str]:
    return {field.name: field.type.name for field in frame.fields}


def test_the_document_has_the_heartbeat_examples() -> None:
    assert list(HEARTBEATS) == ["heartbeat", "terminating", "probe"]


@pytest.mark.parametrize("name", ["heartbeat", "terminating"])
def test_documented_heartbeats_parse_and_are_written_back_the_same(name: str) -> None:
    example = HEARTBEATS[name]
    payload = _payload(example)
    hb = parse_heartbeat(payload)
    assert hb.event == payload["Event"] and hb.group == payload["GroupName"]
    assert hb.load.handled == payload["Load"]["Handled"] and hb.interval == 5.0
    assert heartbeat_payload(hb) == payload
    assert _field_types(DataFrame(heartbeat_payload(hb))) == _types(example)


def _check_header(message: Message, example: Example) -> None:
    for key, value in json.loads(example.body["message"]).items():
        assert message.frame[key] == value


async def test_a_running_service_sends_the_documented_heartbeats(
    make_client: MakeClient, client: Client
) -> None:
    beats = await client.subscribe(HEARTBEAT_TYPE)
    service = create_demo_service(await make_client(name="bob"), heartbeat_interval=60.0)
    await service.start()
    first = await beats.get(WAIT)  # the one sent at start
    documented = HEARTBEATS["heartbeat"]
    _check_header(first, documented)
    assert _field_types(first.payload) == _types(documented)
    sent = first.payload.to_dict()
    assert list(sent) == list(_payload(documented))
    assert list(sent["Load"]) == list(_payload(documented)["Load"])
    assert sent["Commands"] == _payload(documented)["Commands"]  # the demo's commands
    assert sent["InstanceId"] == service.instance_id and sent["GroupName"] == "demo"

    probe = HEARTBEATS["probe"]
    assert json.loads(probe.body["message"])["GRP"] == PROBE_TYPE
    await client.publish(PROBE_TYPE, _payload(probe))
    answer = await beats.get(WAIT)  # long before the 60 s interval
    assert answer.payload["Event"] == "Heartbeat"
    assert answer.payload["InstanceId"] == service.instance_id

    await asyncio.wait_for(service.stop(), WAIT)
    while (last := await beats.get(WAIT)).payload["Event"] != "Terminating":
        pass  # a probe answer or periodic beat may come first
    documented = HEARTBEATS["terminating"]
    _check_header(last, documented)
    assert _field_types(last.payload) == _types(documented)
    assert last.payload["Status"] == "Terminating"


KESTREL = {example.id: example for example in examples("kestrel-heartbeat")}


def test_a_kestrel_heartbeat_without_interval_lives_for_its_60_second_interval() -> None:
    # Issue 14: a Kestrel instance was listed for 15 s of each minute (a 5 s default).
    example = KESTREL["status"]
    hb = parse_heartbeat(_payload(example))
    wanted = dict(item.split("=") for item in example.body["listed"].split())
    assert hb.group == wanted["group"] and hb.status == wanted["status"]
    assert hb.host == wanted["host"] and hb.interval == float(wanted["interval"])
    table = ServiceTable()
    table.observe(hb, now=0.0)
    assert table.expire(now=59.0) == [] and table.expire(now=179.0) == []
    assert [info.group for info in table.services()] == ["profile"]
    assert [type(e) for e in table.expire(now=180.5)] == [InstanceLeft]


def test_kestrel_state_maps_to_the_directory_status() -> None:
    base = {"InstanceId": "k1", "GroupName": "g"}
    assert parse_heartbeat({**base, "State": {"Loader": "Exiting"}}).status == "Draining"
    assert parse_heartbeat({**base, "State": {"Loader": "Started"}}).status == "Running"
    assert parse_heartbeat({**base, "IpAddress": "10.1.2.3", "DnsName": "unknown"}).host == (
        "10.1.2.3"
    )


async def test_kestrel_heartbeats_on_oam_services_reach_the_directory(client: Client) -> None:
    """A Kestrel-shaped heartbeat (no MID, OAM.SERVICES) lists the instance; its exit removes it."""
    async with ServiceDirectory(client, probe=False) as directory:
        for name in ("status", "exit"):
            example = KESTREL[name]
            frame = DataFrame(json.loads(example.body["message"]))
            frame.add("PLD", DataFrame(_payload(example)))
            await client.send(Message(frame))
            if name == "status":
                await directory.wait_for(lambda d: bool(d.services()), WAIT)
                [info] = directory.services()
                assert (info.group, info.status, info.instances) == ("profile", "Running", 1)
                [instance] = directory.instances()
                assert instance.heartbeat.interval == 60.0
            else:
                await directory.wait_for(lambda d: not d.services(), WAIT)
        assert directory.ignored == 0


def test_the_directory_reads_heartbeats_not_events_shaped_like_them() -> None:
    # On NATS no broker stands between a forger and the directory: an EVT is not a heartbeat.
    directory = ServiceDirectory(cast(Any, None), probe=False)
    beat = {"Event": "Heartbeat", "InstanceId": "i-1", "GroupName": "bank", "Status": "Running"}
    forged = Message.event("OAM.SERVICE", beat)
    assert directory.feed(forged) == [] and directory.services() == []
    assert directory.ignored == 1
    real = Message.event("OAM.SERVICE", beat)
    real.frame["TYP"] = MessageType.HBT.value
    assert directory.feed(real) and [s.group for s in directory.services()] == ["bank"]


def test_a_heartbeat_describes_and_ends_only_its_own_post_offices_instances() -> None:
    table = ServiceTable()
    assert [type(e) for e in table.observe(beat("i-1"), 0.0, office="svc")] == [InstanceJoined]
    # another post office says i-1 is terminating: not its instance, nothing ends
    assert table.observe(beat("i-1", event=HeartbeatEvent.TERMINATING), 1.0, "mallory") == []
    # its heartbeat with i-1 is an instance of its own, listed under its name
    table.observe(beat("i-1", commands=("steal",)), 1.0, office="mallory")
    assert [(i.office, i.heartbeat.commands) for i in table.instances()] == [
        ("mallory", ("steal",)),
        ("svc", ()),
    ]
    [left] = table.observe(beat("i-1", event=HeartbeatEvent.TERMINATING), 2.0, office="svc")
    assert isinstance(left, InstanceLeft) and left.instance.office == "svc"
    assert [i.office for i in table.instances()] == ["mallory"]


@pytest.mark.loops
async def test_a_forged_heartbeat_can_neither_end_nor_describe_another_offices_instance(
    make_client: MakeClient, client: Client
) -> None:
    # Issue 30 item 4: a Terminating with a live instance's id from any post office hid demo
    # from /v1/services (5 of 5 trials). The broker stamps SRC on every heartbeat, and the
    # directory keys an instance by (post office, InstanceId).
    service = create_demo_service(await make_client(name="bob"), heartbeat_interval=60.0)
    await service.start()
    forger = await make_client(name="alice")
    async with ServiceDirectory(client, probe=True) as directory:
        await directory.wait_for(lambda d: [s.group for s in d.services()] == ["demo"], WAIT)
        [real] = directory.instances()
        assert real.office == "bob"
        for src in (None, "bob", "bob.po"):  # no SRC, or another office's: stamped "alice"
            message = Message.event(
                HEARTBEAT_TYPE,
                heartbeat_payload(beat(service.instance_id, event=HeartbeatEvent.TERMINATING)),
            )
            message.frame["TYP"] = MessageType.HBT.value
            if src is not None:
                message.frame["SRC"] = src
            await forger.send(message)
        fake = Message.event(HEARTBEAT_TYPE, heartbeat_payload(beat("fake", commands=("x",))))
        fake.frame["TYP"] = MessageType.HBT.value
        fake.frame["SRC"] = "bob"
        await forger.send(fake)  # after the forgeries on the same link: seen after them
        await directory.wait_for(lambda d: len(d.instances()) == 2, WAIT)
        offices = {i.instance_id: i.office for i in directory.instances()}
        assert offices == {service.instance_id: "bob", "fake": "alice"}  # bob's still runs
    await service.stop()


@pytest.mark.loops
async def test_a_wait_cancelled_as_the_directory_changes_is_cancelled() -> None:
    """The bridge's directory loop waits on the directory and is cancelled by Bridge.stop(); a
    heartbeat (a service stopping) often changed the directory in the same loop iteration. On
    Python 3.11 ``asyncio.wait_for`` then returned instead of raising CancelledError: the waiter
    ran on and stop() hung (on uvloop every time)."""
    directory = ServiceDirectory(cast(Any, None), probe=False)
    waiter = asyncio.create_task(directory.wait_for(lambda d: d.version > 0, WAIT))
    for _ in range(5):
        await asyncio.sleep(0)  # the waiter waits on the condition
    notify = asyncio.create_task(directory._notify())
    await asyncio.sleep(0)  # the change is announced ...
    waiter.cancel()  # ... as the waiter is cancelled
    await asyncio.wait([waiter, notify], timeout=WAIT)
    assert waiter.cancelled()
