"""The pure-Python encoder of data frames (PROTOCOL.md 1), byte for byte as the Java original.

:func:`reference_encode` is what :func:`bus.frame.codec.encode` runs without the C accelerator, and
what the accelerator runs when its fast path meets anything unusual; the wire format is drawn
in :mod:`bus.frame.codec`'s docstring.
"""

from __future__ import annotations

import struct
from typing import Any

from bus.errors import EncodeError
from bus.frame.enums import FieldType
from bus.frame.frame import DataFrame, Field
from bus.frame.scalars import millis_from_date

__all__ = ["encode_field", "reference_encode"]

# Type byte + value in one pack call, for the fixed-size types.
_PACK_FIXED = {
    FieldType.S8: struct.Struct(">Bb").pack,
    FieldType.U8: struct.Struct(">BB").pack,
    FieldType.S16: struct.Struct(">Bh").pack,
    FieldType.U16: struct.Struct(">BH").pack,
    FieldType.S32: struct.Struct(">Bi").pack,
    FieldType.U32: struct.Struct(">BI").pack,
    FieldType.S64: struct.Struct(">Bq").pack,
    FieldType.U64: struct.Struct(">BQ").pack,
    FieldType.FLOAT: struct.Struct(">Bf").pack,
    FieldType.DOUBLE: struct.Struct(">Bd").pack,
    FieldType.DATE: struct.Struct(">Bq").pack,
}
_TYPE_LEN32 = struct.Struct(">BI").pack
_TYPE_LEN16 = struct.Struct(">BH").pack
_TRUE = b"\x0e\x01"
_FALSE = b"\x0e\x00"
_UDEF = b"\x01"

_FRAME = FieldType.FRAME
_UDEF_T = FieldType.UDEF
_BYTES_T = FieldType.BYTEARRAY
_STRING = FieldType.STRING
_BOOLEAN = FieldType.BOOLEAN
_DATE = FieldType.DATE
_URI = FieldType.URI
_ARRAY = FieldType.ARRAY

# Encoded name prefixes ([len][UTF-8 name]) of names seen before: header names repeat a lot.
_NAME_CACHE: dict[str, bytes] = {"": b"\x00"}
_NAME_CACHE_MAX = 4096


def _name_prefix(name: str) -> bytes:
    try:
        raw = name.encode("utf-8")
    except (UnicodeEncodeError, AttributeError) as exc:
        raise EncodeError(f"field name {name!r} is not encodable text") from exc
    if len(raw) > 255:
        raise EncodeError(f"field name longer than 255 bytes in UTF-8: {name[:40]!r}...")
    prefix = bytes((len(raw),)) + raw
    if len(_NAME_CACHE) < _NAME_CACHE_MAX:
        _NAME_CACHE[name] = prefix
    return prefix


def reference_encode(frame: DataFrame) -> bytes:
    """Encode a frame to its binary form (``bus.frame.codec.encode``; the pure-Python reference).

    Args:
        frame: the frame.

    Returns:
        The fields' bytes, concatenated (an empty frame is ``b""``).

    Raises:
        EncodeError: a field cannot be encoded (a value out of range for its type, text outside
            Latin-1, a value longer than its length field, a frame nested too deep to walk).
    """
    try:
        return _encode_fields(frame._fields)
    except RecursionError as exc:
        raise EncodeError("frame nested too deeply to encode") from exc


def encode_field(field: Field) -> bytes:
    """Encode one field (name, type and value) as it appears inside a frame.

    Raises:
        EncodeError: as :func:`encode`.
    """
    return _encode_fields([field])


def _encode_fields(fields: list[Field] | tuple[Field, ...]) -> bytes:
    out: list[bytes] = []
    append = out.append
    cache = _NAME_CACHE
    for name, type_, value in fields:
        prefix = cache.get(name)
        append(prefix if prefix is not None else _name_prefix(name))
        if type_ is _STRING:
            append(_variable32(type_, _text(value)))
            continue
        pack = _PACK_FIXED.get(type_)
        if pack is not None:
            append(_fixed(pack, type_, value))
        elif type_ is _FRAME:
            if not isinstance(value, DataFrame):
                raise EncodeError(f"FRAME field {name!r} needs a DataFrame")
            append(_variable32(type_, _encode_fields(value._fields)))
        elif type_ is _BOOLEAN:
            append(_TRUE if value else _FALSE)
        elif type_ is _UDEF_T:
            append(_UDEF)
        else:
            append(_variable32(type_, _variable_payload(type_, value)))
    return b"".join(out)


def _variable32(type_: FieldType, payload: bytes) -> bytes:
    size = len(payload)
    if size > 0xFFFFFFFF:
        raise EncodeError(f"{type_.name} value of {size} bytes exceeds the u32 length")
    return _TYPE_LEN32(type_, size) + payload


def _text(value: Any) -> bytes:
    try:
        return value.encode("latin-1")  # type: ignore[no-any-return]
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise EncodeError(
            f"text outside Latin-1: {bad!r} (U+{ord(bad):04X}) at index {exc.start}"
        ) from exc
    except AttributeError as exc:
        raise EncodeError(f"text field needs str, not {type(value).__name__}") from exc


def _fixed(pack: Any, type_: FieldType, value: Any) -> bytes:
    if type_ is _DATE:
        try:
            value = millis_from_date(value)
        except TypeError as exc:
            raise EncodeError("DATE field needs an aware datetime or int milliseconds") from exc
    try:
        return pack(type_, value)  # type: ignore[no-any-return]
    except (struct.error, OverflowError, TypeError) as exc:
        raise EncodeError(f"{value!r} cannot be encoded as {type_.name}: {exc}") from exc


def _variable_payload(type_: FieldType, value: Any) -> bytes:
    if type_ is _URI:
        return _text(value)
    if type_ is _BYTES_T:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise EncodeError(f"BYTEARRAY needs bytes, not {type(value).__name__}")
        return bytes(value)
    if type_ is _ARRAY:
        return _encode_array(value)
    raise EncodeError(f"unknown field type {type_!r}")


def _encode_array(elements: Any) -> bytes:
    """ARRAY payload: per element ``type:u8 [len:u16] value`` (the original's ArrayType)."""
    out: list[bytes] = []
    for element in elements:
        type_, value = element.type, element.value
        pack = _PACK_FIXED.get(type_)
        if pack is not None:
            out.append(_fixed(pack, type_, value))
        elif type_ is _BOOLEAN:
            out.append(_TRUE if value else _FALSE)
        elif type_ is _UDEF_T:
            out.append(_UDEF)
        else:
            if type_ is _FRAME:
                if not isinstance(value, DataFrame):
                    raise EncodeError("FRAME element of an ARRAY needs a DataFrame")
                payload = _encode_fields(value._fields)
            elif type_ is _STRING:
                payload = _text(value)
            else:
                payload = _variable_payload(type_, value)
            if len(payload) > 0xFFFF:
                raise EncodeError(
                    f"ARRAY element {type_.name} of {len(payload)} bytes exceeds the u16 length"
                )
            out.append(_TYPE_LEN16(type_, len(payload)) + payload)
    return b"".join(out)
