"""Data frames as JSON, two ways (PROTOCOL.md 1.6 and 1.7).

1. **Kestrel JSON** (:func:`to_json`, :func:`from_json`): the original's JSONMarshaler mapping, what
   travels when a message's ``ENC`` is ``JSON``. Types are inferred on the way back in:

   ====================  ============================================================
   frame field           JSON
   ====================  ============================================================
   FRAME                 object; a frame whose fields are all unnamed is an array;
                         an empty frame is ``{}`` at the top, ``[]`` nested (as Java)
   UDEF                  ``null``
   BOOLEAN               ``true`` / ``false``
   S8..U64               integer; back in: U32 when 0..2**32-1, else S64 (else U64)
   FLOAT, DOUBLE         number (non-finite: ``null``); back in: DOUBLE
   STRING, URI           string; back in: STRING
   DATE                  string ``yyyy-MM-ddTHH:mm:ss.SSSZ`` (UTC); back in: STRING;
                         outside years 1..9999: integer milliseconds
   BYTEARRAY             string, standard base64; back in: STRING
   ARRAY                 array of the element values; back in: FRAME of unnamed fields
   ====================  ============================================================

   Repeated names are written as repeated object keys and read back in order. The text is
   Latin-1 on the wire: characters above U+00FF (only possible in field names) are written as
   ``\\uXXXX`` escapes, so the text always encodes to Latin-1.

2. **Typed JSON** (:func:`to_typed`, :func:`from_typed`): a lossless form that names every
   field's type, used by ``busgate frame`` and the PROTOCOL.md examples::

       [{"name": "CMD", "type": "STRING", "value": "echo"},
        {"name": "PLD", "type": "FRAME", "value": [ ...fields... ]},
        {"name": "a", "type": "ARRAY", "value": [{"type": "U8", "value": 1}]}]

   BYTEARRAY values are hex strings, DATE values ISO-8601 strings with milliseconds and a
   ``Z`` (integer milliseconds outside years 1..9999), non-finite FLOAT/DOUBLE values the
   strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bus.codec import DEFAULT_LIMITS, Limits
from bus.enums import FieldType
from bus.errors import DecodeError, EncodeError
from bus.frame import DataFrame, Field, make_field

__all__ = ["format_date", "from_json", "from_typed", "parse_date", "to_json", "to_typed"]

_dumps_str = json.JSONEncoder(ensure_ascii=False).encode
_NUMERIC = frozenset(
    {
        FieldType.S8,
        FieldType.U8,
        FieldType.S16,
        FieldType.U16,
        FieldType.S32,
        FieldType.U32,
        FieldType.S64,
        FieldType.U64,
    }
)


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


# Kestrel JSON --------------------------------------------------------------------------------


def _string(text: str) -> str:
    encoded = _dumps_str(text)
    return encoded if encoded.isascii() else _escape_units(encoded)


def _escape_units(encoded: str) -> str:
    out = []
    for char in encoded:
        code = ord(char)
        if code <= 0xFF:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    return "".join(out)


def _json_value(item: Field, out: list[str]) -> None:
    type_, value = item.type, item.value
    if type_ is FieldType.FRAME:
        _json_frame(value, out, nested=True)
    elif type_ is FieldType.STRING or type_ is FieldType.URI:
        out.append(_string(value))
    elif type_ in _NUMERIC:
        out.append(str(value))
    elif type_ is FieldType.BOOLEAN:
        out.append("true" if value else "false")
    elif type_ is FieldType.UDEF:
        out.append("null")
    elif type_ is FieldType.FLOAT or type_ is FieldType.DOUBLE:
        out.append(repr(value) if math.isfinite(value) else "null")
    elif type_ is FieldType.DATE:
        # An instant outside years 1..9999 is kept as milliseconds (PROTOCOL.md 1.3).
        out.append(_string(format_date(value)) if isinstance(value, datetime) else str(value))
    elif type_ is FieldType.BYTEARRAY:
        out.append(_string(base64.b64encode(value).decode("ascii")))
    else:  # ARRAY
        out.append("[")
        for index, element in enumerate(value):
            if index:
                out.append(",")
            _json_value(element, out)
        out.append("]")


def _json_frame(frame: DataFrame, out: list[str], nested: bool = False) -> None:
    fields = frame._fields
    if not fields:
        # Java reads an empty nested FRAME value as null and writes null frames as [];
        # the top-level empty frame is {} (JSONMarshaler).
        out.append("[]" if nested else "{}")
        return
    as_array = frame.is_array
    out.append("[" if as_array else "{")
    for index, item in enumerate(fields):
        if index:
            out.append(",")
        if not as_array:
            out.append(_string(item.name))
            out.append(":")
        _json_value(item, out)
    out.append("]" if as_array else "}")


def to_json(frame: DataFrame) -> str:
    """The frame as compact Kestrel JSON (mapping in the module docstring).

    Args:
        frame: the frame.

    Returns:
        JSON text whose characters are all Latin-1 (``text.encode("latin-1")`` never fails).

    Raises:
        EncodeError: the frame is nested too deeply to walk.
    """
    out: list[str] = []
    try:
        _json_frame(frame, out)
    except RecursionError as exc:
        raise EncodeError("frame nested too deeply for JSON") from exc
    return "".join(out)


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as read: its members in order, repeated keys kept."""


