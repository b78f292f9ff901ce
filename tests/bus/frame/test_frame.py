"""The DataFrame type: mapping reads, explicit types, checks at entry, dict and repr."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from bus.errors import DecodeError, EncodeError
from bus.frame.codec import decode, encode
from bus.frame.enums import FieldType
from bus.frame.frame import (
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    Array,
    DataFrame,
    Field,
    Float32,
    Uri,
    Utf8,
    _find_name_reference,
    find_name,
    infer_type,
    read_utf8,
    typed,
)
from bus.frame.jsonmap import from_typed
from tests.docexamples import examples


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, FieldType.UDEF),
        (True, FieldType.BOOLEAN),
        (0, FieldType.U32),
        (2**32 - 1, FieldType.U32),
        (2**32, FieldType.S64),
        (-1, FieldType.S64),
        (-(2**63), FieldType.S64),
        (2**63, FieldType.U64),
        (2**64 - 1, FieldType.U64),
        (1.5, FieldType.DOUBLE),
        ("x", FieldType.STRING),
        (b"x", FieldType.BYTEARRAY),
        (bytearray(b"x"), FieldType.BYTEARRAY),
        (datetime(2024, 1, 1, tzinfo=UTC), FieldType.DATE),
        ({"a": 1}, FieldType.FRAME),
        ([1, 2], FieldType.FRAME),
        (DataFrame(), FieldType.FRAME),
    ],
)
def test_type_inference(value: object, expected: FieldType) -> None:
    assert infer_type(value) is expected
    assert DataFrame({"v": value}).fields[0].type is expected


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, object(), {1, 2}])
def test_values_without_a_type_are_refused(value: object) -> None:
    with pytest.raises(EncodeError):
        DataFrame({"v": value})


def test_reads_like_a_mapping_and_keeps_order_and_repeats() -> None:
    frame = DataFrame()
    frame.add("CMD", "echo")
    frame.add("n", 1)
    frame.add("n", 2)
    frame.add("", "anon")
    assert frame["CMD"] == "echo"
    assert frame["n"] == 1
    assert frame.get_all("n") == [1, 2]
    assert frame.get("missing", 7) == 7
    assert list(frame) == ["CMD", "n", "n", ""]
    assert len(frame) == 4
    assert "n" in frame and "zz" not in frame
    with pytest.raises(KeyError):
        frame["zz"]
    frame["n"] = 9
    assert frame.get_all("n") == [9, 2]
    frame["new"] = U8(3)
    assert frame.field("new") == Field("new", FieldType.U8, 3)
    del frame["n"]
    assert frame.names() == ["CMD", "", "new"]


def test_explicit_types() -> None:
    frame = DataFrame(
        {
            "a": S8(-1),
            "b": U8(255),
            "c": S16(-2),
            "d": U16(65535),
            "e": S32(-3),
            "f": U32(4),
            "g": S64(5),
            "h": U64(2**64 - 1),
            "i": Float32(0.1),
            "j": Uri("http://x/"),
            "k": typed(3, FieldType.S16),
        }
    )
    assert [f.type for f in frame.fields] == [
        FieldType.S8,
        FieldType.U8,
        FieldType.S16,
        FieldType.U16,
        FieldType.S32,
        FieldType.U32,
        FieldType.S64,
        FieldType.U64,
        FieldType.FLOAT,
        FieldType.URI,
        FieldType.S16,
    ]
    # FLOAT is rounded to float32 on entry, so what is read back equals what was put in.
    assert frame["i"] == pytest.approx(0.1, rel=1e-7) and frame["i"] != 0.1


@pytest.mark.parametrize(
    "value",
    [U8(256), U8(-1), S8(128), S16(2**15), U16(-1), S32(2**31), U32(2**32), S64(2**63), U64(-1)],
)
def test_out_of_range_is_refused_at_entry(value: object) -> None:
    with pytest.raises(EncodeError, match="out of range"):
        DataFrame({"v": value})


def test_text_outside_latin1_is_a_clear_error() -> None:
    assert DataFrame({"v": "café"})["v"] == "café"
    with pytest.raises(EncodeError, match=r"outside Latin-1.*U\+20AC"):
        DataFrame({"v": "5 €"})


def test_none_on_a_variable_type_is_refused() -> None:
    with pytest.raises(EncodeError, match="UDEF"):
        DataFrame({"v": typed(None, FieldType.STRING)})


def test_long_names_are_refused() -> None:
    DataFrame({"x" * 255: 1})
    with pytest.raises(EncodeError, match="255"):
        DataFrame({"x" * 256: 1})
    with pytest.raises(EncodeError, match="255"):
        DataFrame({"é" * 128: 1})  # 256 bytes in UTF-8


def test_dates_are_utc_milliseconds() -> None:
    local = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    frame = DataFrame({"d": local, "n": datetime(2024, 1, 1), "i": typed(1000, FieldType.DATE)})
    assert frame["d"] == datetime(2024, 5, 6, 5, 8, 9, 123000, tzinfo=UTC)
    assert frame["n"] == datetime(2024, 1, 1, tzinfo=UTC)
    assert frame["i"] == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_arrays_read_as_lists() -> None:
    frame = DataFrame({"a": Array([1, U8(2), "x", {"k": True}])})
    assert frame["a"] == [1, 2, "x", DataFrame({"k": True})]
    elements = frame.fields[0].value
    assert [e.type for e in elements] == [
        FieldType.U32,
        FieldType.U8,
        FieldType.STRING,
        FieldType.FRAME,
    ]
    assert all(e.name == "" for e in elements)


def test_dict_round_trip_and_lists_as_unnamed_frames() -> None:
    data = {"a": 1, "b": [1, "two", None], "c": {"d": [{"e": 1.5}]}, "f": {}}
    frame = DataFrame.from_dict(data)
    assert frame.to_dict() == data
    assert frame["b"].is_array
    assert DataFrame.from_list([1, 2]).to_dict() == [1, 2]


def test_to_dict_first_repeated_name_wins() -> None:
    frame = DataFrame()
    frame.add("n", 1)
    frame.add("n", 2)
    assert frame.to_dict() == {"n": 1}


def test_equality_includes_types_and_order() -> None:
    assert DataFrame({"a": 1, "b": 2}) == DataFrame({"a": 1, "b": 2})
    assert DataFrame({"a": 1, "b": 2}) != DataFrame({"b": 2, "a": 1})
    assert DataFrame({"a": 1}) != DataFrame({"a": U8(1)})
    assert DataFrame({"a": 1}) != {"a": 1}


def test_repr_is_readable_and_shows_explicit_types() -> None:
    frame = DataFrame({"CMD": "echo", "n": U8(5), "u": Uri("http://x"), "a": Array([1])})
    assert repr(frame) == (
        "DataFrame({'CMD': 'echo', 'n': U8(5), 'u': Uri('http://x'), 'a': Array([1])})"
    )
    assert repr(DataFrame()) == "DataFrame()"
    assert repr(DataFrame.from_list([1])) == "DataFrame.from_list([1])"
    assert eval(repr(frame)) == frame  # noqa: S307 - our own repr, in a test


def test_frames_from_fields_are_checked() -> None:
    frame = DataFrame([Field("a", FieldType.U8, 3)])
    assert frame["a"] == 3
    with pytest.raises(EncodeError):
        DataFrame([Field("a", FieldType.U8, 300)])


def test_find_name_agrees_with_its_reference() -> None:
    frame = DataFrame()
    for name in ["a", "", "b", "a", "é"]:
        frame.add(name, 1)
    fields = list(frame.fields)
    for key in ["a", "", "b", "é", "zz", 3]:
        assert find_name(fields, key) == _find_name_reference(fields, key)
    assert find_name(fields, "a") == 0 and find_name(fields, "zz") == -1


def test_utf8_values_for_modern_jvm_peers_follow_the_document() -> None:
    # PROTOCOL.md 1.3: the original writes values in the JVM's charset (UTF-8 from JDK 18).
    [example] = [e for e in examples("frame") if e.id == "utf8-value"]
    text = example.body["text"]
    frame = DataFrame({"s": Utf8(text)})
    assert encode(frame) == example.hex()
    assert read_utf8(decode(example.hex())["s"]) == text
    assert frame == from_typed(json.loads(example.body["fields"]))
    assert read_utf8(Utf8("€ and 𝄞").value) == "€ and 𝄞"
    with pytest.raises(DecodeError, match="UTF-8"):
        read_utf8("caf\xe9")  # a Latin-1 value, as the seed writes it
