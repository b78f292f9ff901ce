"""The routing header read without decoding (bus/message/header.py, bus/native/_hotpath.c) against
the decoder.

The contract: whenever ``peek`` gives a header, ``decode_message`` decodes the same body to a
message with exactly that header and ENC, and the payload bounds hold the payload; None is
always allowed (the caller decodes). So every case compares the two, on hand-made bodies, on
generated frames in both encodings and on damaged ones.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus.broker.replay import with_seq
from bus.frame.codec import Limits, decode, encode
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import DataFrame, Typed
from bus.frame.jsonmap import from_json
from bus.message import header as header_module
from bus.message.header import ENC_CODES, Header, header_of, peek, peek_json
from bus.message.message import Message, decode_message, encode_message, read_header, read_message
from tests.bus.frame.test_codec_fuzz import frames

pytestmark = pytest.mark.skipif(
    not header_module.accelerated(),
    reason="needs the C accelerator (the reference is tested below)",
)
DEFAULT = Limits()


def _check(raw: bytes, limits: Limits = DEFAULT) -> Header | None:
    """peek(raw), after checking it against decode_message."""
    head = peek(raw, limits)
    if head is None:
        return None
    message = decode_message(raw, limits)
    decoded = header_of(message)
    # Every field from enc to xpy but enc_field: the body's own ENC, which decoding overwrites.
    assert head[:9] + head[10:13] == decoded[:9] + decoded[10:13], raw
    assert (head.clr, head.trc) == (decoded.clr, decoded.trc), raw
    assert (head.rpl, head.seq) == (decoded.rpl, decoded.seq), raw
    assert ENC_CODES[head.enc] is message.enc
    if head.pld_start >= 0:
        span = raw[head.pld_start : head.pld_end]
        payload = decode(span, limits) if head.enc == 0 else from_json(span, limits)
        # as bytes: a NaN in the payload is never equal to itself
        assert encode(payload) == encode(message.payload), raw
    return head


def _request(enc: Encoding, **extra: Any) -> bytes:
    message = Message.request("demo", "echo", {"x": 1, "y": [1, 2]}, reply_to="_INBOX.ab", enc=enc)
    for name, value in extra.items():
        message.frame[name] = value
    return encode_message(message)


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_a_request_reads_as_decoded(enc: Encoding) -> None:
    head = _check(_request(enc, FLG=Typed(FieldType.U32, 3), XPY=1700000000, RCD=404))
    assert head is not None
    assert (head.typ, head.grp, head.rpy, head.cmd, head.flg, head.xpy) == (
        "RQS", "demo", "_INBOX.ab", "echo", 3, 1700000000,
    )  # fmt: skip
    assert head.enc == (0 if enc is Encoding.FRAM else 1)


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_caller_and_trace_are_read_from_the_header(enc: Encoding) -> None:
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    head = _check(_request(enc, SRC="alice", CLR="key:ops", TRC=trace))
    assert head is not None and (head.src, head.clr, head.trc) == ("alice", "key:ops", trace)
    # a CLR inside the payload is the application's, not the header's
    head = _check(_request(enc, PLD=DataFrame({"CMD": "echo", "CLR": "root", "TRC": "x"})))
    assert head is not None and (head.clr, head.trc) == (None, None)


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_a_journaled_events_seq_and_replay_pattern_are_read_from_the_header(
    enc: Encoding,
) -> None:
    # A durable subscriber reads both of every event (5.14): from the header, not by decoding.
    event = Message.event("sensor.temp", {"c": 1, "SEQ": 9, "RPL": "x"})  # the payload's: not these
    event.enc = enc
    raw = with_seq(encode_message(event), 0 if enc is Encoding.FRAM else 1, 2**40 + 7, "sensor.*")
    head = _check(raw)
    assert head is not None and (head.seq, head.rpl) == (2**40 + 7, "sensor.*")
    live = _check(with_seq(encode_message(event), 0 if enc is Encoding.FRAM else 1, 3))
    assert live is not None and (live.seq, live.rpl) == (3, None)
    assert read_message(raw).seq == 2**40 + 7 and read_message(raw).rpl == "sensor.*"
    # What the header cannot hand over as it is goes to the decoder, which gives the same.
    for odd in ({"SEQ": "9"}, {"SEQ": Typed(FieldType.U64, 2**64 - 1)}, {"RPL": 5}):
        message = Message.event("sensor.temp", {"c": 1})
        message.enc = enc
        for name, value in odd.items():
            message.frame[name] = value
        body = encode_message(message)
        if enc is Encoding.FRAM or "U64" not in repr(odd):
            assert peek(body) is None, odd
            assert read_message(body).seq == decode_message(body).seq


def test_json_bodies_the_fast_path_leaves_to_the_decoder() -> None:
    base = b'{"MID":"m","GRP":"g","TYP":"EVT","PLD":{"a":1}}'
    assert _check(base) is not None
    leave = [
        b'{"GRP":"g","GRP":"h","TYP":"EVT"}',  # a repeated header name
        b'{"\\u0047RP":"g","TYP":"EVT"}',  # an escaped name that spells GRP
        b'{"GRP":5,"TYP":"EVT"}',  # a header field that is not text
        b'{"GRP":"a\\"b","TYP":"EVT"}',  # a header text with an escape
        b'{"FLG":1.0,"TYP":"EVT"}',  # FLG not an integer
        b'{"FLG":18446744073709551615,"TYP":"EVT"}',  # FLG beyond a long
        b'[{"GRP":"g"}]',  # an array: no header
        b'{"PLD":[1,2],"TYP":"EVT"}',  # a payload that is not an object
    ]
    for raw in leave:
        assert peek(raw) is None, raw
        decode_message(raw)  # still a message, by the reference


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,}',
        b'{"a":01}',
        b'{"a":1.}',
        b'{"a":-}',
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":"\x01"}',  # a raw control character
        b'{"a":"\\u0100"}',  # a value beyond Latin-1
        b'{"a":"\\ud800"}',  # a lone surrogate
        b'{"a":18446744073709551616}',  # beyond 64 bits
        b'{"a":-9223372036854775809}',
        b'{"' + b"n" * 256 + b'":1}',  # a name of 256 bytes
        b'{"' + "\u00e9".encode("latin-1") * 128 + b'":1}',  # 128 Latin-1 chars = 256 UTF-8 bytes
        b'{"a":1} x',
        b'{"a":tru}',
    ],
)
def test_json_the_decoders_refuse_is_never_vouched_for(raw: bytes) -> None:
    assert peek(raw) is None
    assert decode_message(raw).enc in (Encoding.STR, Encoding.UNKN)


@pytest.mark.parametrize(
    "raw",
    [
        b' {"a" : 1 , "b":[ ], "c":{}}\n',
        b'{"a":18446744073709551615,"b":-9223372036854775808,"c":-0,"d":1E+2,"e":1e400}',
        b'{"' + b"n" * 255 + b'":1}',
        b'{"a":{"\\u00e9\\ud83d\\ude00":"\\u00ff\\n\\/"}}',  # escapes below the top
        b'{"a":"\x7f\x80\xff"}',
    ],
)
def test_json_the_decoders_accept_is_read_the_same(raw: bytes) -> None:
    assert _check(raw) is not None


@pytest.mark.parametrize("offset", range(18))
@pytest.mark.parametrize(
    "special",
    [b"\x01", b"\x1f", b"\x7f", b"\x80", b"\xe9", b'\\"', b"\\\\", b"\\u00e9", b"\\u0100", b"!#"],
)
def test_a_long_text_reads_as_the_decoders_whatever_byte_sits_where(
    offset: int, special: bytes
) -> None:
    # The reader takes plain ASCII eight bytes at a time: a byte that is not plain must be seen
    # at every place in such a block, in a name and in a value alike.
    text = b"a" * offset + special + b"b" * (17 - offset)
    for raw in (
        b'{"TYP":"EVT","GRP":"' + text + b'","PLD":{"x":1}}',
        b'{"TYP":"EVT","GRP":"g","PLD":{"' + text + b'":"' + text + b'"}}',
    ):
        head = _check(raw)
        refused = special in (b"\x01", b"\x1f", b"\\u0100") or (
            special.startswith(b"\\") and b'GRP":"' + text in raw  # an escape in a header
        )
        assert (head is None) == refused, raw


def test_the_depth_and_field_limits_are_the_decoders() -> None:
    def nested(depth: int) -> bytes:
        return b'{"a":' * depth + b"1" + b"}" * depth

    limits = Limits(max_depth=4)
    assert _check(nested(5), limits) is not None  # the top object and 4 levels below it
    assert peek(nested(6), limits) is None
    assert decode_message(nested(6), limits).enc is Encoding.STR
    few = Limits(max_fields=3)
    assert _check(b'{"a":1,"b":{"c":1}}', few) is not None
    assert peek(b'{"a":1,"b":{"c":1,"d":2}}', few) is None


def test_quirks_mark_where_the_json_mapping_is_not_the_identity() -> None:
    plain = peek_json(b'{"CMD":"x","a":[1],"b":{"c":1.5,"d":1.5e300}}')
    assert plain is not None and not plain.quirks and plain.fields == 6
    for raw in (
        b'{"a":[]}',
        b'{"a":{}}',
        b'{"":1}',
        b'{"a":1e400}',
        b'{"a":[1e999]}',
        b'{"a":1e5}',
    ):
        head = peek_json(raw)
        assert head is not None and head.quirks, raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(), st.sampled_from([Encoding.FRAM, Encoding.JSON]))
def test_generated_messages_read_as_decoded(payload: DataFrame, enc: Encoding) -> None:
    message = Message.request("g.h", "c", payload, reply_to="_INBOX.x", enc=enc)
    raw = encode_message(message)
    head = _check(raw)
    if enc is Encoding.FRAM:
        assert head is not None  # every binary frame the encoder writes is vouched for
    # the data a handler reads, from the header's payload span: the decoded message's
    # (as bytes: a NaN is never equal to itself)
    expected = decode_message(raw).payload.to_dict()
    assert encode(DataFrame(read_message(raw).payload_data())) == encode(DataFrame(expected))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(), st.sampled_from([Encoding.FRAM, Encoding.JSON]), st.randoms())
def test_damaged_messages_are_never_misread(
    payload: DataFrame, enc: Encoding, rnd: random.Random
) -> None:
    raw = bytearray(
        encode_message(Message.request("g", "c", payload, reply_to="_INBOX.x", enc=enc))
    )
    for _ in range(rnd.randint(1, 3)):
        where = rnd.randrange(len(raw))
        action = rnd.randrange(3)
        if action == 0:
            raw[where] ^= 1 << rnd.randrange(8)
        elif action == 1:
            del raw[where]
        else:
            raw.insert(where, rnd.randrange(256))
    _check(bytes(raw))


def test_read_header_and_read_message_give_the_decoders_answer() -> None:
    raw = _request(Encoding.JSON)
    head, message = read_header(raw)
    assert message is None and head.grp == "demo"
    odd = b'{"GRP":"g","GRP":"h","TYP":"EVT"}'
    head, message = read_header(odd)
    assert message is not None and head.grp == "g"  # decoded: the first GRP wins
    lazy = read_message(raw)
    assert lazy.wire == raw and lazy.typ == "RQS" and lazy.cmd == "echo"
    assert lazy.payload_data() == {"CMD": "echo", "x": 1, "y": [1, 2]}
    assert lazy.wire == raw  # still not decoded
    assert lazy == decode_message(raw)  # equality decodes: the same message


@pytest.fixture
def reference() -> Iterator[None]:
    header_module.use_accelerator(False)
    yield
    header_module.use_accelerator(True)


@pytest.mark.usefixtures("reference")
def test_without_the_accelerator_every_body_is_decoded() -> None:
    raw = _request(Encoding.JSON)
    assert peek(raw) is None
    head, message = read_header(raw)
    assert message is not None and head.grp == "demo" and head.pld_start == -1
    lazy = read_message(raw)
    assert lazy.wire is None and lazy.payload_data()["x"] == 1
    # The JSON lane still writes requests; their header is the decoder's.
    built = Message.json_request("demo", b'{"CMD":"echo","x":1}', reply_to="_INBOX.a")
    assert built is None  # it needs the accelerator to vouch for the text


def test_the_json_example_of_protocol_md_9_2_reads_as_decoded() -> None:
    body = json.dumps({"CMD": "echo", "x": 1}).encode()
    message = Message.json_request("demo", body, reply_to="_INBOX.ab")
    assert message is not None and message.wire is not None
    head = _check(message.wire)
    assert head is not None and head[:16] == message.header[:16]  # all but the total count
