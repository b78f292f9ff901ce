"""Command schemas (bus/discovery/schemas.py): types to JSON Schema, argument checks, the heartbeat
text."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

import pytest

from bus.discovery.schemas import (
    MAX_SCHEMAS_TEXT,
    CommandSchema,
    check_args,
    command_schema,
    decode_schemas,
    encode_schemas,
    schema_of,
)
from bus.discovery.services import Heartbeat, heartbeat_payload, parse_heartbeat
from bus.errors import ConfigError, DecodeError, SchemaError
from tests.docexamples import examples


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Line(TypedDict):
    sku: str
    qty: int


class Order(TypedDict):
    """An order."""

    lines: list[Line]
    colour: Colour
    rush: NotRequired[bool]
    tags: dict[str, str]
    mode: Literal["fast", "cheap"]
    note: str | None


@dataclass
class Priced:
    total: float
    currency: str = "EUR"
    parts: list[int] = field(default_factory=list)


def test_a_typeddict_becomes_an_object_schema_with_its_required_members() -> None:
    schema = schema_of(Order)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["colour", "lines", "mode", "note", "tags"]  # not rush
    props = schema["properties"]
    assert props["lines"]["items"]["required"] == ["qty", "sku"]
    assert props["colour"] == {"enum": ["red", "blue"]}
    assert props["tags"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["mode"] == {"enum": ["fast", "cheap"]}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert schema["description"] == "An order."


def test_a_dataclass_requires_only_its_members_without_defaults() -> None:
    schema = schema_of(Priced)
    assert schema["required"] == ["total"]
    assert schema["properties"]["parts"] == {"type": "array", "items": {"type": "integer"}}
    assert "description" not in schema  # the generated "Priced(total: ...)" is not a text


@pytest.mark.parametrize("tp", [set[int], bytes, object, dict[int, str]])
def test_a_type_without_a_json_form_is_refused_when_declared(tp: Any) -> None:
    with pytest.raises(ConfigError):
        schema_of(tp)


def test_a_bad_schema_or_arguments_that_are_not_an_object_are_refused() -> None:
    with pytest.raises(ConfigError, match="not valid JSON Schema"):
        command_schema(args={"type": "nope"})
    with pytest.raises(ConfigError, match="arguments are an object"):
        command_schema(args={"type": "array"})
    assert command_schema(answer=Priced, summary="Price it.\nMore.").summary == "Price it."


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (
            {
                "lines": [{"sku": "a", "qty": "1"}],
                "colour": "red",
                "tags": {},
                "mode": "fast",
                "note": None,
            },
            "lines/0/qty",
        ),  # fmt: skip
        ({"lines": [], "colour": "green", "tags": {}, "mode": "fast", "note": None}, "colour"),
        ({"lines": [], "colour": "red", "tags": {}, "mode": "fast"}, "note"),
        ({"lines": [], "colour": "red", "tags": {}, "mode": "fast", "note": None, "x": 1}, ""),
    ],
)
def test_the_first_wrong_member_is_named(args: dict[str, Any], field: str) -> None:
    with pytest.raises(SchemaError) as wrong:
        check_args(schema_of(Order), args)
    assert wrong.value.field == field
    assert wrong.value.status_hint == 400


def test_matching_arguments_pass() -> None:
    args = {"lines": [{"sku": "a", "qty": 1}], "colour": "red", "tags": {"a": "b"},
            "mode": "cheap", "note": "x", "rush": True}  # fmt: skip
    check_args(schema_of(Order), args)


def test_the_documented_nak_text() -> None:
    (example,) = examples("schemas")
    schema = command_schema(args={"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}})  # fmt: skip
    assert schema.args is not None
    with pytest.raises(SchemaError) as wrong:
        check_args(schema.args, json.loads(example.body["args"]))
    assert str(wrong.value) == example.body["msg"]


def test_schemas_travel_in_the_heartbeat_and_come_back_equal() -> None:
    schemas = {"quote": command_schema(Line, Priced, "Price it.")}
    beat = Heartbeat("i-1", "shop", commands=("quote",), schemas=schemas)
    payload = heartbeat_payload(beat)
    assert isinstance(payload["Schemas"], str)
    assert parse_heartbeat(payload).schemas == schemas
    # A JSON service may send the object itself.
    as_object = {**payload, "Schemas": json.loads(payload["Schemas"])}
    assert parse_heartbeat(as_object).schemas == schemas


def test_a_heartbeat_with_unreadable_schemas_still_lists_the_instance() -> None:
    payload = heartbeat_payload(Heartbeat("i-1", "shop", commands=("quote",)))
    for bad in ("{not json", '["quote"]', '{"quote": 3}'):
        hb = parse_heartbeat({**payload, "Schemas": bad})
        assert hb.group == "shop" and hb.schemas == {}
    # A schema that is not valid JSON Schema leaves its command unchecked, the others kept.
    mixed = '{"a": {"args": {"type": "nope"}}, "b": {"args": {"type": "object"}}}'
    hb = parse_heartbeat({**payload, "Schemas": mixed})
    assert hb.schemas["a"].args is None and hb.schemas["b"].args == {"type": "object"}


def test_schemas_beyond_the_heartbeat_budget_are_refused_at_both_ends() -> None:
    big = {f"c{i}": CommandSchema(args={"type": "object", "description": "x" * 1000})
           for i in range(80)}  # fmt: skip
    with pytest.raises(ConfigError, match="at most"):
        encode_schemas(big)
    with pytest.raises(DecodeError):
        decode_schemas("{" + " " * MAX_SCHEMAS_TEXT + "}")
