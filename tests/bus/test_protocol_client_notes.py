"""PROTOCOL.md 4.6, the answers for a client writer: each one checked against the real code."""

from __future__ import annotations

import asyncio
import json

import pytest

from bus.asyncio.client import Client
from bus.broker.protocol import Authenticated, Authority, BrokerConnection
from bus.cli import build_parser
from bus.cli.broker import config_from_args
from bus.demo import create_demo_service
from bus.frame.codec import decode, encode
from bus.frame.enums import CloseReason, FieldType
from bus.frame.frame import DataFrame
from bus.frame.jsonmap import from_typed, to_typed
from bus.link import wire
from bus.message.message import Message, decode_message
from tests.conftest import MakeClient
from tests.docexamples import examples

NOTES = {example.id: example for example in examples("client-notes")}
WAIT = 10.0


def _events(conn: BrokerConnection, data: bytes, now: float = 0.0) -> list[object]:
    conn.receive_data(data, now)
    found = []
    while (event := conn.next_event()) is not wire.NEED_DATA:
        found.append(event)
    return found


def _sent(conn: BrokerConnection) -> list[Message | CloseReason]:
    decoder = wire.WireDecoder()
    decoder.receive_data(conn.data_to_send())
    out: list[Message | CloseReason] = []
    for event in decoder.events():
        if isinstance(event, wire.MessageReceived):
            out.append(decode_message(event.data))
        elif isinstance(event, wire.DisconnectReceived):
            out.append(event.reason)
    return out


def test_the_section_answers_every_question() -> None:
    assert list(NOTES) == ["binary-connect", "office-secret", "keepalive", "echo-types"]


def test_a_binary_connect_carries_its_nonce_as_bytearray_and_is_answered_so() -> None:
    example = NOTES["binary-connect"]
    frame = from_typed(json.loads(example.body["fields"]))
    assert encode(frame) == example.hex()
    assert wire.encode_message(example.hex()) == example.hex("wire") + example.hex()
    conn = BrokerConnection(Authority({"test1": "secret"}), 0.0, nonce=lambda: bytes(32))
    assert _events(conn, example.hex("wire") + example.hex()) == []
    [challenge] = _sent(conn)
    assert isinstance(challenge, Message) and challenge.cmd == "manage.challenge"
    nonce = challenge.payload.field("nonce")
    assert nonce is not None and nonce.type is FieldType.BYTEARRAY and nonce.value == bytes(32)
    # 31 bytes are refused.
    short = decode(example.hex())
    short["PLD"]["nonce"] = bytes(31)
    refused = BrokerConnection(Authority({"test1": "secret"}), 0.0)
    _events(refused, wire.encode_message(encode(short)))
    [nak, reason] = _sent(refused)
    assert isinstance(nak, Message) and "nonce of 32 bytes" in (nak.msg or "")
    assert reason is CloseReason.AUTHENTICATION_FAILURE


def test_an_office_secret_is_the_utf8_of_the_text_after_the_first_colon() -> None:
    example = NOTES["office-secret"]
    args = build_parser().parse_args(["broker", "--office", example.body["office"]])
    config = config_from_args(args)
    authority = Authority(config.offices)
    assert authority.secret(example.body["name"]) == example.hex("secret")


def test_a_silent_client_is_closed_after_one_and_a_half_intervals_a_ping_echoed() -> None:
    example = NOTES["keepalive"]
    conn = BrokerConnection(Authority({}, open_mode=True), 0.0, ping_interval=5.0)
    body = {"MID": "c", "TYP": "OAM", "CMD": "manage.connect", "PLD": {"mode": "open"}}
    body["PLD"]["inbox"] = "_INBOX.k"  # type: ignore[index]
    [authenticated] = _events(conn, wire.encode_message(json.dumps(body).encode()))
    assert isinstance(authenticated, Authenticated)
    conn.accept()
    conn.data_to_send()
    every = float(example.body["every"].split()[0])
    silent = float(example.body["silent"].split()[0])
    now = 0.0
    for _ in range(6):  # a Ping every half interval keeps the link, each one echoed
        now += every
        _events(conn, bytes.fromhex(example.body["send"]), now)
        conn.tick(now)
        assert bytes.fromhex(example.body["echo"]) in conn.data_to_send()
    conn.tick(now + silent - 0.1)
    assert b"\x05" not in conn.data_to_send()
    conn.tick(now + silent + 0.1)
    assert conn.data_to_send().endswith(example.hex("close"))


async def test_the_demo_echo_answers_values_with_inferred_types(
    client: Client, make_client: MakeClient
) -> None:
    example = NOTES["echo-types"]
    service = create_demo_service(await make_client(name="bob"))
    await service.start()
    try:
        request = from_typed(json.loads(example.body["request"]))
        answer = await client.request("demo", "echo", request, timeout=WAIT)
        assert to_typed(answer.payload) == json.loads(example.body["answer"])
    finally:
        await service.stop()


async def test_several_anonymous_links_and_a_publisher_gets_its_own_events(
    make_client: MakeClient,
) -> None:
    first = await make_client(name=None)
    second = await make_client(name=None)
    assert first.name == second.name == "anonymous" and first.inbox != second.inbox
    events = await first.subscribe("notes.own")
    await first.publish("notes.own", {"n": 1})
    got = await asyncio.wait_for(events.get(), WAIT)
    assert got.payload["n"] == 1


async def test_answers_copy_mid_into_rid_whatever_its_text(client: Client) -> None:
    inbox = client.inbox
    desk = await client.mailbox("desk")
    message = Message(
        DataFrame(
            {
                "MID": "free text, é",
                "TGT": f"{client.name}.desk",
                "TYP": "RQS",
                "RPY": inbox,
                "PLD": DataFrame(),
            }
        )
    )
    await client.send(message)
    mail = await asyncio.wait_for(desk.get(), WAIT)
    assert mail.mid == "free text, é" and mail.ack().rid == "free text, é"


@pytest.mark.parametrize("inbox", ["INBOX.x", "_inbox.x", "x" * 10])
def test_an_inbox_must_start_with_the_prefix(inbox: str) -> None:
    conn = BrokerConnection(Authority({}, open_mode=True), 0.0)
    body = {
        "MID": "c",
        "TYP": "OAM",
        "CMD": "manage.connect",
        "PLD": {"mode": "open", "inbox": inbox},
    }
    _events(conn, wire.encode_message(json.dumps(body).encode()))
    [nak, _] = _sent(conn)
    assert isinstance(nak, Message) and "inbox" in (nak.msg or "")
