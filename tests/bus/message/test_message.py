"""The Kestrel message: header fields, constructors, the reply rule, encodings."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from bus.errors import EncodeError
from bus.frame import codec
from bus.frame.codec import decode, encode
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import DataFrame
from bus.frame.jsonmap import from_typed
from bus.frame.typed import U8
from bus.message import header, message_binary
from bus.message.message import (
    Flag,
    Message,
    MessageType,
    decode_message,
    encode_event,
    encode_message,
    read_message,
)
from tests.docexamples import Example, examples

# Every test here runs against the pure-Python codec and, when it was built, the C accelerator.
IMPLEMENTATIONS = ["python"] + (["c"] if codec.accelerator_available() else [])


@pytest.fixture(autouse=True, scope="module", params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    codec.use_accelerator(request.param == "c")
    yield str(request.param)
    codec.use_accelerator(True)


def test_request_carries_cmd_in_payload_and_header() -> None:
    req = Message.request("demo", "echo", {"x": 1}, reply_to="inbox.7", xpy=1_700_000_000)
    assert req.grp == "demo" and req.rpy == "inbox.7" and req.typ == "RQS"
    assert req.cmd == "echo" and req.frame["CMD"] == "echo"
    assert req.payload == DataFrame({"CMD": "echo", "x": 1})
    assert req.enc is Encoding.FRAM
    assert req.xpy == 1_700_000_000
    assert uuid.UUID(req.mid or "").version == 4
    assert not req.to_all and not req.more
    assert req.frame.names() == ["MID", "GRP", "RPY", "TYP", "CMD", "ENC", "XPY", "PLD"]


def test_request_to_all_sets_flag_all_as_u32() -> None:
    req = Message.request("demo", "ping", to_all=True)
    assert req.to_all and req.flags == Flag.ALL
    assert req.frame.field("FLG") is not None
    assert req.frame.field("FLG").type is FieldType.U32  # type: ignore[union-attr]


def test_reply_rule() -> None:
    req = Message.request("demo", "echo", reply_to="inbox.1", enc=Encoding.JSON)
    ack = req.ack({"y": 2}, msg="done", rcd=200)
    assert ack.grp == "inbox.1"  # RPY -> GRP
    assert ack.rid == req.mid  # MID -> RID
    assert ack.enc is Encoding.JSON  # ENC kept
    assert ack.mid and ack.mid != req.mid  # a new MID
    assert ack.typ == MessageType.ACK
    assert ack.msg == "done" and ack.rcd == 200
    assert ack.payload == DataFrame({"y": 2})
    assert ack.frame.names()[:5] == ["GRP", "RID", "ENC", "MID", "TYP"]


def test_nak_and_more() -> None:
    req = Message.request("demo", "fail", reply_to="inbox.1")
    nak = req.nak("broken", rcd=503)
    assert nak.typ == "NAK" and nak.msg == "broken" and nak.rcd == 503
    assert nak.frame.field("RCD").type is FieldType.U16  # type: ignore[union-attr]
    assert req.nak("x", rcd=-1).frame.field("RCD").type is FieldType.S32  # type: ignore[union-attr]
    assert "MSG" not in req.nak("   ").frame  # blank text left out, as Kestrel does
    part = req.ack({"i": 1}, more=True)
    assert part.more and part.flags == Flag.MORE


def test_event() -> None:
    evt = Message.event("sensor.temp", {"c": 18.5})
    assert evt.typ == "EVT" and evt.grp == "sensor.temp" and evt.payload["c"] == 18.5


def test_an_event_encoded_from_its_parts_is_the_event_message() -> None:
    for payload in ({"c": 18.5, "n": 7, "text": "hello"}, {}, None, DataFrame({"x": [1, 2]})):
        evt = Message.event("sensor.temp", payload)
        raw = encode_event(evt.mid or "", "sensor.temp", payload)
        assert raw == encode_message(evt)
        assert read_message(raw) == decode_message(encode_message(evt))
    with pytest.raises(EncodeError):
        encode_event("m-1", "sensor.temp", {"bad": object()})


def test_setters() -> None:
    msg = Message()
    msg.src = "client-1"
    msg.tgt = "svc"
    msg.pri = 3
    msg.enc = "json"
    assert msg.frame.to_dict() == {"SRC": "client-1", "TGT": "svc", "PRI": 3, "ENC": "JSON"}
    msg.src = None
    assert "SRC" not in msg.frame
    assert msg.payload == DataFrame()


def test_frame_encoding_round_trip() -> None:
    req = Message.request("demo", "echo", {"x": [1, 2]}, reply_to="r")
    raw = encode_message(req)
    assert raw == encode(req.frame)
    back = decode_message(raw)
    assert back == req and back.enc is Encoding.FRAM


def test_json_encoding_is_latin1_json() -> None:
    req = Message.request("demo", "echo", {"t": "café"}, enc=Encoding.JSON, mid="m-1")
    raw = encode_message(req)
    assert raw == (
        b'{"MID":"m-1","GRP":"demo","TYP":"RQS","CMD":"echo","ENC":"JSON",'
        b'"PLD":{"CMD":"echo","t":"caf\xe9"}}'
    )
    back = decode_message(raw)
    assert back.enc is Encoding.JSON and back.payload["t"] == "café"


def test_decode_order_str_and_unkn() -> None:
    text = decode_message(b"hello, bus")
    assert text.enc is Encoding.STR and text.frame["DATA"] == "hello, bus"
    blob = decode_message(b"\x00\x7f\xff\x13")
    assert blob.enc is Encoding.UNKN and blob.frame["DATA"] == b"\x00\x7f\xff\x13"


def test_decode_order_prefers_the_binary_frame_over_json() -> None:
    # 133 bytes that are both a valid frame (one DOUBLE field with a 123-byte name) and a JSON
    # object ("\r" is DOUBLE's type code and JSON whitespace): Kestrel tries the frame first.
    raw = b"{" + b'"k":1'.ljust(123) + b"\r" + b"       }"
    assert json.loads(raw) == {"k": 1}
    message = decode_message(raw)
    assert message.enc is Encoding.FRAM
    assert message.frame.names() == ['"k":1'.ljust(123), "ENC"]
    as_json = decode_message(b'{"k":1}')
    assert as_json.enc is Encoding.JSON and as_json.frame["k"] == 1
    # JSON that is not an object or array is text; an empty body is an empty frame.
    assert decode_message(b"123").enc is Encoding.STR
    assert decode_message(b"").enc is Encoding.FRAM


def test_decode_overwrites_enc() -> None:
    frame = DataFrame({"MID": "1", "ENC": "JSON"})
    assert decode_message(encode(frame)).enc is Encoding.FRAM
    assert decode(encode(frame))["ENC"] == "JSON"


# PROTOCOL.md section 2 examples, both directions ---------------------------------------------


@pytest.mark.parametrize("example", examples("message"), ids=lambda e: e.id)
def test_document_message_example(example: Example) -> None:
    frame = from_typed(json.loads(example.body["fields"]))
    raw = example.hex()
    assert encode_message(Message(frame)) == raw
    decoded = decode_message(raw)
    expected = frame.copy()
    expected["ENC"] = "FRAM"  # the reader records how the message travelled
    assert decoded.frame == expected


def test_document_request_example_is_what_request_builds() -> None:
    (example,) = [e for e in examples("message") if e.id == "request"]
    req = Message.request(
        "demo",
        "echo",
        {"text": "hi"},
        reply_to="_INBOX.c1",
        mid="7d444840-9dc0-11d1-b245-5ffdce74fad2",
    )
    assert encode_message(req) == example.hex()


# Kestrel, byte for byte (PROTOCOL.md 2.3) -----------------------------------------------------
# Written by Kestrel's own classes (sdcote/kestrel KestrelProtocol.createResponse and Message on
# sdcote/dataframe, run with Java 17): the request of the "request" example, answered as
# AbstractService.sendResponse does (setType, setPayload, setMessage, setResultCode), MID then
# set to the documented one with put (which keeps a field's place).
KESTREL_ACK = bytes.fromhex(
    "0347525003000000095f494e424f582e633103524944030000002437643434343834302d396463302d31"
    "3164312d623234352d35666664636537346661643203454e4303000000044652414d034d494403000000"
    "2430663866616435622d643963622d343639662d613136352d3730383637373238393530650354595003"
    "0000000341434b03504c44000000000c047465787403000000026869034d534703000000024f4b035243"
    "440700c8"
)
KESTREL_NAK = bytes.fromhex(
    "0347525003000000095f494e424f582e633103524944030000002437643434343834302d396463302d31"
    "3164312d623234352d35666664636537346661643203454e4303000000044652414d034d494403000000"
    "2439623265326133662d336534632d346239612d386636312d3266306432633164376531310354595003"
    "000000034e414b034d5347030000000f6e6f207375636820636f6d6d616e6403524344070194"
)
# An ACK with a payload and a source (setSource after setPayload): the C lane's answer.
KESTREL_SOURCED_ACK = bytes.fromhex(
    "0347525003000000095f494e424f582e633103524944030000002437643434343834302d396463302d31"
    "3164312d623234352d35666664636537346661643203454e4303000000044652414d034d494403000000"
    "2430663866616435622d643963622d343639662d613136352d3730383637373238393530650354595003"
    "0000000341434b03504c44000000000c0474657874030000000268690353524303000000147376632d68"
    "6f73743a5f494e424f582e34663163"
)
# The same ACK with ENC=JSON and PLD {"text":"hi","n":7}, as Kestrel's JSONMarshaler writes it.
KESTREL_JSON_ACK = (
    b'{"GRP":"_INBOX.c1","RID":"7d444840-9dc0-11d1-b245-5ffdce74fad2","ENC":"JSON",'
    b'"MID":"0f8fad5b-d9cb-469f-a165-70867728950e","TYP":"ACK","PLD":{"text":"hi","n":7},'
    b'"MSG":"OK","RCD":200}'
)


def _documented_request(enc: Encoding = Encoding.FRAM) -> Message:
    request = Message.request(
        "demo", "echo", {"text": "hi"}, reply_to="_INBOX.c1",
        mid="7d444840-9dc0-11d1-b245-5ffdce74fad2", enc=enc,
    )  # fmt: skip
    return read_message(encode_message(request))  # as a service receives it


def _next_mid(monkeypatch: pytest.MonkeyPatch, mid: str) -> None:
    import bus.message.jsonwire
    import bus.message.message
    import bus.message.message_binary

    for module in (bus.message.message, bus.message.message_binary, bus.message.jsonwire):
        monkeypatch.setattr(module, "new_id", lambda: mid)


@pytest.mark.parametrize("payload_kind", [dict, DataFrame])
def test_an_ack_and_a_nak_are_kestrels_bytes(
    monkeypatch: pytest.MonkeyPatch, payload_kind: type
) -> None:
    request = _documented_request()
    _next_mid(monkeypatch, "0f8fad5b-d9cb-469f-a165-70867728950e")
    ack = request.ack(payload_kind({"text": "hi"}), msg="OK", rcd=200)
    assert encode_message(ack) == KESTREL_ACK
    (documented,) = [e for e in examples("message") if e.id == "ack"]
    assert KESTREL_ACK == documented.hex()
    _next_mid(monkeypatch, "9b2e2a3f-3e4c-4b9a-8f61-2f0d2c1d7e11")
    assert encode_message(request.nak("no such command", 404)) == KESTREL_NAK
    (documented,) = [e for e in examples("message") if e.id == "nak"]
    assert KESTREL_NAK == documented.hex()


@pytest.mark.parametrize("payload_kind", [dict, DataFrame])  # the C lane, the frame path
def test_a_sourced_ack_is_kestrels_bytes(
    monkeypatch: pytest.MonkeyPatch, payload_kind: type, implementation: str
) -> None:
    request = _documented_request()
    _next_mid(monkeypatch, "0f8fad5b-d9cb-469f-a165-70867728950e")
    ack = request.ack(payload_kind({"text": "hi"}), src="svc-host:_INBOX.4f1c")
    assert encode_message(ack) == KESTREL_SOURCED_ACK
    lane = payload_kind is dict and implementation == "c" and message_binary.lanes_on()
    assert (ack.wire is not None) is lane


@pytest.mark.parametrize("payload_kind", [dict, DataFrame])  # the JSON lane, the frame path
def test_a_json_ack_is_kestrels_text(monkeypatch: pytest.MonkeyPatch, payload_kind: type) -> None:
    request = _documented_request(Encoding.JSON)
    _next_mid(monkeypatch, "0f8fad5b-d9cb-469f-a165-70867728950e")
    ack = request.ack(payload_kind({"text": "hi", "n": 7}), msg="OK", rcd=200)
    assert encode_message(ack) == KESTREL_JSON_ACK
    assert (ack.wire is not None) is (payload_kind is dict)


def test_a_streamed_answer_is_the_documented_one(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _documented_request()
    _next_mid(monkeypatch, "1b4e28ba-2fa1-11d2-883f-0016d3cca427")
    part = request.ack({"i": U8(1)}, more=True)
    (documented,) = [e for e in examples("message") if e.id == "ack-more"]
    assert encode_message(part) == documented.hex()


@pytest.mark.parametrize("example", examples("message-body"), ids=lambda e: e.id)
def test_document_body_example(example: Example) -> None:
    if "body" in example.body:
        raw = example.body["body"].encode("latin-1")
    else:
        raw = example.hex("body-hex")
    message = decode_message(raw)
    assert message.enc == example.body["enc"]
    assert message.frame == from_typed(json.loads(example.body["fields"]))
    if message.enc is Encoding.JSON:  # it carried ENC=JSON, so it is written back the same
        assert encode_message(message) == raw


@pytest.mark.parametrize("accelerated", [True, False])
def test_reading_the_data_of_a_received_message_keeps_it_whole_and_changeable(
    accelerated: bool,
) -> None:
    # payload_data decodes a framed message but keeps its header for the answer; the frame,
    # once handed out, is the message again (a change to it shows in every field).
    previous = header.accelerated()
    header.use_accelerator(accelerated)
    try:
        sent = Message.request("g", "echo", {"n": 1, "t": "x"}, reply_to="_INBOX.r", trace=TRACE)
        received = read_message(encode_message(sent))
        assert received.payload_data() == {"CMD": "echo", "n": 1, "t": "x"}
        assert (received.grp, received.rpy, received.mid) == ("g", "_INBOX.r", sent.mid)
        answer = read_message(encode_message(received.ack({"ok": True})))
        assert (answer.grp, answer.rid, answer.trc) == ("_INBOX.r", sent.mid, TRACE)
        assert answer.payload_data() == {"ok": True}
        assert answer.more is False and answer.end is False
        received.frame["GRP"] = "other"
        assert received.grp == "other" and encode_message(received) != encode_message(sent)
        assert read_message(encode_message(received)).grp == "other"
    finally:
        header.use_accelerator(previous)


TRACE = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"


def _nested(levels: int, leaf: object) -> dict[str, object]:
    """A dict ``levels`` frames deep (itself the first), ``leaf`` at the bottom."""
    value: dict[str, object] = {"leaf": leaf}
    for _ in range(levels - 1):
        value = {"in": value}
    return value


def _arrays(levels: int) -> list[object]:
    """A list ``levels`` arrays deep (itself the first)."""
    value: list[object] = [1]
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("shape", ["frames", "arrays", "frame payload"])
def test_a_body_nested_deeper_than_max_depth_is_refused_naming_the_limit(shape: str) -> None:
    """Issue 30 item 7: such a body was sent and every receiver dropped it (decoders refuse
    frames and arrays nested deeper than max_depth below the top frame), so a request timed
    out. The message frame is level 0, PLD 1, ``x`` 2: 31 levels in ``x`` reach level 32."""

    def value(levels: int) -> object:
        if shape == "arrays":
            return _arrays(levels)
        nested = _nested(levels, 1)
        return DataFrame(nested) if shape == "frame payload" else nested

    fits, too_deep = {"x": value(31)}, {"x": value(32)}
    request = Message.request("svc", "echo", fits)
    assert decode_message(encode_message(request)).payload == request.payload
    assert read_message(encode_event("m-1", "a.b", fits)).payload is not None
    answer = request.reply(MessageType.ACK, fits)
    assert decode(encode_message(answer)).get("PLD") is not None
    built = [
        lambda: encode_message(Message.request("svc", "echo", too_deep)),
        lambda: encode_event("m-2", "a.b", too_deep),
        lambda: encode_message(Message.event("a.b", too_deep)),
        lambda: encode_message(request.reply(MessageType.ACK, too_deep)),
        lambda: encode_message(Message.request("svc", "echo", too_deep, enc=Encoding.JSON)),
    ]
    for build in built:
        with pytest.raises(EncodeError, match=r"max_depth \(32 levels\)"):
            build()
    # The codec itself still writes any depth (a receiver may allow more: Limits.max_depth).
    deep = Message.request("svc", "echo", too_deep).frame
    assert decode(encode(deep), codec.Limits(max_depth=40)) == deep
