"""The sans-I/O WebSocket frame reader (gateway/websocket/ws_reader.py) against RFC 6455 5."""

from __future__ import annotations

import struct

import pytest

from bus.errors import LimitError
from gateway.websocket.ws_reader import (
    Close,
    Event,
    FrameReader,
    Message,
    Ping,
    Pong,
    WebSocketError,
    close_frame,
    control_frame,
)

MASK = b"\x37\xfa\x21\x3d"


def frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True) -> bytes:
    """A client frame (RFC 6455 5.2), masked unless told."""
    first = (0x80 if fin else 0) | opcode
    size = len(payload)
    mask_bit = 0x80 if masked else 0
    if size < 126:
        head = bytes((first, mask_bit | size))
    elif size < 65536:
        head = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, size)
    if not masked:
        return head + payload
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


def feed_all(reader: FrameReader, data: bytes, how: str) -> list[Event]:
    if how == "whole":
        return reader.feed(data)
    events: list[Event] = []
    for i in range(len(data)):  # byte by byte: a partial frame consumes nothing
        events += reader.feed(data[i : i + 1])
    return events


# RFC 6455 5.7's examples (masked, as a client sends them), and every length encoding
CASES = [
    (frame(0x1, b"Hello"), [Message("Hello")]),
    (b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58", [Message("Hello")]),  # 5.7 verbatim
    (frame(0x2, b"\x00\xff" * 100), [Message(b"\x00\xff" * 100)]),  # 16-bit length
    (frame(0x2, b"x" * 70_000), [Message(b"x" * 70_000)]),  # 64-bit length
    (frame(0x2, b""), [Message(b"")]),
    (frame(0x1, "é€".encode()), [Message("é€")]),
    # a fragmented text message with a ping between its fragments (5.4: allowed)
    (
        frame(0x1, b"Hel", fin=False)
        + frame(0x9, b"p")
        + frame(0x0, b"l", fin=False)
        + frame(0x0, b"o"),
        [Ping(b"p"), Message("Hello")],
    ),  # fmt: skip
    (frame(0xA, b"1234"), [Pong(b"1234")]),
    (frame(0x8, b""), [Close(1005, "")]),
    (frame(0x8, struct.pack("!H", 1000) + b"bye"), [Close(1000, "bye")]),
    (frame(0x8, struct.pack("!H", 4000)), [Close(4000, "")]),
]


@pytest.mark.parametrize("how", ["whole", "byte by byte"])
@pytest.mark.parametrize(("data", "events"), CASES)
def test_frames_read(data: bytes, events: list[Event], how: str) -> None:
    assert feed_all(FrameReader(), data, how) == events


def test_a_partial_frame_waits_and_trailing_bytes_are_kept() -> None:
    reader = FrameReader()
    data = frame(0x1, b"one") + frame(0x1, b"two")
    assert reader.feed(data[:-2]) == [Message("one")]
    assert reader.feed(data[-2:]) == [Message("two")]


def test_nothing_is_read_after_a_close() -> None:
    reader = FrameReader()
    assert reader.feed(frame(0x8, b"") + frame(0x1, b"late")) == [Close(1005, "")]
    assert reader.feed(frame(0x1, b"later")) == []


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (frame(0x1, b"hi", masked=False), 1002),  # 5.1: a client masks every frame
        (bytes((0xC1, 0x80)) + MASK, 1002),  # RSV1 without permessage-deflate
        (frame(0x3, b""), 1002),  # reserved data opcode
        (frame(0xB, b""), 1002),  # reserved control opcode
        (frame(0x9, b"p", fin=False), 1002),  # 5.5: control frames are not fragmented
        (frame(0x9, b"p" * 126), 1002),  # 5.5: at most 125 bytes
        (frame(0x0, b"orphan"), 1002),  # a continuation with nothing begun
        (frame(0x1, b"a", fin=False) + frame(0x1, b"b"), 1002),  # 5.4: interleaved messages
        (frame(0x1, b"\xff\xfe"), 1007),  # 8.1: text is UTF-8
        (frame(0x1, b"\xc3", fin=False) + frame(0x0, b"("), 1007),  # invalid once joined
        (frame(0x8, b"\x03"), 1002),  # a close payload of one byte
        (frame(0x8, struct.pack("!H", 1005)), 1002),  # a code that never goes on the wire
        (frame(0x8, struct.pack("!H", 999)), 1002),
        (frame(0x8, struct.pack("!H", 1000) + b"\xff"), 1007),  # the reason is UTF-8
    ],
)
def test_protocol_errors_name_their_close_code(data: bytes, code: int) -> None:
    with pytest.raises(WebSocketError) as info:
        FrameReader().feed(data)
    assert info.value.code == code


