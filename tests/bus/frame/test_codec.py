"""Binary encoding of data frames: byte layout, round trips, errors with offsets, limits."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from bus.errors import DecodeError, EncodeError
from bus.frame import codec
from bus.frame.codec import MAX_DEPTH, Limits, decode, encode
from bus.frame.enums import FieldType
from bus.frame.frame import PURE_PYTHON_ENV, U8, Array, DataFrame, Field, Float32, Uri, typed
from bus.frame.jsonmap import from_typed, to_typed
from tests.docexamples import Example, examples

# Every test here runs against the pure-Python codec and, when it was built, the C accelerator.
IMPLEMENTATIONS = ["python"] + (["c"] if codec.accelerator_available() else [])


@pytest.fixture(autouse=True, scope="module", params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    codec.use_accelerator(request.param == "c")
    yield str(request.param)
    codec.use_accelerator(True)


def test_layout_of_a_fixed_and_a_variable_field() -> None:
    frame = DataFrame({"n": U8(5), "s": "hi"})
    assert encode(frame) == bytes.fromhex("016e05050173030000000268 69")


def test_unnamed_null_and_empty() -> None:
    frame = DataFrame()
    frame.add("", None)
    assert encode(frame) == b"\x00\x01"
    assert encode(DataFrame()) == b""
    assert decode(b"") == DataFrame()


def test_round_trip_of_every_type() -> None:
    frame = DataFrame(
        {
            "frame": {"a": 1},
            "udef": None,
            "bytes": b"\x00\xff",
            "str": "caf\xe9",
            "float": Float32(1.5),
            "double": -2.25,
            "bool": False,
            "date": datetime(2024, 2, 29, 12, 0, 0, 5000, tzinfo=UTC),
            "uri": Uri("http://x/y"),
            "array": Array([1, "s", None, b"b", [2], Array([3])]),
        }
    )
    raw = encode(frame)
    assert decode(raw) == frame
    assert encode(decode(raw)) == raw


def test_array_elements_use_u16_lengths() -> None:
    frame = DataFrame({"a": Array([U8(1), "hi"])})
    assert encode(frame) == bytes.fromhex("0161 11 00000007 0501 0300026869")


def test_unknown_type_code() -> None:
    with pytest.raises(DecodeError) as info:
        decode(b"\x01a\x12")
    assert info.value.offset == 2 and "unknown field type 18" in info.value.reason


def test_every_truncated_prefix_raises_decode_error() -> None:
    # A frame has no count: a prefix ending exactly between top-level fields is a valid,
    # shorter frame. Every other prefix raises DecodeError.
    frame = DataFrame({"CMD": "echo", "n": U8(1), "p": {"x": Array([1, "y"])}})
    raw = encode(frame)
    boundaries = {}
    end = 0
    for index, item in enumerate(frame.fields):
        end += len(encode(DataFrame([item])))
        boundaries[end] = index + 1
    for cut in range(1, len(raw)):
        if cut in boundaries:
            assert decode(raw[:cut]) == DataFrame(frame.fields[: boundaries[cut]])
            continue
        with pytest.raises(DecodeError):
            decode(raw[:cut])


def test_limits() -> None:
    raw = encode(DataFrame({"a": {"b": {"c": 1}}, "d": 2}))
    with pytest.raises(DecodeError, match="max_size") as info:
        decode(raw, Limits(max_size=len(raw) - 1))
    assert info.value.offset == 0
    with pytest.raises(DecodeError, match="max_depth"):
        decode(raw, Limits(max_depth=1))
    decode(raw, Limits(max_depth=2))
    with pytest.raises(DecodeError, match="max_fields"):
        decode(raw, Limits(max_fields=3))
    decode(raw, Limits(max_fields=4))


def test_huge_declared_length_allocates_nothing() -> None:
    with pytest.raises(DecodeError, match="truncated") as info:
        decode(b"\x01s\x03\xff\xff\xff\xff" + b"x" * 10)
    assert info.value.offset == 7


def test_encode_errors() -> None:
    with pytest.raises(EncodeError):
        encode(DataFrame._trusted([Field("a", FieldType.U8, 999)]))
    with pytest.raises(EncodeError, match="Latin-1"):
        encode(DataFrame._trusted([Field("a", FieldType.STRING, "\u20ac")]))


# PROTOCOL.md section 1 examples, both directions ---------------------------------------------

FRAME_EXAMPLES = examples("frame")
ERROR_EXAMPLES = examples("frame-error")


def test_the_document_has_an_example_of_every_type() -> None:
    seen: set[str] = set()

    def walk(fields: list[dict[str, object]]) -> None:
        for spec in fields:
            seen.add(str(spec["type"]))
            if spec["type"] == "FRAME":
                walk(spec["value"])  # type: ignore[arg-type]

    for example in FRAME_EXAMPLES:
        walk(json.loads(example.body["fields"]))
    assert seen == {t.name for t in FieldType}


@pytest.mark.parametrize("example", FRAME_EXAMPLES, ids=lambda e: e.id)
def test_document_example_encodes_and_decodes(example: Example) -> None:
    frame = from_typed(json.loads(example.body["fields"]))
    raw = example.hex()
    assert encode(frame) == raw
    assert decode(raw) == frame
    assert to_typed(decode(raw)) == json.loads(example.body["fields"])


@pytest.mark.parametrize("example", FRAME_EXAMPLES, ids=lambda e: e.id)
def test_document_example_with_trailing_byte_fails(example: Example) -> None:
    with pytest.raises(DecodeError):
        decode(example.hex() + b"\x05")


@pytest.mark.parametrize("example", ERROR_EXAMPLES, ids=lambda e: e.id)
def test_document_error_example(example: Example) -> None:
    with pytest.raises(DecodeError) as info:
        decode(example.hex())
    assert info.value.offset == int(example.body["offset"])
    assert example.body["reason"] in info.value.reason


def _nested_bytes(depth: int) -> bytes:
    raw = b""
    for _ in range(depth):
        raw = b"\x00\x00" + len(raw).to_bytes(4, "big") + raw
    return raw


def test_deep_nesting_is_a_decode_error_not_a_crash() -> None:
    with pytest.raises(DecodeError, match="max_depth"):
        decode(_nested_bytes(5000))
    with pytest.raises(DecodeError, match="max_depth"):
        decode(_nested_bytes(5000), Limits(max_depth=100_000))  # capped at MAX_DEPTH
    assert len(decode(_nested_bytes(MAX_DEPTH), Limits(max_depth=100_000))) == 1
    assert len(decode(_nested_bytes(32))) == 1  # 32 frames below the top one
    with pytest.raises(DecodeError, match="max_depth"):
        decode(_nested_bytes(33))


def test_deep_python_structure_is_an_encode_error() -> None:
    frame = DataFrame()
    for _ in range(5000):
        frame = DataFrame([Field("", FieldType.FRAME, frame)])
    with pytest.raises(EncodeError, match="deep"):
        encode(frame)


def test_boolean_reads_as_javas_signed_byte() -> None:
    # The original reads a BOOLEAN as `buf[offset] > 0` on a signed Java byte.
    read = {b: decode(b"\x01b\x0e" + bytes([b]))["b"] for b in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF)}
    assert read == {0x00: False, 0x01: True, 0x02: True, 0x7F: True, 0x80: False, 0xFF: False}
    assert decode(b"\x01a\x11\x00\x00\x00\x04\x0e\xff\x0e\x02")["a"] == [False, True]
    assert encode(DataFrame({"t": True, "f": False})) == b"\x01t\x0e\x01\x01f\x0e\x00"


def test_odd_limits_behave_like_their_documented_meaning() -> None:
    three_deep = _nested_bytes(3)
    with pytest.raises(DecodeError, match="max_depth"):
        decode(three_deep, Limits(max_depth=-(2**32) + 5))  # negative: no nesting at all
    assert decode(three_deep, Limits(max_fields=2**70)) == decode(three_deep)
    with pytest.raises(DecodeError, match="max_fields"):
        decode(three_deep, Limits(max_fields=-1))
    with pytest.raises(DecodeError, match="max_size"):
        decode(three_deep, Limits(max_size=-1))


def test_deep_but_allowed_nesting_round_trips() -> None:
    # Beyond 48 levels the accelerator hands over to the reference: same bytes, same frames.
    for depth in (47, 48, 49, 300):
        raw = _nested_bytes(depth)
        frame = decode(raw, Limits(max_depth=depth))
        assert encode(frame) == raw
    with pytest.raises(DecodeError, match="max_depth"):
        decode(_nested_bytes(301), Limits(max_depth=300))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler to build the accelerator")
@pytest.mark.skipif(
    bool(os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")), reason="pure Python asked"
)
def test_the_accelerator_was_built_by_the_install() -> None:
    assert codec.accelerator_available(), "run `make install` to build bus.native._speedups"


def test_a_date_outside_years_1_to_9999_is_read_as_milliseconds(implementation: str) -> None:
    # Java reads any 64-bit DATE; a frame holding one must not be refused (issue 14).
    inside = datetime(2024, 1, 2, tzinfo=UTC)
    for millis in (2**63 - 1, -(2**63), 253402300800000, -62135596800001):
        raw = (
            b"\x01d\x0f"
            + millis.to_bytes(8, "big", signed=True)
            + b"\x03PLD\x00\x00\x00\x00\x0b\x01t\x0f"
            + (1704153600000).to_bytes(8, "big")
        )
        frame = decode(raw)
        assert frame["d"] == millis, implementation
        assert frame["PLD"]["t"] == inside
        assert [f.type for f in frame.fields] == [FieldType.DATE, FieldType.FRAME]
        assert encode(frame) == raw
    in_array = DataFrame({"a": Array([typed(2**62, FieldType.DATE)])})
    assert decode(encode(in_array))["a"] == [2**62]


def test_a_date_beyond_64_bits_is_refused_on_entry() -> None:
    with pytest.raises(EncodeError, match="64-bit"):
        DataFrame({"d": typed(2**63, FieldType.DATE)})
