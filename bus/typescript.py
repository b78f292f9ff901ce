"""TypeScript declarations for the live services' typed commands (docs/PROTOCOL.md 5.13, 9.9).

``busgate typescript`` and ``GET /v1/typescript`` write them for the JavaScript client
(``clients/js``): a module augmentation that adds each live service to the client's ``Services``
interface, so ``await bus.service("demo")`` is typed in an editor::

    import type { Command } from "busgate";
    declare module "busgate" {
      interface Services {
        "demo": {
          /** Answers with its arguments, unchanged. */
          "echo": Command<{ [key: string]: unknown }, { [key: string]: unknown }>;
        };
      }
    }

Sans-I/O: the service entries of ``GET /v1/services`` (:mod:`bus.discovery.directory_json`) in, text
out.
The JSON Schema (draft 2020-12) keywords read: ``type`` (one or a list), ``enum``, ``const``,
``anyOf``, ``oneOf``, ``allOf``, ``properties`` with ``required`` and ``additionalProperties``,
``items``, ``prefixItems``, ``$ref`` to ``#/$defs/...`` or ``#/definitions/...`` (inlined; a
cycle becomes ``unknown``), ``description`` (a doc comment). Anything else is ``unknown``: the
declarations may be looser than the schema, never stricter, since the gateway checks the schema.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = ["declarations", "schema_type"]

#: How deep ``$ref`` chains are followed before a type is left ``unknown`` (a recursive schema).
MAX_REF_DEPTH: Final = 8
_INDENT: Final = "  "
_PRIMITIVES: Final = {
    "string": "string",
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
}


def _key(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def _doc(text: object, indent: str) -> list[str]:
    if not isinstance(text, str) or not text.strip():
        return []
    lines = text.strip().replace("*/", "*\\/").splitlines()
    if len(lines) == 1:
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**", *(f"{indent} * {line}".rstrip() for line in lines), f"{indent} */"]


class _Writer:
    """One schema document's conversion (its ``$defs`` are where ``$ref`` points)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def type_of(self, schema: object, indent: str, depth: int = 0) -> str:
        if schema is True or schema == {}:
            return "unknown"
        if schema is False:
            return "never"
        if not isinstance(schema, Mapping):
            return "unknown"
        if isinstance(ref := schema.get("$ref"), str):
            return self._ref(ref, indent, depth)
        if "const" in schema:
            return json.dumps(schema["const"], ensure_ascii=False)
        if isinstance(values := schema.get("enum"), list) and values:
            return " | ".join(json.dumps(v, ensure_ascii=False) for v in values)
        for word, joiner in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
            if isinstance(parts := schema.get(word), list) and parts:
                members = dict.fromkeys(self._grouped(p, indent, depth) for p in parts)
                return joiner.join(members)
        kind = schema.get("type")
        kinds: list[Any] = kind if isinstance(kind, list) else [kind] if kind else []
        if not kinds:
            if "properties" in schema or "additionalProperties" in schema:
                kinds = ["object"]
            elif "items" in schema or "prefixItems" in schema:
                kinds = ["array"]
            else:
                return "unknown"
        written = dict.fromkeys(self._of_type(k, schema, indent, depth) for k in kinds)
        return " | ".join(written) if len(written) > 1 else next(iter(written))

    def _grouped(self, schema: object, indent: str, depth: int) -> str:
        text = self.type_of(schema, indent, depth)
        return f"({text})" if (" | " in text or " & " in text) and "\n" not in text else text

    def _ref(self, ref: str, indent: str, depth: int) -> str:
        if depth >= MAX_REF_DEPTH:
            return "unknown"
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                table = self.root.get(prefix[2:-1])
                target = table.get(ref[len(prefix) :]) if isinstance(table, Mapping) else None
                if target is not None:
                    return self.type_of(target, indent, depth + 1)
        return "unknown"

    def _of_type(self, kind: object, schema: Mapping[str, Any], indent: str, depth: int) -> str:
        if kind == "object":
            return self._object(schema, indent, depth)
        if kind == "array":
            return self._array(schema, indent, depth)
        return _PRIMITIVES.get(str(kind), "unknown")

    def _array(self, schema: Mapping[str, Any], indent: str, depth: int) -> str:
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(prefix, list) and prefix:
            parts = [self.type_of(p, indent, depth) for p in prefix]
            if items is not False:
                parts.append(f"...{self._element(items, indent, depth)}[]")
            return f"[{', '.join(parts)}]"
        return f"{self._element(items, indent, depth)}[]"

    def _element(self, items: object, indent: str, depth: int) -> str:
        if items is None:
            return "unknown"
        text = self.type_of(items, indent, depth)
        return f"({text})" if " | " in text or " & " in text else text

    def _object(self, schema: Mapping[str, Any], indent: str, depth: int) -> str:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        extra = schema.get("additionalProperties", True)
        if not properties:
            if extra is False:
                return "Record<string, never>"
            value = "unknown" if extra is True else self.type_of(extra, indent, depth)
            return f"{{ [key: string]: {value} }}"
        inner = indent + _INDENT
        lines = ["{"]
        for name, member in properties.items():
            if isinstance(member, Mapping):
                lines += _doc(member.get("description"), inner)
            optional = "" if name in needed else "?"
            lines.append(
                f"{inner}{_key(str(name))}{optional}: {self.type_of(member, inner, depth)};"
            )
        if extra is not False:
            # An index signature must admit every member's type: unknown does.
            lines.append(f"{inner}[key: string]: unknown;")
        lines.append(f"{indent}}}")
        return "\n".join(lines)


