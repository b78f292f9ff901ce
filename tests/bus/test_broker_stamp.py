"""The broker stamps who sent a message: SRC and CLR (``bus/broker/stamp.py``, PROTOCOL.md 5.11).

Real broker, real clients over loopback sockets; the Stamper alone for the byte-level cases.
"""

from __future__ import annotations

import asyncio

import pytest

from bus.asyncio.client import connect
from bus.broker import Broker
from bus.broker.stamp import Stamper
from bus.frame.enums import Encoding
from bus.frame.frame import DataFrame
from bus.message.message import Message, decode_message, encode_message, read_message
from tests.conftest import OFFICES, MakeBroker, MakeClient

WAIT = 10.0


def _mail(target: str, src: str | None, **extra: str) -> Message:
    frame = DataFrame()
    frame.add("MID", "m-1")
    frame.add("TGT", target)
    if src is not None:
        frame.add("SRC", src)
    frame.add("TYP", "RQS")
    for name, value in extra.items():
        frame.add(name, value)
    frame.add("PLD", DataFrame({"text": "hello"}))
    return Message(frame)


async def test_forged_src_is_delivered_with_the_senders_own_name(make_client: MakeClient) -> None:
    bob = await make_client(name="bob")
    inbox = await bob.mailbox("console")
    alice = await make_client(name="alice")
    await alice.send(_mail("bob.console", "admin.console"))
    got = await inbox.get(timeout=WAIT)
    assert got.src == "alice"
    assert got.payload["text"] == "hello"


async def test_own_src_with_a_mailbox_is_kept(make_client: MakeClient) -> None:
    bob = await make_client(name="bob")
    inbox = await bob.mailbox("console")
    alice = await make_client(name="alice")
    await alice.mail("bob.console", {"text": "hi"}, mailbox="desk")
    got = await inbox.get(timeout=WAIT)
    assert got.src == "alice.desk"


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
async def test_a_request_without_src_gets_the_senders_name(
    make_client: MakeClient, enc: Encoding
) -> None:
    bob = await make_client(name="bob")
    requests = await bob.consume("svc")
    alice = await make_client(name="alice")
    request = Message.request("svc", "echo", {"celsius": 21}, enc=enc)
    assert request.src is None
    await alice.send(request)
    got = await requests.get(timeout=WAIT)
    assert got.src == "alice"
    assert got.enc is enc
    assert got.payload_data() == {"CMD": "echo", "celsius": 21}


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
async def test_a_heartbeat_always_names_its_senders_post_office(
    make_client: MakeClient, enc: Encoding
) -> None:
    # The service directory keys an instance by the post office its heartbeats come from
    # (PROTOCOL.md 5.10): a heartbeat gets SRC like a request, a forged one is replaced.
    bob = await make_client(name="bob")
    beats = await bob.subscribe("OAM.SERVICE")
    alice = await make_client(name="alice")
    for src in (None, "bob.svc"):
        beat = Message.event("OAM.SERVICE", {"Event": "Heartbeat", "InstanceId": "i-1"})
        beat.frame["TYP"] = "HBT"
        beat.enc = enc
        if src is not None:
            beat.frame["SRC"] = src
        await alice.send(beat)
        got = await beats.get(timeout=WAIT)
        assert (got.typ, got.src, got.enc) == ("HBT", "alice", enc)
        assert got.payload["InstanceId"] == "i-1"


async def test_an_event_without_src_stays_anonymous(make_client: MakeClient) -> None:
    # MOP calls such an event bus-native: it has no source (docs/PROTOCOL.md 11.3)
    bob = await make_client(name="bob")
    events = await bob.subscribe("sensor.*")
    alice = await make_client(name="alice")
    await alice.publish("sensor.temp", {"celsius": 21})
    assert (await events.get(timeout=WAIT)).src is None
    forged = Message.event("sensor.temp", {"celsius": 22})
    forged.src = "admin.console"
    await alice.send(forged)
    assert (await events.get(timeout=WAIT)).src == "alice"


async def test_forged_clr_is_overwritten_for_an_ordinary_client(make_client: MakeClient) -> None:
    bob = await make_client(name="bob")
    inbox = await bob.mailbox("po")
    alice = await make_client(name="alice")
    await alice.send(_mail("bob.po", "alice.po", CLR="root"))
    got = await inbox.get(timeout=WAIT)
    assert (got.src, got.clr) == ("alice.po", "alice")


