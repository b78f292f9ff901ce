"""bus/message/jsonwire.py ack_frame: a service's usual ACK written straight to the wire is the
ACK ``Message.ack`` builds, in C (bus/native/_hotpath_answer.c) and in the reference alike."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus.frame.codec import DEFAULT_LIMITS
from bus.frame.frame import DataFrame
from bus.link.wire import DEFAULT_MAX_FRAME, MessageReceived, WireDecoder
from bus.message import header
from bus.message.jsonwire import _hotpath, ack_frame, ack_frame_reference
from bus.message.message import Message, decode_message, encode_message, read_message
from tests.bus.message.test_jsonwire import names, plain

MID = "5b0d3f7e-9c1a-4f2b-8d3e-0a1b2c3d4e5f"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
DEPTH, FIELDS, SIZE = DEFAULT_LIMITS.max_depth, DEFAULT_LIMITS.max_fields, 1024 * 1024

# the JSON values test_jsonwire generates (names of objects, nested lists and objects)
payloads = st.one_of(st.none(), st.dictionaries(names, plain, max_size=6))
texts = st.one_of(st.none(), st.sampled_from(["_INBOX.a1", "gw", 'q"uote', "back\\slash", "é"]))


def _json_request(trace: str | None = TRACE, reply_to: str | None = "_INBOX.r") -> Message:
    request = Message.request("g", "c", {"a": 1}, reply_to=reply_to, enc="JSON", trace=trace)
    return read_message(encode_message(request))


def _body(frames: bytes) -> bytes:
    """The message the frames carry, read as the peer's wire decoder reads it."""
    decoder = WireDecoder()
    decoder.receive_data(frames)
    event = decoder.next_event()
    assert isinstance(event, MessageReceived)
    return bytes(event.data)


def _without_mid(frame: DataFrame) -> DataFrame:
    frame = frame.copy()
    frame.remove("MID")
    return frame


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, texts, texts, st.sampled_from([None, TRACE]))
def test_the_frames_carry_the_ack_that_ack_builds(
    payload: dict[str, Any] | None, rpy: str | None, src: str | None, trace: str | None
) -> None:
    reference = ack_frame_reference(rpy, MID, MID, payload, src, trace, DEPTH, FIELDS, SIZE)
    if _hotpath is not None:  # C answers the same bytes, or leaves the answer to the reference
        fast = _hotpath.ack_frame(orjson.dumps, rpy, MID, MID, payload, src, trace, DEPTH,
                                  FIELDS, SIZE)  # fmt: skip
        assert fast is None or fast == reference
    if reference is None:
        return
    request = Message.request("g", "c", {"a": 1}, reply_to=rpy, enc="JSON", mid=MID, trace=trace)
    built = request.ack(payload, src=src)
    assert _without_mid(decode_message(_body(reference)).frame) == _without_mid(
        decode_message(encode_message(built)).frame
    )
    assert decode_message(_body(reference)).mid == MID


@pytest.mark.skipif(_hotpath is None, reason="the C lane is not built")
def test_the_c_lane_writes_the_usual_answer_itself() -> None:
    payload = {"x": 1, "items": [1, 2.5, "s", None, True], "nested": {"k": "v"}}
    args = ("_INBOX.a1", MID, MID, payload, "gw", TRACE, DEPTH, FIELDS, SIZE)
    fast = _hotpath.ack_frame(orjson.dumps, *args)
    assert fast is not None and fast == ack_frame_reference(*args)
    assert _hotpath.ack_frame(orjson.dumps, None, None, MID, None, None, None, DEPTH, FIELDS,
                              SIZE) == ack_frame_reference(
        None, None, MID, None, None, None, DEPTH, FIELDS, SIZE
    )  # fmt: skip


@pytest.mark.parametrize("lane", ["reference", "accelerated"])
def test_answers_beyond_the_usual_are_left_to_the_message(lane: str) -> None:
    if lane == "accelerated" and _hotpath is None:
        pytest.skip("the C lane is not built")

    def frames(payload: Any, max_fields: int = FIELDS, max_size: int = SIZE) -> bytes | None:
        args = ("_INBOX.a1", MID, MID, payload, "gw", TRACE, DEPTH, max_fields, max_size)
        if lane == "reference":
            return ack_frame_reference(*args)
        assert _hotpath is not None
        written: bytes | None = _hotpath.ack_frame(orjson.dumps, *args)
        return written

    assert frames({"x": 1}) is not None
    assert frames([1, 2]) is None  # not a dict: Message.ack wraps it as {"result": ...}
    assert frames({"x": b"bytes"}) is None  # not plain data: the frame path writes it
    assert frames({"x": {}}) is None  # an empty nested frame is written as [] (as Java)
    assert frames({"x": 1e20}) is None  # a float JSON would write with an exponent
    assert frames({"x": 1, "y": 2}, max_fields=9) is None  # 8 header fields and PLD, 2 in it
    assert frames({"x": 1, "y": 2}, max_fields=10) is not None
    big = {"blob": "x" * DEFAULT_MAX_FRAME}
    assert frames(big) is None  # beyond one frame
    assert frames({"x": "y" * 200}, max_size=150) is None  # beyond the link's max message size


@pytest.mark.skipif(not header.accelerated(), reason="pure Python decodes every message it reads")
def test_a_json_request_on_the_wire_gives_its_ack_as_frames() -> None:
    request = _json_request()
    frames = request.ack_frame({"x": 1}, "svc", SIZE)
    assert frames is not None
    sent = decode_message(_body(frames))
    built = decode_message(encode_message(request.ack({"x": 1}, src="svc")))
    assert _without_mid(sent.frame) == _without_mid(built.frame)
    assert (sent.grp, sent.rid, sent.trc, sent.enc.value) == (
        "_INBOX.r",
        request.mid,
        TRACE,
        "JSON",
    )
    assert sent.mid != request.mid


def test_requests_whose_ack_is_not_written_as_frames() -> None:
    binary = read_message(encode_message(Message.request("g", "c", {"a": 1}, reply_to="_INBOX.r")))
    assert binary.ack_frame({"x": 1}, "svc", SIZE) is None  # FRAM: the binary lane writes it
    assert _json_request(reply_to=None).ack_frame({"x": 1}, "svc", SIZE) is None  # no answer
    built = Message.request("g", "c", {"a": 1}, reply_to="_INBOX.r", enc="JSON")
    assert built.ack_frame({"x": 1}, "svc", SIZE) is None  # not on the wire
    assert _json_request().ack_frame({"x": b"raw"}, "svc", SIZE) is None  # not plain data


def test_the_lane_in_use_is_the_accelerators_when_built() -> None:
    if _hotpath is None:
        assert ack_frame is ack_frame_reference
    else:
        assert ack_frame.func is _hotpath.ack_frame  # type: ignore[attr-defined]
