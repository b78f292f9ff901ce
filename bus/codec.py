"""Binary encoding of data frames, byte for byte as the original Java DataFrame (PROTOCOL.md 1).

A frame is its fields concatenated, with no header and no count::

    field   = namelen:u8  name:namelen bytes (UTF-8)  type:u8  value
    value   = fixed-size big-endian bytes             (numbers, BOOLEAN, DATE; UDEF: none)
            | length:u32  length bytes                (FRAME, BYTEARRAY, STRING, URI, ARRAY)
    element = type:u8  [length:u16 for variable types]  value       (inside an ARRAY)

:func:`encode` and :func:`decode` are pure functions (sans-I/O). :func:`decode` reads the whole
input as one frame; every failure is a :class:`~bus.errors.DecodeError` with the byte offset and
the reason, and :class:`Limits` bounds what a peer can make us allocate.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Protocol

from bus import frame as frame_module
from bus.accelerators import accelerator
from bus.enums import FieldType
from bus.errors import DecodeError, EncodeError
from bus.frame import DataFrame, Field
from bus.scalars import date_from_millis, millis_from_date

__all__ = [
    "Limits",
    "accelerated",
    "accelerator_available",
    "decode",
    "encode",
    "encode_field",
    "use_accelerator",
]


@dataclass(frozen=True, slots=True)
class Limits:
    """What :func:`decode` accepts before it refuses the input with a :class:`DecodeError`.

    Attributes:
        max_size: largest input in bytes (default 16 MiB).
        max_depth: deepest nesting of frames and arrays inside the top frame (default 32;
            values above ``MAX_DEPTH`` = 500 count as 500, so decoding never recurses deeper).
        max_fields: most fields and array elements in the whole frame, nested ones included
            (default 100 000).
    """

    max_size: int = 16 * 1024 * 1024
    max_depth: int = 32
    max_fields: int = 100_000


DEFAULT_LIMITS: Limits = Limits()
MAX_DEPTH = 500

# Fixed value sizes by type code; -1 marks a variable type (u32 length, u16 in arrays).
_SIZES = (-1, 0, -1, -1, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 8, -1, -1)
_TYPES = tuple(FieldType)
_NAMES = tuple(t.name for t in FieldType)

_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
# Value decoders of the numeric types, by type code.
_UNPACK = {
    4: struct.Struct(">b").unpack_from,
    5: struct.Struct(">B").unpack_from,
    6: struct.Struct(">h").unpack_from,
    7: struct.Struct(">H").unpack_from,
    8: struct.Struct(">i").unpack_from,
    9: struct.Struct(">I").unpack_from,
    10: struct.Struct(">q").unpack_from,
    11: struct.Struct(">Q").unpack_from,
    12: struct.Struct(">f").unpack_from,
    13: struct.Struct(">d").unpack_from,
}
_S64 = struct.Struct(">q").unpack_from

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

# Decoded fields by their bytes: header fields (TYP=RQS, ENC=FRAM, GRP=...) repeat from message
# to message. Only fields of at most _FIELD_CACHE_SPAN bytes whose value is immutable (not FRAME,
# not ARRAY); Fields are immutable tuples, so sharing one is invisible.
_FIELD_CACHE: dict[bytes, Field] = {}
_FIELD_CACHE_MAX = 4096
_FIELD_CACHE_SPAN = 40

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


# Encoding ------------------------------------------------------------------------------------


def _reference_encode(frame: DataFrame) -> bytes:
    """Encode a frame to its binary form (``encode``; the pure-Python reference).

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


# Decoding ------------------------------------------------------------------------------------


