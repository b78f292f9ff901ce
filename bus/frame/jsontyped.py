"""Data frames as typed JSON (PROTOCOL.md 1.7): a lossless form that names every field's type,
used by ``busgate frame`` and the PROTOCOL.md examples (:func:`to_typed`, :func:`from_typed`)::

    [{"name": "CMD", "type": "STRING", "value": "echo"},
     {"name": "PLD", "type": "FRAME", "value": [ ...fields... ]},
     {"name": "a", "type": "ARRAY", "value": [{"type": "U8", "value": 1}]}]

BYTEARRAY values are hex strings, DATE values ISO-8601 strings with milliseconds and a ``Z``
(integer milliseconds outside years 1..9999), non-finite FLOAT/DOUBLE values the strings
``"NaN"``, ``"Infinity"``, ``"-Infinity"``.

A DATE's text (:func:`format_date`, :func:`parse_date`) is the one Kestrel JSON writes too
(:mod:`bus.frame.jsonmap`, which re-exports everything here).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from bus.errors import DecodeError, EncodeError
from bus.frame.enums import FieldType
from bus.frame.frame import DataFrame, Field, make_field

__all__ = ["format_date", "from_typed", "parse_date", "to_typed"]


def format_date(value: datetime) -> str:
    """A DATE value as the original writes it: ``yyyy-MM-ddTHH:mm:ss.SSSZ`` in UTC."""
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
        f".{v.microsecond // 1000:03d}Z"
    )


def parse_date(text: str) -> datetime:
    """Parse an ISO-8601 date-time (``Z`` or an offset; naive means UTC) to an aware datetime.

    Raises:
        ValueError: not an ISO-8601 date-time.
    """
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _typed_value(type_: FieldType, value: Any) -> Any:
    if type_ is FieldType.FRAME:
        return _to_typed(value)
    if type_ is FieldType.ARRAY:
        return [{"type": e.type.name, "value": _typed_value(e.type, e.value)} for e in value]
    if type_ is FieldType.BYTEARRAY:
        return bytes(value).hex()
    if type_ is FieldType.DATE:
        return format_date(value) if isinstance(value, datetime) else value
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def to_typed(frame: DataFrame) -> list[dict[str, Any]]:
    """The frame as typed JSON data: a list of ``{"name", "type", "value"}`` objects.

    Returns:
        Plain data for ``json.dumps``; every field's name, type and value, nested.

    Raises:
        EncodeError: the frame is nested too deeply to walk.
    """
    try:
        return _to_typed(frame)
    except RecursionError as exc:
        raise EncodeError("frame nested too deeply for typed JSON") from exc


def _to_typed(frame: DataFrame) -> list[dict[str, Any]]:
    return [
        {"name": item.name, "type": item.type.name, "value": _typed_value(item.type, item.value)}
        for item in frame._fields
    ]


_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _field_type(spec: dict[str, Any], where: str) -> FieldType:
    name = spec.get("type")
    if not isinstance(name, str) or name not in FieldType.__members__:
        raise DecodeError(f"{where}: unknown type {name!r}")
    return FieldType[name]


def _from_typed_value(type_: FieldType, value: Any, where: str) -> Any:
    if type_ is FieldType.FRAME:
        return _from_typed(value, where)
    if type_ is FieldType.ARRAY:
        if not isinstance(value, list):
            raise DecodeError(f"{where}: ARRAY value must be a list")
        elements = []
        for index, spec in enumerate(value):
            here = f"{where}[{index}]"
            if not isinstance(spec, dict):
                raise DecodeError(f"{here}: element must be an object with type and value")
            elem_type = _field_type(spec, here)
            elem_value = _from_typed_value(elem_type, spec.get("value"), here)
            elements.append(Field("", elem_type, elem_value))
        return elements
    if type_ is FieldType.BYTEARRAY and isinstance(value, str):
        try:
            return bytes.fromhex(value)
        except ValueError as exc:
            raise DecodeError(f"{where}: BYTEARRAY value is not hex") from exc
    if type_ is FieldType.DATE and isinstance(value, str):
        try:
            return parse_date(value)
        except ValueError as exc:
            raise DecodeError(f"{where}: DATE value is not ISO-8601: {value!r}") from exc
    if type_ in (FieldType.FLOAT, FieldType.DOUBLE) and isinstance(value, str):
        if value not in _SPECIAL_FLOATS:
            raise DecodeError(f"{where}: {type_.name} value {value!r} is not a number")
        return _SPECIAL_FLOATS[value]
    return value


def from_typed(data: Any, where: str = "fields") -> DataFrame:
    """Build a frame from typed JSON data (as :func:`to_typed` returns).

    A field without ``"type"`` gets the inferred type of its value.

    Args:
        data: a list of ``{"name", "type", "value"}`` objects.
        where: the path shown in error messages.

    Returns:
        The frame.

    Raises:
        DecodeError: the data is not in the typed form, a value does not fit its type, or the
            data is nested too deeply to walk.
    """
    try:
        return _from_typed(data, where)
    except RecursionError as exc:
        raise DecodeError(f"{where}: nested too deeply") from exc


def _from_typed(data: Any, where: str) -> DataFrame:
    if not isinstance(data, list):
        raise DecodeError(f"{where}: expected a list of fields")
    fields: list[Field] = []
    for index, spec in enumerate(data):
        here = f"{where}[{index}]"
        if not isinstance(spec, dict):
            raise DecodeError(f"{here}: field must be an object with name, type and value")
        name = spec.get("name", "")
        if not isinstance(name, str):
            raise DecodeError(f"{here}: name must be a string")
        value = spec.get("value")
        if "type" in spec:
            type_: FieldType | None = _field_type(spec, here)
            value = _from_typed_value(type_, value, f"{here}({name})")  # type: ignore[arg-type]
        else:
            type_ = None
        try:
            fields.append(make_field(name, value, type_))
        except EncodeError as exc:
            raise DecodeError(f"{here}: {exc}") from exc
    return DataFrame._trusted(fields)