def schema_type(schema: object, indent: str = "") -> str:
    """The TypeScript type of a JSON Schema (``unknown`` where it cannot say)."""
    root = schema if isinstance(schema, Mapping) else {}
    return _Writer(root).type_of(schema, indent)


def _command(name: str, schema: object, indent: str) -> list[str]:
    spec = schema if isinstance(schema, Mapping) else {}
    args = spec.get("args")
    answer = spec.get("answer")
    args_type = schema_type(args, indent) if args is not None else "Record<string, unknown>"
    answer_type = schema_type(answer, indent) if answer is not None else "unknown"
    lines = _doc(spec.get("summary"), indent)
    lines.append(f"{indent}{_key(name)}: Command<{args_type}, {answer_type}>;")
    return lines


def _service(entry: Mapping[str, Any], indent: str) -> list[str]:
    group = str(entry.get("group", ""))
    commands = [str(c) for c in entry.get("commands") or [] if isinstance(c, str)]
    schemas = entry.get("schemas")
    schemas = schemas if isinstance(schemas, Mapping) else {}
    instances = entry.get("instances")
    inner = indent + _INDENT
    lines = [f"{indent}/** {group}: {instances} instance(s), {len(commands)} command(s) */"]
    lines.append(f"{indent}{_key(group)}: {{")
    for name in sorted(set(commands) | {str(k) for k in schemas}):
        if name == "then":  # the client leaves it out: `await` would take the service for a promise
            continue
        lines += _command(name, schemas.get(name), inner)
    lines.append(f"{indent}}};")
    return lines


def declarations(
    services: Iterable[Mapping[str, Any]],
    *,
    groups: Sequence[str] = (),
    source: str = "",
) -> str:
    """The ``.d.ts`` text for the live services.

    Args:
        services: the entries of ``GET /v1/services`` (``group``, ``commands``, ``schemas``).
        groups: only the groups matching one of these ``fnmatch`` patterns (all when empty).
        source: where the services were read (a comment at the top).

    Returns:
        A module augmentation of the ``busgate`` package's ``Services`` interface.
    """
    chosen = [
        entry
        for entry in services
        if not groups or any(fnmatch.fnmatchcase(str(entry.get("group", "")), g) for g in groups)
    ]
    chosen.sort(key=lambda entry: str(entry.get("group", "")))
    where = f" from {source}" if source else ""
    lines = [
        f"// The live services{where}, as `busgate typescript` writes them: regenerate when they",
        '// change. With the busgate package, `await bus.service("group")` is then typed.',
        'import type { Command } from "busgate";',
        "",
        'declare module "busgate" {',
        f"{_INDENT}interface Services {{",
    ]
    for entry in chosen:
        lines += _service(entry, _INDENT * 2)
    lines += [f"{_INDENT}}}", "}", "", "export {};", ""]
    return "\n".join(lines)
