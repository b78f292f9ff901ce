"""Checks of field names and of the values of every field type but FRAME and ARRAY, and the
DATE conversions (PROTOCOL.md 1.2, 1.3).

Each ``*_value`` function takes what a user gave and returns its canonical Python form, or
raises :class:`~bus.errors.EncodeError` saying why it cannot travel as that type;
:func:`bus.frame.frame.normalize` picks the one for a field's type.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

from bus.errors import EncodeError
from bus.frame.enums import FieldType

__all__ = [
    "EPOCH",
    "INTEGER_RANGES",
    "boolean_value",
    "bytes_value",
    "check_name",
    "date_from_millis",
    "date_value",
    "float_value",
    "integer_value",
    "latin1_value",
    "millis_from_date",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Inclusive value ranges of the integer types (PROTOCOL.md 1.2).
INTEGER_RANGES: dict[FieldType, tuple[int, int]] = {
    FieldType.S8: (-(2**7), 2**7 - 1),
    FieldType.U8: (0, 2**8 - 1),
    FieldType.S16: (-(2**15), 2**15 - 1),
    FieldType.U16: (0, 2**16 - 1),
    FieldType.S32: (-(2**31), 2**31 - 1),
    FieldType.U32: (0, 2**32 - 1),
    FieldType.S64: (-(2**63), 2**63 - 1),
    FieldType.U64: (0, 2**64 - 1),
}

_FLOAT32 = struct.Struct(">f")
_MAX_NAME = 255


def check_name(name: str) -> str:
    """A field name as plain ``str``, at most 255 bytes in UTF-8 (raises ``EncodeError``)."""
    if type(name) is not str:
        if not isinstance(name, str):
            raise EncodeError(f"field name must be str, not {type(name).__name__}")
        name = str.__str__(name)
    if not name.isascii() or len(name) > _MAX_NAME:
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise EncodeError(f"field name {name!r} is not valid text (a lone surrogate)") from exc
        if size > _MAX_NAME:
            raise EncodeError(
                f"field name longer than {_MAX_NAME} bytes in UTF-8: {name[:40]!r}..."
            )
    return name


def latin1_value(value: Any, type_: FieldType) -> str:
    """A STRING or URI value: plain ``str`` of Latin-1 text (raises ``EncodeError``)."""
    if not isinstance(value, str):
        raise EncodeError(f"{type_.name} needs str, not {type(value).__name__}")
    text: str = value if type(value) is str else str.__str__(value)  # a StrEnum as plain text
    if not text.isascii():
        try:
            text.encode("latin-1")
        except UnicodeEncodeError as exc:
            bad = text[exc.start]
            raise EncodeError(
                f"text outside Latin-1 cannot travel as {type_.name}: "
                f"{bad!r} (U+{ord(bad):04X}) at index {exc.start}"
            ) from exc
    return text


def integer_value(value: Any, type_: FieldType) -> int:
    """A value of an integer type, within its range (raises ``EncodeError``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodeError(f"{type_.name} needs int, not {type(value).__name__}")
    low, high = INTEGER_RANGES[type_]
    if not low <= value <= high:
        raise EncodeError(f"{value} is out of range for {type_.name} ({low}..{high})")
    return int(value)


def float_value(value: Any, type_: FieldType) -> float:
    """A FLOAT (rounded to float32) or DOUBLE value (raises ``EncodeError``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EncodeError(f"{type_.name} needs float, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError as exc:
        raise EncodeError(f"{value} is too large for {type_.name}") from exc
    if type_ is FieldType.FLOAT:
        try:
            # Round to float32 now, so the value read back equals the value put in.
            number = _FLOAT32.unpack(_FLOAT32.pack(number))[0]
        except (OverflowError, struct.error) as exc:
            raise EncodeError(f"{value} is too large for FLOAT (float32)") from exc
    return number


def date_value(value: Any) -> datetime | int:
    """A DATE value: an aware UTC datetime in whole milliseconds, or an ``int`` of
    milliseconds outside years 1..9999 (raises ``EncodeError``)."""
    if isinstance(value, bool):
        raise EncodeError("DATE needs datetime or int milliseconds, not bool")
    if isinstance(value, int):
        low, high = INTEGER_RANGES[FieldType.S64]
        if not low <= value <= high:
            raise EncodeError(f"DATE {value} ms does not fit a signed 64-bit number")
        return date_from_millis(value)
    if not isinstance(value, datetime):
        raise EncodeError(f"DATE needs datetime or int milliseconds, not {type(value).__name__}")
    # A naive datetime is taken as UTC; DATE has millisecond precision (truncated).
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return date_from_millis(millis_from_date(value))


def millis_from_date(value: datetime | int) -> int:
    """Milliseconds since the Unix epoch (floor) of an aware datetime (an int is already that)."""
    if isinstance(value, int):
        return value
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def date_from_millis(millis: int) -> datetime | int:
    """The aware UTC datetime ``millis`` milliseconds after the Unix epoch.

    Java reads every 64-bit DATE (``new Date(ms)``); Python's ``datetime`` stops at years
    1..9999. An instant outside that range is kept as its milliseconds (an ``int``), so the
    frame is read whole and encodes back to the same bytes (PROTOCOL.md 1.3).
    """
    try:
        return EPOCH + timedelta(milliseconds=millis)
    except OverflowError:
        return millis


def bytes_value(value: Any) -> bytes:
    """A BYTEARRAY value as ``bytes`` (raises ``EncodeError``)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise EncodeError(f"BYTEARRAY needs bytes, not {type(value).__name__}")
    return bytes(value)


def boolean_value(value: Any) -> bool:
    """A BOOLEAN value (raises ``EncodeError``)."""
    if not isinstance(value, (bool, int)):
        raise EncodeError(f"BOOLEAN needs bool, not {type(value).__name__}")
    return bool(value)
