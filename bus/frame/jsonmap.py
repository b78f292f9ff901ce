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
   FLOAT, DOUBLE         number, always with a fraction (``1.0e+300``: Java reads a
                         number without one as an integer or a string); non-finite:
                         ``null``; back in: DOUBLE
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
   field's type, used by ``busgate frame`` and the PROTOCOL.md examples; it lives in
   :mod:`bus.frame.jsontyped` with the DATE text both forms write (:func:`format_date`,
   :func:`parse_date`), and :func:`locate` (where an offending value starts in the text) in
   :mod:`bus.frame.jsonlocate`. This module re-exports them.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from bus.errors import DecodeError, EncodeError
from bus.frame.codec import DEFAULT_LIMITS, Limits
from bus.frame.enums import FieldType
from bus.frame.frame import DataFrame, Field, make_field

# Re-exported (the gateway imports locate from here, where it was written first).
from bus.frame.jsonlocate import locate as locate
from bus.frame.jsontyped import format_date, from_typed, parse_date, to_typed

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


def _number(value: float) -> str:
    """A finite float as JSON that Java's JsonFrameParser reads back as a DOUBLE: it reads a
    number without a fraction as a Long, and as a STRING when that fails, so ``1e+300`` gets
    its ``.0`` (``1.0e+300``; PROTOCOL.md 1.7)."""
    text = repr(value)
    if "e" in text and "." not in text:
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}"
    return text


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
        out.append(_number(value) if math.isfinite(value) else "null")
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _count(frame: DataFrame) -> int:
    total = 0
    for item in frame._fields:
        total += 1
        if item.type is FieldType.FRAME:
            total += _count(item.value)
    return total