class _Budget:
    """How many more fields the decoder may create (Limits.max_fields)."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def _reference_decode(
    data: bytes | bytearray | memoryview, limits: Limits = DEFAULT_LIMITS
) -> DataFrame:
    """Decode a whole input as one frame (``decode``; the pure-Python reference).

    A frame has no end marker, so every byte of ``data`` belongs to it: bytes after the last
    complete field are read as another field, and raise :class:`DecodeError` if they do not
    form one (PROTOCOL.md 1.5).

    Args:
        data: the frame's bytes.
        limits: size, depth and field-count limits.

    Returns:
        The frame.

    Raises:
        DecodeError: the bytes are not a valid frame or exceed a limit; ``.offset`` is where.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    if len(data) > limits.max_size:
        raise DecodeError(f"frame of {len(data)} bytes exceeds max_size {limits.max_size}", 0)
    depth = min(limits.max_depth, MAX_DEPTH)
    budget = _Budget(limits.max_fields)
    try:
        fields = _decode_fields(data, 0, len(data), depth, budget)
    except RecursionError as exc:  # pragma: no cover - max_depth keeps recursion shallow
        raise DecodeError("frame nested too deeply", 0) from exc
    return DataFrame._trusted(fields)


def _truncated(what: str, need: int, pos: int, end: int) -> DecodeError:
    return DecodeError(f"truncated: {what} needs {need} bytes, {max(end - pos, 0)} left", pos)


def _decode_fields(data: bytes, pos: int, end: int, depth: int, budget: _Budget) -> list[Field]:
    fields: list[Field] = []
    append = fields.append
    new = tuple.__new__
    types = _TYPES
    sizes = _SIZES
    unpack = _UNPACK
    left = budget.left
    cache = _FIELD_CACHE
    while pos < end:
        start = pos
        if left <= 0:
            raise DecodeError("more fields than max_fields", start)
        left -= 1
        size = data[pos]
        pos += 1
        if pos + size >= end:
            raise _truncated("field name and type", size + 1, pos, end)
        # A short field of an immutable type is looked up by its bytes first (see
        # _FIELD_CACHE); `key` stays None when the field is not one.
        key = None
        code = data[pos + size]
        if 0 < code < 17:  # not FRAME (0), not ARRAY (17), not unknown
            stop = pos + size + 1  # the value's first byte
            if sizes[code] >= 0:
                stop += sizes[code]
            elif stop + 4 <= end:
                stop += 4 + _U32(data, stop)[0]
            else:
                stop = end + 1  # truncated length: the slow path below says so
            if stop <= end and stop - start <= _FIELD_CACHE_SPAN:
                key = data[start:stop]
                hit = cache.get(key)
                if hit is not None:
                    append(hit)
                    pos = stop
                    continue
        if size:
            try:
                name = data[pos : pos + size].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(f"field name is not UTF-8: {exc.reason}", pos) from exc
            pos += size
        else:
            name = ""
        code = data[pos]
        pos += 1
        if code > 17:
            raise DecodeError(f"unknown field type {code}", pos - 1)
        width = sizes[code]
        if width >= 0:
            if pos + width > end:
                raise _truncated(f"{_NAMES[code]} value", width, pos, end)
            if code in unpack:
                value: Any = unpack[code](data, pos)[0]
            elif code == 14:
                value = 0 < data[pos] < 128  # Java: signed byte > 0
            elif code == 15:
                value = date_from_millis(_S64(data, pos)[0])
            else:
                value = None
            pos += width
        else:
            if pos + 4 > end:
                raise _truncated(f"{_NAMES[code]} length", 4, pos, end)
            length = _U32(data, pos)[0]
            pos += 4
            stop = pos + length
            if stop > end:
                raise _truncated(f"{_NAMES[code]} value", length, pos, end)
            if code == 3 or code == 16:
                value = data[pos:stop].decode("latin-1")
            elif code == 0:
                if depth <= 0:
                    raise DecodeError("frames nested deeper than max_depth", start)
                budget.left = left
                value = DataFrame._trusted(_decode_fields(data, pos, stop, depth - 1, budget))
                left = budget.left
            elif code == 2:
                value = data[pos:stop]
            else:
                if depth <= 0:
                    raise DecodeError("arrays nested deeper than max_depth", start)
                budget.left = left
                value = _decode_array(data, pos, stop, depth - 1, budget)
                left = budget.left
            pos = stop
        field = new(Field, (name, types[code], value))
        append(field)
        if key is not None:
            if len(cache) >= _FIELD_CACHE_MAX:
                cache.clear()
            cache[key] = field
    budget.left = left
    return fields