def _json_to_field(name: str, value: Any, depth: int) -> Field:
    if isinstance(value, _Pairs):
        return Field(name, FieldType.FRAME, _pairs_to_frame(value, depth - 1))
    if isinstance(value, list):
        return Field(name, FieldType.FRAME, _list_to_frame(value, depth - 1))
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**64:
            raise _TooBig
    return make_field(name, value)


class _TooDeep(Exception):
    """Raised inside the walk; :func:`from_json` turns it into a located DecodeError."""


class _TooBig(Exception):
    """An integer beyond 64 bits, found inside the walk."""


class _NotFinite(Exception):
    """A number beyond a double (``1e400``), found by :func:`_finite_float`."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite
    return value


def _check_depth(depth: int) -> None:
    if depth < 0:
        raise _TooDeep


def _pairs_to_frame(pairs: _Pairs, depth: int) -> DataFrame:
    _check_depth(depth)
    return DataFrame._trusted([_json_to_field(name, value, depth) for name, value in pairs])


def _list_to_frame(values: list[Any], depth: int) -> DataFrame:
    _check_depth(depth)
    return DataFrame._trusted([_json_to_field("", value, depth) for value in values])


def from_json(
    text: str | bytes, limits: Limits = DEFAULT_LIMITS, *, finite: bool = False
) -> DataFrame:
    """Parse Kestrel JSON into a frame (an object, or an array as a frame of unnamed fields).

    Args:
        text: JSON text; bytes are read as Latin-1, as on the wire.
        limits: ``max_size`` (characters), ``max_depth`` and ``max_fields`` as for ``decode``.
        finite: refuse a number beyond a double (``1e400``), which JSON reads as an infinity
            (written back as ``null``): what a sender checks (the gateway); a receiver reads
            it as the infinity the C header reader vouches for.

    Returns:
        The frame, types inferred as in the module docstring.

    Raises:
        DecodeError: not JSON, not an object or array, a string outside Latin-1, a number
            beyond 64 bits, or a limit exceeded.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("latin-1")
    if len(text) > limits.max_size:
        raise DecodeError(f"JSON of {len(text)} characters exceeds max_size {limits.max_size}")
    try:
        parsed = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_constant=_no_constant,
            parse_float=_finite_float if finite else None,
        )
    except _NotFinite as exc:
        where = locate(text, "float")
        raise DecodeError("JSON number beyond a 64-bit float (like 1e400)", where) from exc
    except json.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc.msg}", exc.pos) from exc
    except RecursionError as exc:
        raise _too_deep(text, limits) from exc
    except ValueError as exc:
        if _is_digit_limit(exc):  # int() refused a number of thousands of digits
            raise _too_big(text) from exc
        raise DecodeError(f"not JSON: {exc}", _first_value(text)) from exc
    if isinstance(parsed, _Pairs):
        build: Callable[[Any, int], DataFrame] = _pairs_to_frame
    elif isinstance(parsed, list):
        build = _list_to_frame
    else:
        raise DecodeError("JSON text is not an object or an array", _first_value(text))
    try:
        frame = build(parsed, limits.max_depth)
    except _TooDeep as exc:
        raise _too_deep(text, limits) from exc
    except _TooBig as exc:
        raise _too_big(text) from exc
    except EncodeError as exc:
        where = locate(text, "latin1")
        raise DecodeError(f"JSON value cannot travel in a frame: {exc}", where) from exc
    except RecursionError as exc:
        raise _too_deep(text, limits) from exc
    if _count(frame) > limits.max_fields:
        raise DecodeError(f"more than max_fields ({limits.max_fields}) fields and elements in JSON")
    return frame


