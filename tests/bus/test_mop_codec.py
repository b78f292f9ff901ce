"""MOP frames and messages (``bus/mop/codec.py``, PROTOCOL.md 11.1): both ways, in any chunks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.errors import DecodeError, EncodeError
from bus.mop.codec import (
    ENVELOPE_KEY,
    NEED_DATA,
    SEED_ENVELOPE_KEY,
    FrameReceived,
    FrameSkipped,
    MopDeframer,
    MopMessage,
    decode_message,
    encode_frame,
)
from tests.docexamples import Example, examples

FRAMES = examples("mop-frame")


def _frame_bytes(example: Example) -> bytes:
    return example.hex() if "hex" in example.body else example.body["frame"].encode("utf-8")


def _events(deframer: MopDeframer) -> list[FrameReceived | FrameSkipped]:
    found: list[FrameReceived | FrameSkipped] = []
    while (event := deframer.next_event()) is not NEED_DATA:
        assert isinstance(event, FrameReceived | FrameSkipped)
        found.append(event)
    return found


def _frames(data: bytes, chunk: int | None = None, max_size: int = 1 << 20) -> list[bytes]:
    deframer = MopDeframer(max_size)
    got: list[FrameReceived | FrameSkipped] = []
    step = chunk or max(1, len(data))
    for at in range(0, len(data), step):
        deframer.receive_data(data[at : at + step])
        got += _events(deframer)
    return [event.data for event in got if isinstance(event, FrameReceived)]


def test_the_document_has_frame_examples() -> None:
    assert [e.id for e in FRAMES] == ["pong", "publish", "direct-mail", "utf8"]


@pytest.mark.parametrize("example", FRAMES, ids=lambda e: e.id)
def test_document_frames_decode_and_encode_exactly(example: Example) -> None:
    raw = _frame_bytes(example)
    [body] = _frames(raw)
    message = decode_message(body)
    assert encode_frame(message) == raw  # the envelope first, compact JSON, as documented
    if "text" in example.body:
        assert message.fields["text"] == example.body["text"]
    for chunk in (1, 2, 7):  # whole, byte by byte, in odd chunks: the same frame
        assert _frames(raw, chunk) == [body]


def test_the_length_counts_utf8_bytes() -> None:
    message = MopMessage("a.b", "AB.a", type="t.x", fields={"s": "€" * 100})
    raw = encode_frame(message)
    body = raw[raw.index(b"]") + 1 : -2]
    assert len(body) == len(encode_frame(message)) - raw.index(b"]") - 3
    assert decode_message(body).fields["s"] == "€" * 100


def test_both_envelope_keys_are_read_and_the_code_key_is_written() -> None:
    seed = json.dumps({SEED_ENVELOPE_KEY: {"from": "homeweb.io", "id": "1f.homeweb"}, "x": 1})
    message = decode_message(seed.encode())
    assert (message.sender, message.id, message.fields) == ("homeweb.io", "1f.homeweb", {"x": 1})
    assert ENVELOPE_KEY.encode() in encode_frame(message)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1,2]",
        b'{"x":1}',
        b'{"-={([env])}=-":{"id":"AB.a"}}',
        b'{"-={([env])}=-":{"from":"a.b"}}',
        b'{"-={([env])}=-":{"from":"a.b","id":"AB.a","expect":"yes"}}',
        b'{"-={([env])}=-":{"from":5,"id":"AB.a"}}',
    ],
)
def test_bad_messages_are_decode_errors(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_message(body)


def test_garbage_and_bad_frames_are_skipped_and_the_stream_resyncs() -> None:
    good = encode_frame(MopMessage("a.po", "AB.a", to="central.po", type="manage.pong"))
    stream = (
        b"noise "
        + b"[[[]"  # an opening without a length
        + b"[[[Bk]"
        + b"x" * 3  # a length of 100 whose ]] never comes where it should
        + good
        + b"[[[[["
        + good
    )
    deframer = MopDeframer()
    deframer.receive_data(stream)
    events = _events(deframer)
    bodies = [e.data for e in events if isinstance(e, FrameReceived)]
    assert bodies == [good[good.index(b"]") + 1 : -2]] * 2
    assert any(isinstance(e, FrameSkipped) for e in events)
    assert deframer.buffered == 0


def test_a_frame_longer_than_the_limit_is_skipped_whole_even_when_it_arrives_in_pieces() -> None:
    big = encode_frame(MopMessage("a.po", "AB.a", type="t.x", fields={"s": "y" * 500}))
    good = encode_frame(MopMessage("a.po", "AC.a", type="t.x"))
    for chunk in (None, 1, 64):
        bodies = _frames(big + good, chunk, max_size=200)
        assert [decode_message(b).id for b in bodies] == ["AC.a"], chunk


def test_a_partial_frame_consumes_nothing() -> None:
    raw = encode_frame(MopMessage("a.po", "AB.a", type="t.x"))
    deframer = MopDeframer()
    deframer.receive_data(raw[:-1])
    assert deframer.next_event() is NEED_DATA
    assert deframer.buffered == len(raw) - 1
    deframer.receive_data(raw[-1:])
    assert isinstance(deframer.next_event(), FrameReceived)


def test_a_message_too_long_for_four_length_characters_cannot_be_encoded() -> None:
    with pytest.raises(EncodeError):
        encode_frame(MopMessage("a.po", "AB.a", fields={"s": "x" * (1 << 24)}))


@given(st.binary(max_size=300), st.integers(1, 17))
@settings(max_examples=300, deadline=None)
def test_any_bytes_give_only_frames_and_skips(data: bytes, chunk: int) -> None:
    deframer = MopDeframer(100)
    for at in range(0, len(data), chunk):
        deframer.receive_data(data[at : at + chunk])
        for event in _events(deframer):
            if isinstance(event, FrameReceived):
                try:
                    decode_message(event.data)
                except DecodeError:
                    pass
    assert deframer.buffered <= 3 + 4 + 100 + 2  # never more than one pending frame


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda k: k not in (ENVELOPE_KEY, SEED_ENVELOPE_KEY)),
        json_value,
        max_size=4,
    ),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_messages_round_trip(fields: dict[str, object], expect: bool) -> None:
    message = MopMessage("p.box", "AB.p", to="q.box", type="t.x", expect=expect, fields=fields)
    [body] = _frames(encode_frame(message), chunk=3)
    assert decode_message(body) == message
