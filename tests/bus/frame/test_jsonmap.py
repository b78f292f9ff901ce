"""JSON both ways: Kestrel's mapping (to_json/from_json) and the lossless typed form."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bus.errors import DecodeError, EncodeError
from bus.frame.codec import Limits
from bus.frame.enums import FieldType
from bus.frame.frame import U8, U64, Array, DataFrame, Field, Float32, Uri, typed
from bus.frame.jsonmap import from_json, from_typed, to_json, to_typed
from tests.docexamples import Example, examples


@pytest.mark.parametrize(
    "example", [e for e in examples("frame") if "json" in e.body], ids=lambda e: e.id
)
def test_document_frame_example_json(example: Example) -> None:
    frame = from_typed(json.loads(example.body["fields"]))
    assert to_json(frame) == example.body["json"]


@pytest.mark.parametrize("example", examples("frame-json"), ids=lambda e: e.id)
def test_document_json_inference_example(example: Example) -> None:
    frame = from_json(example.body["json"])
    assert to_typed(frame) == json.loads(example.body["fields"])
    assert from_json(to_json(frame)) == frame


# JSON numbers as Java reads them (PROTOCOL.md 1.7) ---------------------------------------------


def _java_reads(number: str) -> tuple[str, object]:
    """What sdcote/dataframe's JsonFrameParser.readNumber makes of a JSON number: with a
    fraction, Double.parseDouble; without one, Long.parseLong, else the text as a STRING."""
    if "." in number:
        return "DOUBLE", float(number)
    try:
        value = int(number)
    except ValueError:
        return "STRING", number
    return ("S64", value) if -(2**63) <= value < 2**63 else ("STRING", number)


# Observed with Java 17 on the original classes: JSONMarshaler.marshal(text), each field's type.
JAVA_READ = [
    ("1e5", "STRING"),
    ("1E-5", "STRING"),
    ("1e+300", "STRING"),
    ("9223372036854775808", "STRING"),
    ("18446744073709551615", "STRING"),
    ("-9223372036854775808", "S64"),
    ("1.0e+300", "DOUBLE"),
    ("5.0e-324", "DOUBLE"),
    ("1.5e-07", "DOUBLE"),
    ("-0.0", "DOUBLE"),
]


@pytest.mark.parametrize(("number", "kind"), JAVA_READ)
def test_the_model_of_javas_reader_is_what_java_did(number: str, kind: str) -> None:
    assert _java_reads(number)[0] == kind


@given(st.floats(allow_nan=False, allow_infinity=False))
@example(1e300)
@example(1e-20)
@example(5e-324)
@example(1e16)
@example(-1e22)
def test_every_double_is_written_so_java_reads_the_same_double(value: float) -> None:
    text = to_json(DataFrame({"x": value}))
    number = text[len('{"x":') : -1]
    assert _java_reads(number) == ("DOUBLE", value)
    assert from_json(text)["x"] == value  # and we read it back


def test_numbers_java_reads_as_strings_are_read_as_numbers_here() -> None:
    """Java's parser reads an exponent without a fraction, and an integer beyond a Long, as a
    STRING (its own TODO); we read the number they mean, and never write the former."""
    frame = from_json('{"a":1e5,"b":1E-5,"c":9223372036854775808}')
    assert frame["a"] == 100000.0 and frame["b"] == 1e-5
    assert frame.field("c").type is FieldType.U64  # type: ignore[union-attr]
    assert to_json(frame) == '{"a":100000.0,"b":1.0e-05,"c":9223372036854775808}'


def test_kestrel_mapping_of_every_type() -> None:
    frame = DataFrame(
        {
            "i": U8(7),
            "big": U64(2**64 - 1),
            "f": Float32(0.5),
            "d": 2.5,
            "inf": math.inf,
            "b": False,
            "n": None,
            "s": 'x"y\\',
            "u": Uri("http://h/"),
            "t": datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
            "bytes": b"\x00\x01",
            "a": Array([1, "z", {"k": 1}]),
            "empty": {},
        }
    )
    assert to_json(frame) == (
        '{"i":7,"big":18446744073709551615,"f":0.5,"d":2.5,"inf":null,"b":false,"n":null,'
        '"s":"x\\"y\\\\","u":"http://h/","t":"2024-01-02T03:04:05.006Z","bytes":"AAE=",'
        '"a":[1,"z",{"k":1}],"empty":[]}'
    )
    # A nested empty frame is [] as Java writes it; read back it is an empty FRAME again.
    assert from_json(to_json(frame))["empty"] == DataFrame()


def test_json_text_is_always_latin1() -> None:
    frame = DataFrame({"caf\u00e9 \u20ac \U0001f600": "caf\u00e9"})
    text = to_json(frame)
    assert text == '{"caf\u00e9 \\u20ac \\ud83d\\ude00":"caf\u00e9"}'
    text.encode("latin-1")
    assert from_json(text) == frame


def test_from_json_reads_bytes_as_latin1() -> None:
    assert from_json(b'{"s":"caf\xe9"}')["s"] == "caf\u00e9"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "not JSON"),
        ("42", "not an object or an array"),
        ('{"s":"\\u20ac"}', "Latin-1"),
        ('{"n":18446744073709551616}', "64 bits"),
        ('{"n":NaN}', "not JSON"),
        ("[" * 40 + "]" * 40, "max_depth"),
    ],
)
def test_from_json_errors(text: str, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        from_json(text)


def test_from_json_limits() -> None:
    with pytest.raises(DecodeError, match="max_size"):
        from_json('{"a":1}', Limits(max_size=3))
    with pytest.raises(DecodeError, match="max_fields"):
        from_json("[1,2,3]", Limits(max_fields=2))
    assert from_json("[[[1]]]", Limits(max_depth=2)) == DataFrame.from_list([[[1]]])


def test_typed_form_is_lossless() -> None:
    frame = DataFrame(
        {
            "nan": math.nan,
            "ninf": -math.inf,
            "f": Float32(math.inf),
            "bytes": b"\xff",
            "t": datetime(2024, 1, 2, tzinfo=UTC),
            "a": Array([U8(1), Array([None])]),
        }
    )
    data = json.loads(json.dumps(to_typed(frame)))
    back = from_typed(data)
    assert to_typed(back) == data
    assert [f.type for f in back.fields] == [f.type for f in frame.fields]
    assert math.isnan(back["nan"]) and back["ninf"] == -math.inf


def test_typed_form_infers_missing_types() -> None:
    assert from_typed([{"name": "n", "value": 3}]).fields[0].type is FieldType.U32


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"name": "x"}, "expected a list"),
        ([1], "field must be an object"),
        ([{"name": 1, "value": 1}], "name must be a string"),
        ([{"name": "x", "type": "U9", "value": 1}], "unknown type"),
        ([{"name": "x", "type": "U8", "value": 256}], "out of range"),
        ([{"name": "x", "type": "BYTEARRAY", "value": "zz"}], "not hex"),
        ([{"name": "x", "type": "DATE", "value": "yesterday"}], "ISO-8601"),
        ([{"name": "x", "type": "DOUBLE", "value": "lots"}], "not a number"),
        ([{"name": "x", "type": "ARRAY", "value": 3}], "must be a list"),
        ([{"name": "x", "type": "ARRAY", "value": [3]}], "element must be an object"),
    ],
)
def test_typed_form_errors(data: object, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        from_typed(data)


def test_typed_form_nested_too_deeply_is_a_clear_error() -> None:
    data: list[Any] = []
    innermost = data
    for _ in range(5000):
        child: list[Any] = []
        innermost.append({"name": "a", "type": "FRAME", "value": child})
        innermost = child
    with pytest.raises(DecodeError, match="nested too deeply"):
        from_typed(data)
    frame = DataFrame()
    for _ in range(5000):
        frame = DataFrame([Field("", FieldType.FRAME, frame)])
    with pytest.raises(EncodeError, match="nested too deeply"):
        to_typed(frame)
    with pytest.raises(EncodeError, match="nested too deeply"):
        to_json(frame)


def test_dates_outside_python_range_are_kept_as_milliseconds() -> None:
    far = DataFrame({"old": typed(-(2**63), FieldType.DATE), "new": typed(2**62, FieldType.DATE)})
    assert far["old"] == -(2**63) and far["new"] == 2**62
    assert to_json(far) == f'{{"old":{-(2**63)},"new":{2**62}}}'
    typed_json = to_typed(far)
    assert typed_json[0] == {"name": "old", "type": "DATE", "value": -(2**63)}
    assert from_typed(typed_json) == far