def test_an_oversized_message_is_refused_from_its_header() -> None:
    reader = FrameReader(max_size=1000)
    head = frame(0x2, b"x" * 1001)[:8]  # header and mask only: the payload never comes
    with pytest.raises(LimitError) as info:
        reader.feed(head)
    assert (info.value.value, info.value.maximum) == (1001, 1000)


def test_an_oversized_fragmented_message_is_refused() -> None:
    reader = FrameReader(max_size=1000)
    assert reader.feed(frame(0x2, b"x" * 600, fin=False)) == []
    with pytest.raises(LimitError):
        reader.feed(frame(0x0, b"x" * 401)[:8])
    assert FrameReader(max_size=1000).feed(frame(0x2, b"x" * 1000)) == [Message(b"x" * 1000)]


def test_server_control_frames() -> None:
    assert control_frame(0xA, b"ab") == b"\x8a\x02ab"
    assert close_frame(1000) == b"\x88\x02\x03\xe8"
    assert close_frame(1005) == b"\x88\x00"
    long = close_frame(1008, "é" * 100)  # cut to 125 bytes, whole characters only
    assert len(long) - 2 <= 125
    long[4:].decode("utf-8")


@pytest.mark.parametrize(
    "data",
    [frame(0xA, b"\x00\x00\x00\x07"), frame(0xA, b""), frame(0xA, b"p" * 125)],
    ids=["4 bytes", "empty", "125 bytes"],
)
def test_a_lone_pong_is_taken_whole_without_an_event(data: bytes) -> None:
    reader = FrameReader()
    assert reader.lone_pong(data)
    assert reader.feed(frame(0x1, b"next")) == [Message("next")]  # it left nothing behind


@pytest.mark.parametrize(
    ("data", "events"),
    [
        (frame(0xA, b"abcd") + frame(0x1, b"hi"), [Pong(b"abcd"), Message("hi")]),
        (frame(0xA, b"abcd")[:-1], []),  # a part: it waits for the rest
        (frame(0x9, b"abcd"), [Ping(b"abcd")]),
        (frame(0x1, b"abcd"), [Message("abcd")]),
    ],
    ids=["with more", "a part", "a ping", "a message"],
)
def test_anything_but_one_whole_pong_goes_to_feed(data: bytes, events: list[Event]) -> None:
    reader = FrameReader()
    assert not reader.lone_pong(data)
    assert reader.feed(data) == events


@pytest.mark.parametrize(
    "data",
    [
        frame(0xA, b"abcd", masked=False),
        frame(0xA, b"p" * 126),
        b"\x8a\xfe\x03\xe8" + MASK + b"p" * 124,  # a 16-bit length (1000), 6 + 126 bytes
    ],
    ids=["unmasked", "126 bytes", "extended length"],
)
def test_a_malformed_pong_is_left_to_feed_which_refuses_it(data: bytes) -> None:
    reader = FrameReader()
    assert not reader.lone_pong(data)
    with pytest.raises(WebSocketError) as caught:
        reader.feed(data)
    assert caught.value.code == 1002


def test_a_pong_after_a_waiting_part_is_not_taken_alone() -> None:
    reader = FrameReader()
    message = frame(0x1, b"split")
    assert reader.feed(message[:3]) == []
    pong = frame(0xA, b"abcd")
    assert not reader.lone_pong(pong)  # it would be read as the rest of the message
    assert reader.feed(message[3:] + pong) == [Message("split"), Pong(b"abcd")]


def test_nothing_is_taken_after_a_close() -> None:
    reader = FrameReader()
    assert reader.feed(frame(0x8, struct.pack("!H", 1000))) == [Close(1000, "")]
    assert not reader.lone_pong(frame(0xA, b"abcd"))
