"""The JSON lane (bus/message/jsonwire.py): what orjson writes and reads must be what the frame path
(bus/frame/jsonmap.py) gives, message for message; where it would not be, the lane says None."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus.errors import EncodeError
from bus.frame.codec import DEFAULT_LIMITS, Limits
from bus.frame.enums import Encoding
from bus.frame.frame import DataFrame
from bus.frame.jsonmap import from_json, to_json
from bus.message import header, jsonwire
from bus.message.ids import format_id
from bus.message.jsonwire import (
    _fields,
    _hotpath,
    _plain_reference,
    latin1_json,
    plain_json,
    read_plain,
)
from bus.message.message import Message, decode_message, encode_message, read_message

pytestmark = pytest.mark.skipif(
    not header.accelerated(), reason="the lane needs bus.native._hotpath"
)

names = st.text(alphabet=st.characters(max_codepoint=0x2FF), min_size=1, max_size=8)
latin1 = st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    latin1,
)
plain = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=4),
        st.dictionaries(names, children, min_size=1, max_size=4),
    ),
    max_leaves=15,
)
payloads = st.dictionaries(names, plain, max_size=6)


def _without_mid(message: Message) -> DataFrame:
    frame = decode_message(encode_message(message)).frame.copy()
    frame.remove("MID")
    return frame


def _json_request() -> Message:
    return read_message(
        encode_message(Message.request("g", "c", {"a": 1}, reply_to="_INBOX.r", enc="JSON"))
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, st.booleans(), st.sampled_from([None, 0, 409, -1, 70000]))
def test_a_reply_the_lane_writes_reads_as_the_frame_paths(
    data: dict[str, Any], more: bool, rcd: int | None
) -> None:
    request = _json_request()
    lane = request.ack(data, msg="ok", rcd=rcd, more=more)
    framed = request.ack(DataFrame(data), msg="ok", rcd=rcd, more=more)  # never the lane
    assert framed.wire is None
    # Names beyond Latin-1 need \u escapes in the wire's Latin-1 text, floats orjson would
    # write with an exponent need a fraction (PROTOCOL.md 1.7), and an empty nested frame is
    # [] (as Java writes it): the frame path writes them.
    if all(ord(c) <= 0xFF for c in json.dumps(data, ensure_ascii=False)) and _lane_writes(data):
        assert lane.wire is not None
    assert _without_mid(lane) == _without_mid(framed)
    if lane.wire is not None:  # the same bytes as the frame path (Kestrel's order, 2.3)
        assert lane.wire == encode_message(framed).replace(framed.mid.encode(), lane.mid.encode())


def _lane_writes(value: Any) -> bool:
    """No float that orjson writes with an exponent, no empty container."""
    if type(value) is float:
        return value == 0 or 1e-4 <= abs(value) < 1e16
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return bool(value) and all(_lane_writes(item) for item in value)
    return True


@pytest.mark.parametrize(
    "data",
    [
        {"when": datetime(2024, 1, 1, tzinfo=UTC)},  # a DATE: written by the frame path
        {"raw": b"\x00\x01"},
        {"": 1},  # an unnamed field
        {"x": "\u20ac"},  # beyond Latin-1: the frame path raises EncodeError
        {"x": math.nan},
        {"x": 1e16},  # orjson writes 1e+16, which Java reads as a STRING
        {"x": 1e-7},
        {"x": {}},  # the frame path writes an empty nested frame as [], as Java
        {"x": []},
        {"x": 2**64},
        {"x": {"y": {"z": 1}}},  # deeper than the limits below allow
        {"n" * 256: 1},
        {1: 2},
    ],
)
def test_data_the_lane_leaves_to_the_frame_path(data: dict[Any, Any]) -> None:
    assert plain_json(data, max_depth=1, max_fields=100) is None


def test_limits_are_counted_as_the_decoder_counts_them() -> None:
    assert plain_json({"a": {"b": 1}}, max_depth=1, max_fields=2) == b'{"a":{"b":1}}'
    assert plain_json({"a": {"b": {"c": 1}}}, max_depth=1, max_fields=10) is None
    assert plain_json({"a": [1, 2]}, max_depth=1, max_fields=2) is None  # 3 fields
    request = _json_request()
    deep: dict[str, Any] = {"x": 1}
    for _ in range(31):
        deep = {"x": deep}  # the payload is one level down: 31 more fit in max_depth 32
    assert request.ack(deep).wire is not None
    assert request.ack({"x": deep}).wire is None  # too deep: the frame path raises its error


def test_an_rcd_beyond_32_bits_is_left_to_the_frame_path() -> None:
    with pytest.raises(EncodeError, match="not a 32-bit integer"):
        _json_request().nak("bad", rcd=2**31)  # the frame path's error, not a silent lane


def test_latin1_json() -> None:
    assert latin1_json(b'{"a":"\xc3\xa9"}') == b'{"a":"\xe9"}'
    assert latin1_json('{"a":"\u20ac"}'.encode()) is None


@settings(max_examples=300, deadline=None)
@given(payloads)
def test_reading_a_payload_back_gives_to_dict(data: dict[str, Any]) -> None:
    text = to_json(DataFrame(data)).encode("latin-1")
    raw = b'{"MID":"m","GRP":"_INBOX.x","TYP":"ACK","ENC":"JSON","PLD":' + text + b"}"
    message = read_message(raw)
    assert message.wire == raw  # read without decoding
    assert message.payload_data() == from_json(text).to_dict()


def test_a_repeated_name_is_read_by_the_frame() -> None:
    text = b'{"a":1,"a":2}'
    assert read_plain(text, 2) is None  # orjson keeps the last, to_dict the first
    message = read_message(
        b'{"MID":"m","GRP":"_INBOX.x","RID":"r","TYP":"ACK","ENC":"JSON","PLD":' + text + b"}"
    )
    assert message.payload_data() == {"a": 1}


@settings(max_examples=200, deadline=None)
@given(payloads)
def test_a_request_the_lane_writes_is_the_one_request_builds(data: dict[str, Any]) -> None:
    body = json.dumps({"CMD": "echo", **{k: v for k, v in data.items() if k != "CMD"}})
    if not body.isascii():
        assert Message.json_request("g", body.encode(), reply_to="_INBOX.r") is None
        return
    lane = Message.json_request("g", body.encode(), reply_to="_INBOX.r")
    reference = Message.request(
        "g", "echo", from_json(body), reply_to="_INBOX.r", enc=Encoding.JSON
    )
    head = header.peek_json(body.encode())
    if head is None or head.quirks:
        assert lane is None
        return
    assert lane is not None
    assert _without_mid(lane) == _without_mid(reference)
    assert read_message(encode_message(lane)).payload_data() == from_json(body).to_dict()


@pytest.mark.parametrize(
    "body",
    [
        b'{"x":1,"CMD":"echo"}',  # CMD not first: the frame path puts it first
        b'{"CMD":"echo","CMD":"again"}',
        b'{"CMD":""}',
        b'{"CMD":1}',
        b'{"CMD":"echo","x":[]}',
        b'{"CMD":"echo","x":1e400}',
        b'{"CMD":"echo","x":1e5}',  # Java reads 1e5 as a STRING: the frame path writes 100000.0
        '{"CMD":"echo","x":"\u00e9"}'.encode(),  # not ASCII
        b'[{"CMD":"echo"}]',
    ],
)
def test_request_bodies_left_to_the_frame_path(body: bytes) -> None:
    assert Message.json_request("g", body, reply_to="_INBOX.r") is None


def test_the_depth_of_a_request_body_counts_the_payload_level() -> None:
    def nested(depth: int) -> bytes:
        return b'{"CMD":"e","a":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"

    limits = Limits(max_depth=4)
    deepest = Message.json_request("g", nested(3), limits=limits)  # PLD at 1, its objects 2..4
    assert deepest is not None and deepest.wire is not None
    assert decode_message(deepest.wire, limits).enc is Encoding.JSON  # receivers read it
    assert Message.json_request("g", nested(4), limits=limits) is None
    too_deep = Message.request("g", "e", from_json(nested(4)), enc=Encoding.JSON)
    assert decode_message(encode_message(too_deep), limits).enc is Encoding.STR  # refused


def test_json_parts_cut_what_the_frame_path_writes() -> None:
    request = _json_request()
    ack = read_message(encode_message(request.ack({"x": 1.5, "y": ["\u00e9"]}, msg="fine")))
    parts = ack.json_parts()
    assert parts is not None
    head, payload = (json.loads(part) for part in parts)
    assert head == json.loads(to_json(_header_frame(ack)))
    assert payload == {"x": 1.5, "y": ["\u00e9"]}
    quirky = read_message(encode_message(request.ack({"x": []})))
    assert quirky.json_parts() is None


def _header_frame(message: Message) -> DataFrame:
    frame = decode_message(encode_message(message)).frame.copy()
    frame.remove("PLD")
    return frame


class _Str(str):
    pass


# What the C checks meet besides plain data: every kind the reference turns away.
anything = st.recursive(
    st.one_of(
        scalars,
        st.text(max_size=6),  # above Latin-1, lone surrogates
        st.integers(-(2**70), 2**70),
        st.floats(),  # NaN and infinities
        st.binary(max_size=3),
        st.just(_Str("x")),
        st.just(True),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=300), st.integers(0, 3)), children, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(anything, st.integers(-1, 6), st.integers(-1, 40))
def test_the_accelerators_plain_check_is_the_references(
    value: Any, depth: int, max_fields: int
) -> None:
    assert _hotpath.plain(value, depth, max_fields) is _plain_reference(value, depth, max_fields)


@settings(max_examples=300, deadline=None)
@given(plain)
def test_the_accelerator_counts_fields_as_the_reference(value: Any) -> None:
    data = json.loads(json.dumps(value))  # lists and dicts, as orjson reads them
    assert _hotpath.count_fields(data) == _fields(data)


def test_the_plain_checks_edges() -> None:
    assert _hotpath.plain({"x": 2**64 - 1, "y": -(2**63)}, 2, 2)
    assert not _hotpath.plain({"x": 2**64}, 2, 2)
    assert not _hotpath.plain({"x": -(2**63) - 1}, 2, 2)
    assert not _hotpath.plain({"n" * 256: 1}, 2, 2)
    assert _hotpath.plain({"é" * 127: 1}, 2, 2)  # 254 UTF-8 bytes
    assert not _hotpath.plain({"é" * 128: 1}, 2, 2)
    assert not _hotpath.plain({"\ud800": 1}, 2, 2)
    assert not _hotpath.plain({"a": [1, 2]}, 2, 2)  # three fields
    assert not _hotpath.plain({"a": {"b": {}}}, 2, 10)  # three levels


# -- the gateway's requests written by the C accelerator (json_request) --------------------

_TRACE = "00-0af7651916cd76836b0b0a2b5a7a6d2e-b7ad6b7169203331-01"
_BLOCK = bytes(range(16, 48))


def _both(
    body: bytes, group: str, reply_to: str | None, src: str | None, caller: str | None,
    trace: str | None, limits: Limits = DEFAULT_LIMITS,
) -> tuple[Any, Any]:  # fmt: skip
    """The accelerator's request and the reference's, both with the id of ``_BLOCK`` at 8."""
    inner = jsonwire._inner_limits(limits)
    fast = _hotpath.json_request(
        body, group, reply_to, src, caller, trace, inner.max_depth, inner.max_fields, _BLOCK, 8
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonwire, "new_id", lambda: format_id(_BLOCK, 8))
        reference = jsonwire.compose_request_reference(
            group, body, reply_to, limits, src, caller, trace
        )
    if fast is not None:
        fast = (fast[0], header.Header(*fast[1]))
    return fast, reference


@pytest.mark.parametrize(
    ("body", "names", "accelerated"),
    [
        (b'{"CMD":"echo","x":1}', ("demo", "_INBOX.r", "gw-1", None, _TRACE), True),
        (
            b' \r\n{ "CMD" : "echo" , "x" : [1, {"y": null}] }\t',
            ("a.b:c-d_e", None, None, None, None),
            True,
        ),
        (b'{"CMD":"echo"}', ("demo", "_INBOX.r", "gw-1", "alice@example.com", _TRACE), True),
        (b'{"CMD":"e c/h\'o"}', ("demo", "_INBOX.r", None, None, None), True),
        (b'{"CMD":"e\\u0063ho"}', ("demo", "_INBOX.r", None, None, None), False),  # an escape
        (b'{"CMD":"echo"}', ("demo", "_INBOX.r", None, 'say "hi"', None), False),  # a quote
        (b'{"CMD":"echo"}', ("demo", "_INBOX.r", None, "back\\slash", None), False),
        (b'{"CMD":"echo"}', ("demo", "_INBOX.r", None, "caf\u00e9", None), False),  # not ASCII
        (b'{"CMD":"echo"}', ("demo", "_INBOX.r", None, "tab\there", None), False),
        (b'{"x":1,"CMD":"echo"}', ("demo", None, None, None, None), False),
        (b'{"CMD":""}', ("demo", None, None, None, None), False),
        (b'{"CMD":1}', ("demo", None, None, None, None), False),
        (b'{"CMD":"echo","x":[]}', ("demo", None, None, None, None), False),  # a quirk
        (b'{"CMD":"echo","x":"\xe9"}', ("demo", None, None, None, None), False),
        (b'{"CMD":"echo"', ("demo", None, None, None, None), False),
        (b'{"CMD":"echo"} x', ("demo", None, None, None, None), False),
        (b"", ("demo", None, None, None, None), False),
    ],
)
def test_the_accelerators_request_is_the_references(
    body: bytes, names: tuple[Any, ...], accelerated: bool
) -> None:
    fast, reference = _both(body, *names)
    assert (fast is not None) == accelerated
    if fast is not None:
        assert fast == reference
    # compose_request: the accelerator's, else the reference's (an escape, a quote: the same
    # request as before it existed)
    composed = jsonwire.compose_request(names[0], body, names[1], Limits(), *names[2:])
    assert (composed is None) == (reference is None)
    if composed is not None and reference is not None:
        mid = composed[1].mid
        assert composed[0].replace(mid.encode(), b"M") == reference[0].replace(
            reference[1].mid.encode(), b"M"
        )
        assert composed[1]._replace(mid="M") == reference[1]._replace(mid="M")


texts = st.text(alphabet=st.characters(max_codepoint=0x17F), max_size=10)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads,
    st.sampled_from(["", " ", "\n\t "]),
    st.one_of(st.sampled_from(["demo", "a.b:c-d_e"]), texts.filter(bool)),
    st.one_of(st.none(), texts),
    st.one_of(st.none(), texts),
    st.one_of(st.none(), texts),
    st.integers(1, 6),
)
def test_the_accelerator_writes_every_request_as_the_reference(
    data: dict[str, Any], space: str, group: str, reply_to: str | None, caller: str | None,
    trace: str | None, depth: int,
) -> None:  # fmt: skip
    body = (space + json.dumps({"CMD": "echo", **data}, separators=(",", ": ")) + space).encode()
    fast, reference = _both(body, group, reply_to, "gw-1", caller, trace, Limits(max_depth=depth))
    if fast is not None:
        assert fast == reference
