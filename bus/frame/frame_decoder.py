"""The pure-Python decoder of data frames (PROTOCOL.md 1) and the :class:`Limits` it keeps.

:func:`reference_decode` is what :func:`bus.frame.codec.decode` runs without the C accelerator, and
what the accelerator runs when its fast path meets anything unusual: every failure is a
:class:`~bus.errors.DecodeError` with the byte offset and the reason. The wire format is drawn
in :mod:`bus.frame.codec`'s docstring.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from bus.errors import DecodeError
from bus.frame.enums import FieldType
from bus.frame.frame import DataFrame, Field
from bus.frame.scalars import date_from_millis

__all__ = ["DEFAULT_LIMITS", "FIELD_TYPES", "MAX_DEPTH", "Limits", "reference_decode"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What :func:`bus.frame.codec.decode` accepts before it refuses the input (a
    :class:`DecodeError`).

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
#: The field types by type code.
FIELD_TYPES = tuple(FieldType)
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
# Decoded fields by their bytes: header fields (TYP=RQS, ENC=FRAM, GRP=...) repeat from message
# to message. Only fields of at most _FIELD_CACHE_SPAN bytes whose value is immutable (not FRAME,
# not ARRAY); Fields are immutable tuples, so sharing one is invisible.
_FIELD_CACHE: dict[bytes, Field] = {}
_FIELD_CACHE_MAX = 4096
_FIELD_CACHE_SPAN = 40


class _Budget:
    """How many more fields the decoder may create (Limits.max_fields)."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def reference_decode(
    data: bytes | bytearray | memoryview, limits: Limits = DEFAULT_LIMITS
) -> DataFrame:
    """Decode a whole input as one frame (``bus.frame.codec.decode``; the pure-Python reference).

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
    types = FIELD_TYPES
    sizes = _SIZES
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
            value: Any = _fixed_value(code, data, pos)
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


def _fixed_value(code: int, data: bytes, pos: int) -> Any:
    """The value of a fixed-width field of type ``code`` whose bytes start at ``pos``."""
    if code in _UNPACK:
        return _UNPACK[code](data, pos)[0]
    if code == 14:
        return 0 < data[pos] < 128  # Java: signed byte > 0
    if code == 15:
        return date_from_millis(_S64(data, pos)[0])
    return None


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
            value: Any = _fixed_value(code, data, pos)
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
        elements.append(new(Field, ("", FIELD_TYPES[code], value)))
    return tuple(elements)
