"""Values with an explicit field type: ``typed(3, FieldType.U8)`` and the helpers ``U8(3)`` ...

A plain Python value travels as the type inferred from it (:func:`bus.frame.frame.infer_type`); a
:class:`Typed` value travels as the type it names. Also here: :func:`Utf8` and
:func:`read_utf8`, for STRING values a peer writes in UTF-8 (PROTOCOL.md 1.3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bus.errors import DecodeError
from bus.frame.enums import FieldType

__all__ = [
    "HELPER_NAMES",
    "U8",
    "U16",
    "U32",
    "U64",
    "S8",
    "S16",
    "S32",
    "S64",
    "Array",
    "Float32",
    "Typed",
    "Uri",
    "Utf8",
    "read_utf8",
    "typed",
]


@dataclass(frozen=True, slots=True)
class Typed:
    """A value with an explicit field type, for ``add()``, ``frame[name] = ...`` and dicts."""

    type: FieldType
    value: Any

    def __repr__(self) -> str:
        return f"{HELPER_NAMES.get(self.type, self.type.name)}({self.value!r})"


def typed(value: Any, type: FieldType) -> Typed:
    """Mark ``value`` to travel as ``type`` instead of the inferred type.

    Args:
        value: the value; checked against the type when it enters a frame.
        type: the field type to use.

    Returns:
        A :class:`Typed` wrapper accepted wherever a value is.
    """
    return Typed(FieldType(type), value)


def S8(value: int) -> Typed:
    """``value`` as a signed 8-bit field."""
    return Typed(FieldType.S8, value)


def U8(value: int) -> Typed:
    """``value`` as an unsigned 8-bit field."""
    return Typed(FieldType.U8, value)


def S16(value: int) -> Typed:
    """``value`` as a signed 16-bit field."""
    return Typed(FieldType.S16, value)


def U16(value: int) -> Typed:
    """``value`` as an unsigned 16-bit field."""
    return Typed(FieldType.U16, value)


def S32(value: int) -> Typed:
    """``value`` as a signed 32-bit field."""
    return Typed(FieldType.S32, value)


def U32(value: int) -> Typed:
    """``value`` as an unsigned 32-bit field."""
    return Typed(FieldType.U32, value)


def S64(value: int) -> Typed:
    """``value`` as a signed 64-bit field."""
    return Typed(FieldType.S64, value)


def U64(value: int) -> Typed:
    """``value`` as an unsigned 64-bit field."""
    return Typed(FieldType.U64, value)


def Float32(value: float) -> Typed:
    """``value`` as a 32-bit IEEE float field (rounded to float32 precision)."""
    return Typed(FieldType.FLOAT, value)


def Uri(value: str) -> Typed:
    """``value`` as a URI field (Latin-1 text, like STRING)."""
    return Typed(FieldType.URI, value)


def Utf8(text: str) -> Typed:
    """``text`` as a STRING field whose bytes are UTF-8, for a peer that reads values as UTF-8.

    The seed writes STRING values in Latin-1, and so does busgate; the Java original writes them
    in the JVM's default charset, UTF-8 on every JDK from 18 (PROTOCOL.md 1.3). The value is
    held in the frame as the Latin-1 reading of those bytes (``"é"`` is ``"\xc3\xa9"``), so it
    goes over the wire, through the broker and the journal unchanged; read it back with
    :func:`read_utf8`.
    """
    return Typed(FieldType.STRING, text.encode("utf-8").decode("latin-1"))


def read_utf8(value: str) -> str:
    """The text of a STRING value whose bytes a peer wrote in UTF-8 (see :func:`Utf8`).

    Raises:
        DecodeError: the value's bytes are not UTF-8 (it was written in Latin-1, as the seed says).
    """
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError as exc:
        raise DecodeError(f"value is not UTF-8 text: {exc}") from exc


def Array(values: Iterable[Any]) -> Typed:
    """``values`` as an ARRAY field: unnamed elements, each typed by inference or ``Typed``."""
    return Typed(FieldType.ARRAY, list(values))


#: The helper that builds a value of each type, as a frame's repr shows it.
HELPER_NAMES = {
    FieldType.S8: "S8",
    FieldType.U8: "U8",
    FieldType.S16: "S16",
    FieldType.U16: "U16",
    FieldType.S32: "S32",
    FieldType.U32: "U32",
    FieldType.S64: "S64",
    FieldType.U64: "U64",
    FieldType.FLOAT: "Float32",
    FieldType.URI: "Uri",
    FieldType.ARRAY: "Array",
}