def _too_deep(text: str, limits: Limits) -> DecodeError:
    # The top object or array is level 0; a frame nested max_depth levels inside it is allowed.
    where = locate(text, "depth", limits.max_depth + 2)
    return DecodeError(f"JSON nested deeper than max_depth ({limits.max_depth} levels)", where)


def _too_big(text: str) -> DecodeError:
    where = locate(text, "integer")
    return DecodeError("JSON integer does not fit in 64 bits (-2**63 .. 2**64-1)", where)


def _is_digit_limit(exc: ValueError) -> bool:
    return "int_max_str_digits" in str(exc) or "integer string conversion" in str(exc)


def _first_value(text: str) -> int:
    stripped = len(text) - len(text.lstrip(" \t\r\n"))
    return stripped


_WHITE = frozenset(" \t\r\n")


def locate(text: str, what: str, depth: int = 0) -> int | None:
    """Where in ``text`` (a character index) the first offending JSON value starts.

    Only called on the error path. ``what`` is ``"depth"`` (the first ``[`` or ``{`` at nesting
    level ``depth``, the top being 1), ``"integer"`` (the first integer outside -2**63..2**64-1),
    ``"float"`` (the first number beyond a double, ``1e400``),
    ``"latin1"`` (the first character above U+00FF), ``"empty-name"`` (the first object member
    named ``""``). ``None`` when nothing is found.
    """
    level = 0
    index, end = 0, len(text)
    while index < end:
        char = text[index]
        if char == '"':
            close = _string_end(text, index)
            if what == "latin1":
                for offset in range(index + 1, close):
                    if ord(text[offset]) > 0xFF:
                        return offset
            if what == "empty-name" and close == index + 1:
                after = close + 1
                while after < end and text[after] in _WHITE:
                    after += 1
                if after < end and text[after] == ":":
                    return index
            index = close + 1
            continue
        if char in "[{":
            level += 1
            if what == "depth" and level >= depth:
                return index
        elif char in "]}":
            level -= 1
        elif what in ("integer", "float") and (char == "-" or char.isdigit()):
            stop = index + 1
            while stop < end and (text[stop].isdigit() or text[stop] in ".eE+-"):
                stop += 1
            digits = text[index:stop].lstrip("-")
            if what == "float" and not digits.isdigit():
                with contextlib.suppress(ValueError):
                    if not math.isfinite(float(text[index:stop])):
                        return index
            elif digits.isdigit() and (
                len(digits) > 20 or not -(2**63) <= int(text[index:stop]) < 2**64
            ):
                return index
            index = stop
            continue
        index += 1
    return None


def _string_end(text: str, start: int) -> int:
    """The index of the quote that closes the string opening at ``start``."""
    index = start + 1
    while True:
        index = text.find('"', index)
        if index < 0:
            return len(text)
        backslashes = 0
        while text[index - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return index
        index += 1


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _count(frame: DataFrame) -> int:
    total = 0
    for item in frame._fields:
        total += 1
        if item.type is FieldType.FRAME:
            total += _count(item.value)
    return total


# Typed JSON ----------------------------------------------------------------------------------


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