def _decode_array(
    data: bytes, pos: int, end: int, depth: int, budget: _Budget
) -> tuple[Field, ...]:
    elements: list[Field] = []
    new = tuple.__new__
    while pos < end:
        start = pos
        if budget.left <= 0:
            raise DecodeError("more fields than max_fields", start)
        budget.left -= 1
        code = data[pos]
        pos += 1
        if code > 17:
            raise DecodeError(f"unknown field type {code} in ARRAY", start)
        width = _SIZES[code]
        if width >= 0:
            if pos + width > end:
                raise _truncated(f"ARRAY element {_NAMES[code]}", width, pos, end)
            if code in _UNPACK:
                value: Any = _UNPACK[code](data, pos)[0]
            elif code == 14:
                value = 0 < data[pos] < 128  # Java: signed byte > 0
            elif code == 15:
                value = date_from_millis(_S64(data, pos)[0])
            else:
                value = None
            pos += width
        else:
            if pos + 2 > end:
                raise _truncated(f"ARRAY element {_NAMES[code]} length", 2, pos, end)
            length = _U16(data, pos)[0]
            pos += 2
            stop = pos + length
            if stop > end:
                raise _truncated(f"ARRAY element {_NAMES[code]}", length, pos, end)
            if code == 3 or code == 16:
                value = data[pos:stop].decode("latin-1")
            elif code == 2:
                value = data[pos:stop]
            elif depth <= 0:
                raise DecodeError("frames nested deeper than max_depth", start)
            elif code == 0:
                value = DataFrame._trusted(_decode_fields(data, pos, stop, depth - 1, budget))
            else:
                value = _decode_array(data, pos, stop, depth - 1, budget)
            pos = stop
        elements.append(new(Field, ("", _TYPES[code], value)))
    return tuple(elements)


# The public functions and the optional C accelerator ------------------------------------------
#
# bus/_speedups.c is built by `pip install -e .` when a C compiler is present (an optional
# extension: without a compiler the install succeeds and this pure-Python code runs; so does
# BUSGATE_PURE_PYTHON=1). Its encode and decode give the same bytes and values; when their fast
# path meets anything unusual (bad input, nesting deeper than 48 levels) they run the reference
# functions above, which raise the documented errors with offsets and reasons.


class _Encode(Protocol):
    def __call__(self, frame: DataFrame, /) -> bytes: ...


class _Decode(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, limits: Limits = ...) -> DataFrame: ...


def _load_accelerator() -> Any:
    _speedups = accelerator("bus._speedups")
    if _speedups is None:
        return None
    try:
        _speedups.configure(
            Field,
            _TYPES,
            DataFrame,
            date_from_millis,
            millis_from_date,
            _reference_encode,
            _reference_decode,
            DEFAULT_LIMITS,
        )
    except ValueError:  # pragma: no cover - another bus.frame, or a Python it was not validated on
        return None
    _speedups.set_make_field(frame_module._make_field_reference)
    frame_module._fast_make_field = _speedups.make_field
    return _speedups


_fast: Any = _load_accelerator()

#: Encode a frame to its binary form; see :func:`_reference_encode` for the contract.
encode: _Encode = _fast.encode if _fast is not None else _reference_encode
#: Decode a whole input as one frame; see :func:`_reference_decode` for the contract.
decode: _Decode = _fast.decode if _fast is not None else _reference_decode
_enabled = _fast is not None


def accelerator_available() -> bool:
    """True when the C accelerator ``bus._speedups`` was built at install time."""
    return _fast is not None


def accelerated() -> bool:
    """True when :func:`encode` and :func:`decode` take the C accelerator's fast path."""
    return _enabled


def use_accelerator(enabled: bool = True) -> bool:
    """Turn the C accelerator's fast path on or off (the tests run both).

    Args:
        enabled: take the fast path when the accelerator was built.

    Returns:
        Whether the fast path is now in use.
    """
    global _enabled
    _enabled = bool(enabled) and _fast is not None
    if _fast is not None:
        _fast.set_enabled(_enabled)
    return _enabled
