"""The binary lanes (bus/message/message_binary.py, the C ``encode_texts``): the usual request and
the
usual answer to a binary request, written straight to bytes, must be the bytes the frame path
writes for them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus.frame.frame import DataFrame
from bus.message.message import Message, encode_message, read_message
from bus.message.message_binary import lanes_on
from tests.bus.message.test_jsonwire import payloads

pytestmark = pytest.mark.skipif(not lanes_on(), reason="the C accelerator is not in use")

# Latin-1 (what a STRING field carries): ASCII takes the lane, the rest the frame path.
texts = st.one_of(st.none(), st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=12))


def _binary_request(rpy: str | None = "_INBOX.r") -> Message:
    request = Message.request("g", "c", {"a": 1}, reply_to=rpy)
    return read_message(encode_message(request))


def _same_bytes(lane: Message, framed: Message) -> None:
    assert framed.wire is None  # a DataFrame payload: never the lane
    assert lane.mid is not None and framed.mid is not None
    raw = encode_message(lane).replace(lane.mid.encode(), framed.mid.encode())
    assert raw == encode_message(framed)
    head, again = lane.header, read_message(raw).header
    assert (head.typ, head.grp, head.rid, head.src, head.trc, head.enc_field) == (
        again.typ,
        again.grp,
        again.rid,
        again.src,
        again.trc,
        again.enc_field,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, texts, texts, st.sampled_from(["ACK", "NAK"]))
def test_an_answer_the_lane_writes_is_the_frame_paths_bytes(
    data: dict[str, Any], src: str | None, trace: str | None, typ: str
) -> None:
    request = _binary_request()
    if trace is not None:
        request.trc = trace  # the answer carries its request's trace
        request = read_message(encode_message(request))
    try:
        framed = request.reply(typ, DataFrame(data), src=src)
    except Exception:  # the frame path refuses it (a text beyond Latin-1...): so must the lane
        with pytest.raises(Exception):  # noqa: B017
            encode_message(request.reply(typ, data, src=src))
        return
    lane = request.reply(typ, data, src=src)
    _same_bytes(lane, framed)


@pytest.mark.parametrize(
    "data",
    [{"n": 1, "text": "hello"}, {}, None, {"when": datetime(2024, 1, 1, tzinfo=UTC)}],
)
def test_the_usual_answer_takes_the_lane(data: dict[str, Any] | None) -> None:
    request = _binary_request()
    lane = request.ack(data, src="svc")
    if data is None or "when" not in data:
        assert lane.wire is not None  # written by the lane
    framed = request.ack(None if data is None else DataFrame(data), src="svc")
    if data is None:
        assert encode_message(lane).replace(lane.mid.encode(), framed.mid.encode()) == (  # type: ignore[union-attr]
            encode_message(framed)
        )
    else:
        _same_bytes(lane, framed)


def test_an_answer_with_msg_rcd_or_flags_or_no_rpy_is_still_right() -> None:
    named, anonymous = _binary_request(), _binary_request(None)
    for request, answer in (
        (named, named.nak("no", 409, src="svc")),
        (named, named.ack({"x": 1}, more=True)),
        (anonymous, anonymous.ack({"x": 1})),
    ):
        again = read_message(encode_message(answer))
        assert again.typ == answer.typ and again.rid == request.mid
        assert again.payload_data() == answer.payload_data()


# The header fields a router, a requester and a service read from a request still on the wire.
_HEAD: tuple[str, ...] = (
    "enc",
    "typ",
    "grp",
    "tgt",
    "rpy",
    "mid",
    "rid",
    "src",
    "cmd",
    "enc_field",
    "flg",
)
_HEAD += ("rcd", "xpy", "clr", "trc")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, texts, texts, texts, texts, st.text(max_size=6), st.text(max_size=6))
def test_a_request_the_lane_writes_is_the_frame_paths_bytes(
    data: dict[str, Any],
    reply_to: str | None,
    src: str | None,
    caller: str | None,
    trace: str | None,
    group: str,
    cmd: str,
) -> None:
    named: dict[str, Any] = {
        "reply_to": reply_to,
        "src": src,
        "caller": caller,
        "trace": trace,
        "mid": "m1",
    }
    try:  # a DataFrame's arguments: never the lane
        framed = encode_message(Message.request(group, cmd, DataFrame(data), **named))
    except Exception:  # the frame path refuses it (a text beyond Latin-1...): so must the lane
        with pytest.raises(Exception):  # noqa: B017
            encode_message(Message.request(group, cmd, data, **named))
        return
    lane = Message.request(group, cmd, data, **named)
    assert encode_message(lane) == framed
    if lane.wire is not None:  # written by the lane: its header is what a reader finds
        again = read_message(framed).header
        assert [getattr(lane.header, name) for name in _HEAD] == [
            getattr(again, name) for name in _HEAD
        ]


def test_the_usual_request_takes_the_lane_and_reads_as_sent() -> None:
    request = Message.request("bench", "echo", {"n": 1, "text": "hello"}, reply_to="_INBOX.r")
    assert request.wire is not None  # written by the lane
    assert (request.grp, request.cmd, request.rpy, request.typ) == (
        "bench",
        "echo",
        "_INBOX.r",
        "RQS",
    )
    assert request.payload_data() == {"CMD": "echo", "n": 1, "text": "hello"}
    assert Message.request("g", "c").payload_data() == {"CMD": "c"}


@pytest.mark.parametrize(
    ("args", "options"),
    [
        ({"CMD": "other", "x": 1}, {}),  # an argument named CMD: the command wins
        ({"x": 1}, {"xpy": 2_000_000_000}),
        ({"x": 1}, {"to_all": True}),
        ({"x": 1}, {"enc": "JSON"}),
        ({"x": "é"}, {"src": "bureau-é"}),
    ],
)
def test_a_request_beyond_the_lane_is_still_right(
    args: dict[str, Any], options: dict[str, Any]
) -> None:
    request = Message.request("g", "c", args, mid="m1", **options)
    again = read_message(encode_message(request))
    assert again.payload_data() == {"CMD": "c", **{k: v for k, v in args.items() if k != "CMD"}}
    assert (again.xpy, again.to_all, again.enc, again.src) == (
        options.get("xpy"),
        options.get("to_all", False),
        options.get("enc", "FRAM"),
        options.get("src"),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.none() | payloads, texts, texts, st.text(max_size=8))
def test_an_event_the_lane_writes_is_the_frame_paths_bytes(
    data: dict[str, Any] | None, reply_to: str | None, src: str | None, type_: str
) -> None:
    named: dict[str, Any] = {"reply_to": reply_to, "src": src}
    framed_payload = None if data is None else DataFrame(data)  # a DataFrame: never the lane
    try:
        framed = Message.event(type_, framed_payload, **named)
        framed_raw = encode_message(framed)
    except Exception:  # the frame path refuses it: so must the lane
        with pytest.raises(Exception):  # noqa: B017
            encode_message(Message.event(type_, data, **named))
        return
    lane = Message.event(type_, data, **named)
    assert lane.mid is not None and framed.mid is not None
    assert encode_message(lane).replace(lane.mid.encode(), framed.mid.encode()) == framed_raw
    if lane.wire is not None:  # written by the lane: its header is what a reader finds
        again = read_message(encode_message(lane)).header
        assert [getattr(lane.header, name) for name in _HEAD] == [
            getattr(again, name) for name in _HEAD
        ]


def test_a_confirmed_publishs_event_takes_the_lane() -> None:
    event = Message.event("bench.tick", {"n": 1}, reply_to="_INBOX.a.b", src="office")
    assert event.wire is not None
    assert (event.typ, event.grp, event.rpy, event.src) == (
        "EVT",
        "bench.tick",
        "_INBOX.a.b",
        "office",
    )
    assert event.payload_data() == {"n": 1}