async def test_a_gateway_office_may_set_clr(make_broker: MakeBroker) -> None:
    broker: Broker = await make_broker(gateways=frozenset({"carol"}))
    url = f"bus://127.0.0.1:{broker.port}"
    bob = await connect(url, "bob", secret=OFFICES["bob"])
    carol = await connect(url, "carol", secret=OFFICES["carol"])
    try:
        inbox = await bob.mailbox("po")
        await carol.send(_mail("bob.po", "admin.po", CLR="key:reporting"))
        got = await inbox.get(timeout=WAIT)
        # the gateway may say whom it acts for, never that it is another post office
        assert (got.src, got.clr) == ("carol", "key:reporting")
    finally:
        await carol.close()
        await bob.close()


async def test_a_message_that_no_longer_fits_once_stamped_is_refused(
    make_broker: MakeBroker,
) -> None:
    broker: Broker = await make_broker(max_message_size=4096)
    url = f"bus://127.0.0.1:{broker.port}"
    bob = await connect(url, "bob", secret=OFFICES["bob"])
    alice = await connect(url, "alice", secret=OFFICES["alice"], reconnect=False)
    try:
        events = await bob.consume("big")
        await alice.send(Message.request("big", "one", {"n": 1}))
        assert (await events.get(timeout=WAIT)).src == "alice"
        empty = Message.request("big", "two", {"blob": b""}, mid="m-2")
        room = 4096 - len(encode_message(empty))
        full = Message.request("big", "two", {"blob": b"x" * room}, mid="m-2")
        assert len(encode_message(full)) == 4096
        await alice.send(full)
        # it would exceed the limit with SRC: the link is closed as for any oversized message
        for _ in range(int(WAIT / 0.02)):
            if not alice.connected:
                break
            await asyncio.sleep(0.02)
        assert not alice.connected
        await bob.send(Message.request("big", "after", {"n": 2}))
        assert (await events.get(timeout=WAIT)).cmd == "after"  # "two" never came
    finally:
        await alice.close()
        await bob.close()


# -- the Stamper alone ----------------------------------------------------------------------------


def _stamped(stamper: Stamper, message: Message) -> tuple[Message, bytes]:
    raw = encode_message(message)
    return stamper.stamp(read_message(raw), raw)


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_a_spliced_src_reads_as_a_decoded_one(enc: Encoding) -> None:
    message = Message.request("svc", "echo", {"a": [1, 2], "b": {"c": "d"}})
    message.enc = enc
    routed, raw = _stamped(Stamper("alice"), message)
    decoded = decode_message(raw)
    assert decoded.src == routed.src == "alice"
    assert decoded.payload == message.payload
    assert read_message(raw).header == routed.header
    assert routed.payload_data() == {"CMD": "echo", "a": [1, 2], "b": {"c": "d"}}


def test_an_own_src_costs_nothing() -> None:
    message = Message.request("svc", "echo", {})
    message.src = "alice.po"
    raw = encode_message(message)
    read = read_message(raw)
    routed, out = Stamper("alice").stamp(read, raw)
    assert routed is read and out is raw


def test_a_name_that_only_starts_like_the_office_is_not_its_own() -> None:
    message = Message.request("svc", "echo", {})
    message.src = "alicex.po"
    routed, raw = _stamped(Stamper("alice"), message)
    assert decode_message(raw).src == "alice"


def test_repeated_src_fields_leave_one() -> None:
    message = _mail("bob.po", "admin.po")
    message.frame.add("SRC", "alice.po")
    _, raw = _stamped(Stamper("alice"), message)
    assert [f.value for f in decode_message(raw).frame._fields if f.name == "SRC"] == ["alice"]


def test_a_trusted_link_keeps_clr_and_an_ordinary_one_loses_it() -> None:
    message = _mail("bob.po", "gw", CLR="key:ops")
    _, kept = _stamped(Stamper("gw", trusted=True), message)
    assert decode_message(kept).clr == "key:ops"
    message = _mail("bob.po", "eve", CLR="key:ops")
    _, lost = _stamped(Stamper("eve"), message)
    assert decode_message(lost).clr == "eve"
