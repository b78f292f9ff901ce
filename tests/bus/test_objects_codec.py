"""Object System framing: bytes in both directions, limits, partial input, malformed input."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bus.errors import DecodeError, LimitError
from bus.objects.codec import (
    NEED_DATA,
    BusinessObject,
    ObjectDecoder,
    decode_metadata,
    decode_object,
    encode_object,
)
from tests.docexamples import examples

CASES = [
    (BusinessObject({"event": "ping", "id": "1"}), b'{"event":"ping","id":"1"}\x00'),
    (
        BusinessObject({"type": "text/plain"}, b"hello"),
        b'{"type":"text/plain","size":5}\x00hello',
    ),
    (BusinessObject({"text": "h\u00e4"}), '{"text":"h\u00e4"}\x00'.encode()),
    (BusinessObject({"type": "application/octet-stream"}, b"\x00\x01"), None),
]


def _decode_all(data: bytes, chunk: int | None = None) -> list[BusinessObject]:
    decoder = ObjectDecoder()
    found: list[BusinessObject] = []
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        decoder.receive_data(piece)
        while (obj := decoder.next_event()) is not NEED_DATA:
            assert isinstance(obj, BusinessObject)
            found.append(obj)
    assert decoder.buffered == 0
    return found


@pytest.mark.parametrize(("obj", "wire"), CASES)
def test_encode_then_decode_whole_and_byte_by_byte(obj: BusinessObject, wire: bytes | None) -> None:
    data = encode_object(obj)
    if wire is not None:
        assert data == wire
    expected = BusinessObject(
        {**obj.metadata, **({"size": len(obj.payload)} if obj.payload else {})}, obj.payload
    )
    assert _decode_all(data) == [expected]
    assert _decode_all(data, chunk=1) == [expected]
    assert decode_object(data) == expected


def test_stale_size_is_corrected_on_encode() -> None:
    assert encode_object(BusinessObject({"size": 99})) == b"{}\x00"
    assert encode_object(BusinessObject({"size": 1}, b"abc")) == b'{"size":3}\x00abc'


def test_several_objects_in_one_chunk_and_a_partial_tail_kept() -> None:
    one = encode_object(BusinessObject({"event": "a"}))
    two = encode_object(BusinessObject({"type": "text/plain"}, b"xyz"))
    decoder = ObjectDecoder()
    decoder.receive_data(one + two[:-1])
    first = decoder.next_event()
    assert isinstance(first, BusinessObject) and first.event == "a"
    assert decoder.next_event() is NEED_DATA
    assert decoder.buffered == len(two) - 1  # the partial object consumed nothing
    decoder.receive_data(two[-1:])
    second = decoder.next_event()
    assert isinstance(second, BusinessObject) and second.payload == b"xyz"


def test_payload_may_hold_nul_and_json_bytes() -> None:
    payload = b'\x00{"event":"x"}\x00'
    [obj] = _decode_all(encode_object(BusinessObject({"type": "x/y"}, payload)), chunk=3)
    assert obj.payload == payload


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json\x00", "not UTF-8 JSON"),
        (b"[1,2]\x00", "not a JSON object"),
        (b'{"a":"\xff"}\x00', "not UTF-8 JSON"),
        (b'{"size":-1}\x00', "non-negative"),
        (b'{"size":"5"}\x00', "non-negative"),
        (b'{"size":true}\x00', "non-negative"),
    ],
)
def test_malformed_objects_raise_decode_error(data: bytes, reason: str) -> None:
    decoder = ObjectDecoder()
    decoder.receive_data(data)
    with pytest.raises(DecodeError, match=reason):
        decoder.next_event()


def test_metadata_limit_raised_before_the_nul_arrives() -> None:
    decoder = ObjectDecoder(max_metadata=16)
    decoder.receive_data(b'{"a":"' + b"x" * 10)
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(b"x" * 10)
    with pytest.raises(LimitError) as info:
        decoder.next_event()
    assert info.value.limit == "max_metadata_size"


def test_payload_limit_raised_from_the_size_alone() -> None:
    decoder = ObjectDecoder(max_payload=10)
    decoder.receive_data(b'{"size":11}\x00')
    with pytest.raises(LimitError) as info:
        decoder.next_event()
    assert (info.value.limit, info.value.value, info.value.maximum) == ("max_payload_size", 11, 10)


def test_whole_message_decoding_refuses_truncation_and_trailing_bytes() -> None:
    data = encode_object(BusinessObject({"type": "t/t"}, b"abc"))
    with pytest.raises(DecodeError, match="truncated"):
        decode_object(data[:-1])
    with pytest.raises(DecodeError, match="after the payload"):
        decode_object(data + b"z")


def test_text_messages_are_metadata_only() -> None:
    assert decode_metadata('{"event":"ping"}') == BusinessObject({"event": "ping"})
    with pytest.raises(DecodeError, match="binary"):
        decode_metadata('{"size":3}')
    with pytest.raises(LimitError):
        decode_metadata('{"a":"' + "x" * 100 + '"}', max_metadata=50)
    with pytest.raises(DecodeError):
        decode_metadata("[]")


def test_with_metadata_copies_and_maps_underscores() -> None:
    obj = BusinessObject({"event": "x", "to": "a"})
    changed = obj.with_metadata(in_reply_to="7", to=None)
    assert changed.metadata == {"event": "x", "in-reply-to": "7"}
    assert obj.metadata == {"event": "x", "to": "a"}


def test_doc_examples_of_section_6() -> None:
    found = examples("objects")
    assert found, "docs/PROTOCOL.md section 6 has no codec examples"
    for example in found:
        if "object" not in example.body:
            continue
        obj_json = orjson.loads(example.body["object"])
        payload = example.body.get("payload", "").encode()
        obj = BusinessObject(obj_json, payload)
        assert encode_object(obj) == example.hex(), example.id
        assert decode_object(example.hex()).metadata == {
            **obj_json,
            **({"size": len(payload)} if payload else {}),
        }, example.id


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(
    metadata=st.dictionaries(st.text().filter(lambda k: k != "size"), json_values, max_size=5),
    payload=st.binary(max_size=64),
    chunk=st.integers(1, 50),
)
def test_round_trip_property(metadata: dict[str, object], payload: bytes, chunk: int) -> None:
    obj = BusinessObject(metadata, payload)
    [back] = _decode_all(encode_object(obj) * 1, chunk=chunk)
    assert back.payload == payload
    assert {k: v for k, v in back.metadata.items() if k != "size"} == metadata


@given(st.binary(max_size=200))
def test_fuzz_only_documented_errors(data: bytes) -> None:
    decoder = ObjectDecoder(max_metadata=100, max_payload=100)
    decoder.receive_data(data)
    try:
        while decoder.next_event() is not NEED_DATA:
            pass
    except (DecodeError, LimitError):
        pass


# -- next_events: the batch loop drivers use, against next_event (the reference) -------------


def _outcome(
    pieces: list[bytes], decoder: ObjectDecoder, batched: bool
) -> tuple[list[BusinessObject], list[int], str | None]:
    """The objects ``pieces`` give, read with next_events (batched) or next_event, the bytes
    buffered after each piece, and the error that ended it."""
    found: list[BusinessObject] = []
    buffered: list[int] = []
    try:
        for piece in pieces:
            decoder.receive_data(piece)
            if batched:
                while objects := decoder.next_events():
                    found += objects
            else:
                while (obj := decoder.next_event()) is not NEED_DATA:
                    assert isinstance(obj, BusinessObject)
                    found.append(obj)
            buffered.append(decoder.buffered)
    except (DecodeError, LimitError) as exc:
        return found, buffered, f"{type(exc).__name__}: {exc}"
    return found, buffered, None


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


_metadata_texts = st.builds(
    lambda metadata, spaced: (
        json.dumps(metadata, indent=1).encode() if spaced else orjson.dumps(metadata)
    ),  # spaced: not as orjson writes it
    st.dictionaries(st.sampled_from(["type", "event", "id", "to", "x"]), json_values, max_size=3),
    st.booleans(),
)
_bad_tails = st.sampled_from(
    [
        b"",
        b"not json\x00",
        b"[1]\x00",
        b'{"size":-1}\x00',
        b'{"size":"2"}\x00',
        b'{"size":999}\x00',  # above max_payload
        b'{"a":"' + b"x" * 300,  # no NUL within max_metadata
        b'{"a":"' + b"x" * 300 + b'"}\x00',
        b'{"size":null}\x00',
        b'{"size":3}\x00ab',  # incomplete: waits
    ]
)


@given(
    objects=st.lists(st.tuples(_metadata_texts, st.binary(max_size=40)), max_size=8),
    tail=_bad_tails,
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_next_events_gives_what_next_event_gives(
    objects: list[tuple[bytes, bytes]], tail: bytes, cuts: list[int]
) -> None:
    """Every object, every error (at the same place, with the same words) and the same bytes
    left buffered, however the stream is cut: malformed, oversized, non-canonical JSON."""
    stream = b""
    for meta, payload in objects:
        if payload:
            head = orjson.loads(meta)
            head["size"] = len(payload)
            meta = orjson.dumps(head)
        stream += meta + b"\x00" + payload
    stream += tail
    pieces = _split(stream, cuts)
    reference = _outcome(pieces, ObjectDecoder(max_metadata=200, max_payload=100), False)
    assert _outcome(pieces, ObjectDecoder(max_metadata=200, max_payload=100), True) == reference


def test_next_events_returns_the_objects_before_a_bad_one_then_raises() -> None:
    decoder = ObjectDecoder()
    decoder.receive_data(
        b'{"event":"a"}\x00{"type":"t/t","size":1}\x00xnot json\x00{"event":"b"}\x00'
    )
    assert [obj.event or obj.type for obj in decoder.next_events()] == ["a", "t/t"]
    with pytest.raises(DecodeError, match="not UTF-8 JSON"):
        decoder.next_events()
    with pytest.raises(DecodeError, match="not UTF-8 JSON"):  # nothing was consumed
        decoder.next_event()


def test_a_large_payload_in_many_reads_is_joined_once_it_is_complete() -> None:
    payload = bytes(range(256)) * 40
    data = encode_object(BusinessObject({"type": "x/y"}, payload)) + b'{"event":"next"}\x00'
    decoder = ObjectDecoder()
    found: list[BusinessObject] = []
    for i in range(0, len(data), 100):
        decoder.receive_data(data[i : i + 100])
        found += decoder.next_events()
        assert decoder.buffered == min(i + 100, len(data)) - sum(
            len(encode_object(obj)) for obj in found
        )
    assert [obj.payload for obj in found] == [payload, b""]
    assert found[1].event == "next"


def test_bytes_received_are_kept_as_they_were_when_the_caller_reuses_its_buffer() -> None:
    decoder = ObjectDecoder()
    chunk = bytearray(b'{"event":"a"}\x00{"eve')
    decoder.receive_data(chunk)
    chunk[:] = b"X" * len(chunk)  # a reader that reuses its buffer
    decoder.receive_data(memoryview(b'nt":"b"}\x00'))
    assert [obj.event for obj in decoder.next_events()] == ["a", "b"]
