"""Command schemas: what a service's command takes and answers, as JSON Schema (sans-I/O).

A service declares them with its commands (:meth:`bus.asyncio.service.Service.command`'s
``args=`` and ``answer=``): a JSON Schema (a mapping), or a Python type the schema is derived
from (:func:`schema_of`: a ``TypedDict``, a dataclass, ``str``/``int``/``float``/``bool``,
``list[T]``, ``dict[str, T]``, ``Literal[...]``, an ``Enum``, ``T | None``). Its heartbeats carry
them (``Schemas`` in the heartbeat payload, :mod:`bus.discovery.services`), the directory keeps
them, and
the gateway checks arguments with them before they reach the bus (400 naming the field) and
serves them as OpenAPI (``POST /v1/{group}/{cmd}``). Validation is JSON Schema draft 2020-12,
by jsonschema-rs. See docs/PROTOCOL.md section 9.3.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Union, get_args, get_origin, get_type_hints

import jsonschema_rs

from bus.errors import ConfigError, DecodeError, SchemaError

__all__ = [
    "MAX_SCHEMAS_TEXT",
    "CommandSchema",
    "check_args",
    "decode_schemas",
    "encode_schemas",
    "schema_of",
    "validator_of",
]

#: The longest ``Schemas`` text a heartbeat may carry (every instance sends it every interval).
MAX_SCHEMAS_TEXT: Final = 64 * 1024

_SCALARS: Final[dict[Any, dict[str, Any]]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}


@dataclass(frozen=True)
class CommandSchema:
    """What one command takes (``args``: the request's arguments, an object) and answers
    (``answer``: the ACK's payload), as JSON Schema; either may be None (not declared), and
    ``summary`` is one line for people (the handler's docstring's first line)."""

    args: Mapping[str, Any] | None = None
    answer: Mapping[str, Any] | None = None
    summary: str = ""

    @functools.cached_property
    def validator(self) -> Any:
        """The compiled validator of ``args`` (None when not declared), made once."""
        return None if self.args is None else validator_of(self.args)

    def to_json(self) -> dict[str, Any]:
        """The schema as the heartbeat and ``GET /v1/services`` carry it (absent parts left out)."""
        out: dict[str, Any] = {}
        if self.args is not None:
            out["args"] = self.args
        if self.answer is not None:
            out["answer"] = self.answer
        if self.summary:
            out["summary"] = self.summary
        return out


def command_schema(
    args: Mapping[str, Any] | type | Any = None,
    answer: Mapping[str, Any] | type | Any = None,
    summary: str = "",
) -> CommandSchema:
    """A :class:`CommandSchema` from schemas or types (see the module docstring).

    Raises:
        ConfigError: a type has no JSON Schema, a given schema is not valid JSON Schema, or the
            arguments' schema does not describe an object (arguments are named).
    """
    arg_schema = None if args is None else _schema(args, "args")
    if arg_schema is not None and arg_schema.get("type", "object") != "object":
        raise ConfigError(f"a command's arguments are an object, not {arg_schema.get('type')!r}")
    answer_schema = None if answer is None else _schema(answer, "answer")
    line = summary.strip().splitlines()[0][:200] if summary.strip() else ""
    return CommandSchema(arg_schema, answer_schema, line)


def _schema(value: Any, what: str) -> dict[str, Any]:
    schema = dict(value) if isinstance(value, Mapping) else schema_of(value)
    try:
        jsonschema_rs.meta.validate(schema)
        json.dumps(schema)
    except (jsonschema_rs.ValidationError, TypeError, ValueError) as exc:
        why = getattr(exc, "message", None) or str(exc)
        raise ConfigError(f"the {what} schema is not valid JSON Schema: {why}") from exc
    return schema


def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a Python type (see the module docstring for the types understood).

    A ``TypedDict``'s keys are required as ``total`` and ``Required``/``NotRequired`` say, a
    dataclass's fields are required unless they have a default; both allow no other member.

    Raises:
        ConfigError: a type with no JSON form (a set, a class that is not a dataclass, ...).
    """
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin = get_origin(tp)
    if origin is Literal:
        values = list(get_args(tp))
        return {"enum": values}
    if origin in (Union, types.UnionType):
        options = [schema_of(arg) for arg in get_args(tp)]
        return {"anyOf": options}
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        return {"type": "array", "items": schema_of(item)}
    if origin is dict or origin is Mapping:
        key, value = get_args(tp) or (str, Any)
        if key is not str:
            raise ConfigError(f"{tp!r}: JSON object keys are text")
        return {"type": "object", "additionalProperties": schema_of(value)}
    if origin in (typing.Annotated,):
        return schema_of(get_args(tp)[0])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if typing.is_typeddict(tp):
        return _object(tp, _typeddict_required(tp))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        required = {
            f.name
            for f in dataclasses.fields(tp)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        return _object(tp, required)
    raise ConfigError(f"{tp!r} has no JSON Schema: give a TypedDict, a dataclass or a schema")


def _typeddict_required(tp: Any) -> set[str]:
    # Read from the resolved hints: with ``from __future__ import annotations`` the class's own
    # ``__required_keys__`` cannot see ``NotRequired[...]`` inside its string annotations.
    total = getattr(tp, "__total__", True)
    required = set()
    for name, hint in get_type_hints(tp, include_extras=True).items():
        origin = get_origin(hint)
        if origin is typing.NotRequired:
            continue
        if origin is typing.Required or total:
            required.add(name)
    return required


def _object(tp: type, required: set[str]) -> dict[str, Any]:
    hints = get_type_hints(tp, include_extras=False)
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: schema_of(hint) for name, hint in hints.items()},
        "additionalProperties": False,
    }
    if required:
        out["required"] = sorted(required & set(hints))
    doc = (tp.__doc__ or "").strip()
    if doc and not doc.startswith(f"{tp.__name__}("):  # a dataclass's generated docstring
        out["description"] = doc.splitlines()[0]
    return out


@functools.lru_cache(maxsize=1024)
def _validator(text: str) -> Any:
    return jsonschema_rs.validator_for(json.loads(text))


def validator_of(schema: Mapping[str, Any]) -> Any:
    """The compiled validator of a schema (one per distinct schema, kept): compile once, then
    :func:`check_args` with it costs no serialization of the schema."""
    return _validator(json.dumps(schema, sort_keys=True))


def check_args(schema: Mapping[str, Any] | Any, args: Any) -> None:
    """Check a request's arguments against its command's ``args`` schema (or the validator
    :func:`validator_of` made of it).

    Raises:
        SchemaError: they do not match; ``field`` is the path of the first wrong member
            (``qty``, ``items/0/sku``; ``""`` for the object itself), and the text says what
            is wrong with it.
    """
    validator = validator_of(schema) if isinstance(schema, Mapping) else schema
    if validator.is_valid(args):
        return
    error = next(iter(validator.iter_errors(args)), None)
    if error is None:
        return
    path = [str(part) for part in error.instance_path]
    missing = getattr(error.kind, "property", None)
    if type(error.kind).__name__ == "Required" and isinstance(missing, str):
        field = "/".join([*path, missing])
        raise SchemaError(f"argument {field!r} is required", field)
    field = "/".join(path)
    where = f"argument {field!r}: " if field else "arguments: "
    raise SchemaError(f"{where}{error.message}", field)


def encode_schemas(schemas: Mapping[str, CommandSchema]) -> str:
    """The heartbeat's ``Schemas`` text: one JSON object, command name -> schema.

    Raises:
        ConfigError: the text is longer than :data:`MAX_SCHEMAS_TEXT`.
    """
    text = json.dumps(
        {name: schema.to_json() for name, schema in sorted(schemas.items())},
        separators=(",", ":"),
        ensure_ascii=True,
    )
    if len(text) > MAX_SCHEMAS_TEXT:
        raise ConfigError(
            f"the commands' schemas take {len(text)} bytes; a heartbeat carries at most "
            f"{MAX_SCHEMAS_TEXT}"
        )
    return text


def decode_schemas(value: object) -> dict[str, CommandSchema]:
    """Read a heartbeat's ``Schemas``: the JSON text :func:`encode_schemas` makes, or the same
    object as a mapping (a JSON heartbeat from a non-Python service).

    Raises:
        DecodeError: not a JSON object of command name -> {args, answer, summary}.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        if len(value) > MAX_SCHEMAS_TEXT:
            raise DecodeError("heartbeat field Schemas is too long")
        return dict(_decode_text(value))  # every instance sends the same text every interval
    return _decode(value)


@functools.lru_cache(maxsize=256)
def _decode_text(text: str) -> Mapping[str, CommandSchema]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise DecodeError(f"heartbeat field Schemas is not JSON: {exc}") from exc
    return types.MappingProxyType(_decode(value))


def _decode(value: object) -> dict[str, CommandSchema]:
    if not isinstance(value, Mapping):
        raise DecodeError("heartbeat field Schemas is not an object")
    out: dict[str, CommandSchema] = {}
    for name, entry in value.items():
        if not isinstance(entry, Mapping):
            raise DecodeError(f"heartbeat field Schemas: {name!r} is not an object")
        args, answer, summary = entry.get("args"), entry.get("answer"), entry.get("summary", "")
        for part in (args, answer):
            if part is not None and not isinstance(part, Mapping | bool):
                raise DecodeError(f"heartbeat field Schemas: {name!r} has a schema of bad type")
        out[str(name)] = CommandSchema(
            _plain(args), _plain(answer), summary if isinstance(summary, str) else ""
        )
    return out


def _plain(schema: Any) -> dict[str, Any] | None:
    """A schema as plain JSON, or None when absent, ``true`` or not valid JSON Schema: a
    service's broken schema leaves its command unchecked rather than unreachable."""
    if schema is None or schema is True:
        return None
    if schema is False:
        return {"not": {}}
    try:
        plain: dict[str, Any] = json.loads(json.dumps(schema))
    except (TypeError, ValueError):
        return None
    return plain if jsonschema_rs.meta.is_valid(plain) else None
