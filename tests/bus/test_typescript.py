"""``bus/typescript.py``: JSON Schema to TypeScript, and the declarations' shape."""

from __future__ import annotations

from typing import Any

import pytest

from bus.typescript import declarations, schema_type

CASES: list[tuple[Any, str]] = [
    ({"type": "string"}, "string"),
    ({"type": "integer"}, "number"),
    ({"type": ["number", "string"]}, "number | string"),
    ({"type": "null"}, "null"),
    ({}, "unknown"),
    (True, "unknown"),
    (False, "never"),
    ({"enum": ["a", 1, None]}, '"a" | 1 | null'),
    ({"const": "x"}, '"x"'),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "string | number"),
    (
        {"allOf": [{"$ref": "#/$defs/A"}, {"type": "object"}]},
        "unknown & { [key: string]: unknown }",
    ),
    ({"type": "array", "items": {"type": "string"}}, "string[]"),
    ({"type": "array", "items": {"type": ["string", "null"]}}, "(string | null)[]"),
    ({"type": "array"}, "unknown[]"),
    (
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        "[string, number]",
    ),
    ({"type": "object"}, "{ [key: string]: unknown }"),
    ({"type": "object", "additionalProperties": False}, "Record<string, never>"),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, "{ [key: string]: number }"),
    (
        {
            "type": "object",
            "properties": {"sku": {"type": "string", "description": "the article"}, "qty": {}},
            "required": ["sku"],
            "additionalProperties": False,
        },
        '{\n  /** the article */\n  "sku": string;\n  "qty"?: unknown;\n}',
    ),
    (
        {"type": "object", "properties": {"a b": {"type": "boolean"}}},
        '{\n  "a b"?: boolean;\n  [key: string]: unknown;\n}',
    ),
    (
        {"$defs": {"N": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/N"}},
        "number[]",
    ),
    (
        {"$defs": {"L": {"type": "array", "items": {"$ref": "#/$defs/L"}}}, "$ref": "#/$defs/L"},
        "unknown[][][][][][][][]",
    ),
    ({"$ref": "https://elsewhere/schema.json"}, "unknown"),
]


@pytest.mark.parametrize(("schema", "expected"), CASES)
def test_schema_type(schema: Any, expected: str) -> None:
    assert schema_type(schema) == expected


def test_declarations_augment_services_and_leave_out_then() -> None:
    entries = [
        {"group": "zeta", "instances": 1, "commands": ["go"], "schemas": {}},
        {
            "group": "shop",
            "instances": 2,
            "commands": ["quote", "then"],
            "schemas": {
                "quote": {
                    "args": {"type": "object", "properties": {"qty": {"type": "integer"}}},
                    "answer": {"type": "object", "additionalProperties": False},
                    "summary": "Price */ it.",
                }
            },
        },
    ]
    text = declarations(entries, source="bus://host:4000")
    assert text.startswith("// The live services from bus://host:4000")
    assert 'declare module "busgate" {\n  interface Services {' in text
    assert text.index('"shop": {') < text.index('"zeta": {')  # sorted
    assert '      /** Price *\\/ it. */\n      "quote": Command<{' in text
    assert '"go": Command<Record<string, unknown>, unknown>;' in text
    assert '"then"' not in text
    assert text.endswith("export {};\n")
    only = declarations(entries, groups=["sh*"])
    assert '"shop"' in only and '"zeta"' not in only
