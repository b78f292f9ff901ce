"""The data frame: an ordered list of named, typed fields (seed 000, PROTOCOL.md section 1).

A :class:`DataFrame` reads like a mapping (``frame["CMD"]``) but keeps every field in order,
repeated names and unnamed fields (name ``""``) included, because the wire format does.
Each :class:`Field` carries its :class:`~bus.frame.enums.FieldType`, so a decoded frame encodes back
to the same bytes.

Python values get a type by inference (PROTOCOL.md 1.4)::

    None -> UDEF        bool -> BOOLEAN       float -> DOUBLE      str -> STRING
    int  -> U32 (0..2**32-1), else S64, else U64 (2**63..2**64-1)
    bytes, bytearray, memoryview -> BYTEARRAY  datetime -> DATE
    DataFrame, Mapping -> FRAME               list, tuple -> FRAME of unnamed fields

and an explicit type when wanted: ``typed(3, FieldType.U8)`` or ``U8(3)``.
Values are checked when they enter a frame, so an out-of-range number or text outside Latin-1
raises :class:`~bus.errors.EncodeError` at ``add()`` rather than later at ``encode()``.

The :class:`Field` tuple and :func:`find_name` live in :mod:`bus.frame.field`, the explicit types in
:mod:`bus.frame.typed`, the checks of names and scalar values in :mod:`bus.frame.scalars` and the
accelerator switch in :mod:`bus.accelerators`; this module re-exports what it exported before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from bus.accelerators import PURE_PYTHON_ENV, accelerator, pure_python_requested
from bus.errors import EncodeError
from bus.frame.enums import FieldType
from bus.frame.field import Field, find_name, plain

# Re-exported: the reference find_name, which tests compare the C one with, was written here.
from bus.frame.field import _find_name_reference as _find_name_reference
from bus.frame.scalars import (
    EPOCH,
    INTEGER_RANGES,
    boolean_value,
    bytes_value,
    check_name,
    date_value,
    float_value,
    integer_value,
    latin1_value,
)

# Re-exported: the DATE conversions were written here first (bus.frame.codec imported them from
# here).
from bus.frame.scalars import date_from_millis as date_from_millis
from bus.frame.scalars import millis_from_date as millis_from_date
from bus.frame.typed import (
    HELPER_NAMES,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    Array,
    Float32,
    Typed,
    Uri,
    Utf8,
    read_utf8,
    typed,
)

__all__ = [
    "EPOCH",
    "INTEGER_RANGES",
    "U8",
    "U16",
    "U32",
    "U64",
    "S8",
    "S16",
    "S32",
    "S64",
    "Array",
    "DataFrame",
    "Field",
    "Float32",
    "Typed",
    "Uri",
    "Utf8",
    "find_name",
    "infer_type",
    "make_field",
    "PURE_PYTHON_ENV",
    "plain",
    "accelerator",
    "pure_python_requested",
    "read_utf8",
    "typed",
]


# DataFrame.to_dict in C (bus.native._speedups.to_plain) when built; the method's body is the
# reference.
_speedups = accelerator("bus.native._speedups")
_fast_to_plain: Callable[[DataFrame], Any] | None = (
    None if _speedups is None else _speedups.to_plain
)


def infer_type(value: Any) -> FieldType:
    """The field type a plain Python value travels as (PROTOCOL.md 1.4).

    Raises:
        EncodeError: no field type holds this kind of value.
    """
    if value is None:
        return FieldType.UDEF
    if isinstance(value, bool):
        return FieldType.BOOLEAN
    if isinstance(value, int):
        # One Python int type, so we follow the original's rule for JSON numbers (a Java
        # Long): U32 when it fits, else S64; U64 only for what S64 cannot hold.
        if 0 <= value <= 0xFFFFFFFF:
            return FieldType.U32
        if -(2**63) <= value < 2**63:
            return FieldType.S64
        if 0 <= value < 2**64:
            return FieldType.U64
        raise EncodeError(f"integer {value} does not fit in 64 bits")
    if isinstance(value, str):
        return FieldType.STRING
    if isinstance(value, float):
        return FieldType.DOUBLE
    if isinstance(value, (DataFrame, Mapping, list, tuple)):
        return FieldType.FRAME
    if isinstance(value, (bytes, bytearray, memoryview)):
        return FieldType.BYTEARRAY
    if isinstance(value, datetime):
        return FieldType.DATE
    raise EncodeError(f"no field type for a value of type {type(value).__name__}")


def _frame(value: Any) -> DataFrame:
    if isinstance(value, DataFrame):
        return value
    if isinstance(value, Mapping):
        return DataFrame.from_dict(value)
    if isinstance(value, (list, tuple)):
        return DataFrame.from_list(value)
    raise EncodeError(f"FRAME needs a DataFrame, Mapping or list, not {type(value).__name__}")


def _array(value: Any) -> tuple[Field, ...]:
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise EncodeError(f"ARRAY needs a list of values, not {type(value).__name__}")
    return tuple(make_field("", item) for item in value)


_VARIABLE = frozenset(
    {FieldType.FRAME, FieldType.BYTEARRAY, FieldType.STRING, FieldType.URI, FieldType.ARRAY}
)


def normalize(value: Any, type_: FieldType) -> Any:
    """Check ``value`` against ``type_`` and return its canonical Python form.

    Raises:
        EncodeError: the value cannot travel as that type.
    """
    if value is None and type_ is not FieldType.UDEF:
        if type_ in _VARIABLE:
            # The Java original writes two zero bytes here (a U16 zero length), which its
            # own U32-length reader then misreads; we refuse rather than write that.
            raise EncodeError(f"None cannot travel as {type_.name}; use UDEF (PROTOCOL.md 1.3)")
        raise EncodeError(f"None cannot travel as {type_.name}")
    if type_ in INTEGER_RANGES:
        return integer_value(value, type_)
    if type_ is FieldType.STRING or type_ is FieldType.URI:
        return latin1_value(value, type_)
    if type_ is FieldType.FRAME:
        return _frame(value)
    if type_ is FieldType.UDEF:
        if value is not None:
            raise EncodeError(f"UDEF holds no value, got {type(value).__name__}")
        return None
    if type_ is FieldType.FLOAT or type_ is FieldType.DOUBLE:
        return float_value(value, type_)
    if type_ is FieldType.BOOLEAN:
        return boolean_value(value)
    if type_ is FieldType.BYTEARRAY:
        return bytes_value(value)
    if type_ is FieldType.DATE:
        return date_value(value)
    return _array(value)


#: The C accelerator's make_field (same fields, plain values only; set by bus.frame.codec).
_fast_make_field: Callable[..., Field] | None = None


def make_field(name: str, value: Any, type: FieldType | None = None) -> Field:
    """Build a checked :class:`Field` from a Python value.

    Args:
        name: the field name (``""`` for an unnamed field), at most 255 bytes in UTF-8.
        value: a plain value, a :class:`Typed` value or a :class:`Field` (its type is kept).
        type: the field type; inferred from the value when ``None``.

    Returns:
        The field, its value in canonical form.

    Raises:
        EncodeError: the name or the value cannot travel.
    """
    fast = _fast_make_field
    if fast is not None:
        return fast(name, value, type)
    return _make_field_reference(name, value, type)


def _make_field_reference(name: str, value: Any, type: FieldType | None = None) -> Field:
    """Build a checked :class:`Field` from a Python value (:func:`make_field`'s reference).

    Args:
        name: the field name (``""`` for an unnamed field), at most 255 bytes in UTF-8.
        value: a plain value, a :class:`Typed` value or a :class:`Field` (its type is kept).
        type: the field type; inferred from the value when ``None``.

    Returns:
        The field, its value in canonical form.

    Raises:
        EncodeError: the name or the value cannot travel.
    """
    name = check_name(name)
    if isinstance(value, Typed):
        type, value = (value.type if type is None else type), value.value
    elif isinstance(value, Field):
        type, value = (value.type if type is None else type), value.value
    if type is None:
        type = infer_type(value)
    elif not isinstance(type, FieldType):
        try:
            type = FieldType(type)
        except ValueError as exc:
            raise EncodeError(f"unknown field type {type!r}") from exc
    return Field(name, type, normalize(value, type))


class DataFrame:
    """An ordered list of fields that reads like a mapping.

    ``frame[name]`` is the value of the first field of that name (``KeyError`` if none);
    ``frame[name] = v`` replaces the first such field in place or appends one. Fields keep
    their order, repeated names and unnamed (``""``) fields, as on the wire.

    Args:
        data: a mapping of names to values, an iterable of :class:`Field`, or ``None``.
    """

    __slots__ = ("_fields",)

    def __init__(self, data: Mapping[str, Any] | Iterable[Field] | None = None) -> None:
        self._fields: list[Field] = []
        if data is None:
            return
        if isinstance(data, DataFrame):
            self._fields = list(data._fields)
        elif isinstance(data, Mapping):
            for name, value in data.items():
                self._fields.append(make_field(name, value))
        else:
            for item in data:
                if not isinstance(item, Field):
                    raise EncodeError(f"DataFrame needs Field items, not {type(item).__name__}")
                self._fields.append(make_field(item.name, item.value, item.type))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataFrame:
        """A frame with one field per key, in the mapping's order, types inferred or ``Typed``."""
        return cls(data)

    @classmethod
    def from_list(cls, values: Iterable[Any]) -> DataFrame:
        """A frame of unnamed fields, one per value (how a JSON array travels)."""
        frame = cls()
        frame._fields = [make_field("", value) for value in values]
        return frame

    @classmethod
    def _trusted(cls, fields: list[Field]) -> DataFrame:
        # For the decoder: fields already checked, list owned by the new frame.
        frame = cls.__new__(cls)
        frame._fields = fields
        return frame

    # Reading ---------------------------------------------------------------------------

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every field, in order."""
        return tuple(self._fields)

    def _find(self, name: object) -> int:
        """The index of the first field named ``name``, or -1."""
        return find_name(self._fields, name)

    def field(self, name: str) -> Field | None:
        """The first field named ``name``, or ``None``."""
        index = self._find(name)
        return self._fields[index] if index >= 0 else None

    def __getitem__(self, name: str) -> Any:
        index = self._find(name)
        if index < 0:
            raise KeyError(name)
        item = self._fields[index]
        return plain(item) if item.type is FieldType.ARRAY else item.value

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the first field named ``name``, or ``default``."""
        index = self._find(name)
        if index < 0:
            return default
        item = self._fields[index]
        return plain(item) if item.type is FieldType.ARRAY else item.value

    def get_all(self, name: str) -> list[Any]:
        """The values of every field named ``name``, in order."""
        return [plain(item) for item in self._fields if item.name == name]

    def __contains__(self, name: object) -> bool:
        return self._find(name) >= 0

    def __len__(self) -> int:
        return len(self._fields)

    def __iter__(self) -> Iterator[str]:
        return (item.name for item in self._fields)

    def names(self) -> list[str]:
        """Every field's name, in order (repeated and unnamed ones included)."""
        return [item.name for item in self._fields]

    def items(self) -> list[tuple[str, Any]]:
        """``(name, value)`` of every field, in order."""
        return [(item.name, plain(item)) for item in self._fields]

    @property
    def is_array(self) -> bool:
        """True when the frame has fields and none has a name (it maps to a JSON array)."""
        return bool(self._fields) and not any(item.name for item in self._fields)

    def to_dict(self) -> Any:
        """Plain Python data, following the JSON mapping (PROTOCOL.md 1.6).

        A frame whose fields are all unnamed becomes a list; otherwise a dict where the first
        field of a repeated name wins (as with ``frame[name]``; use :meth:`get_all` for the
        rest). Nested frames and arrays convert recursively.
        """
        if _fast_to_plain is not None:  # every framed payload a service or a client reads
            try:
                return _fast_to_plain(self)
            except TypeError:  # an unusual frame (or none configured): the reference below
                pass
        return self._to_dict_reference()

    def _to_dict_reference(self) -> Any:
        if self.is_array:
            return [_to_plain(item) for item in self._fields]
        result: dict[str, Any] = {}
        for item in self._fields:
            if item.name not in result:
                result[item.name] = _to_plain(item)
        return result

    # Writing ---------------------------------------------------------------------------

    def add(self, name: str, value: Any, type: FieldType | None = None) -> None:
        """Append a field (a repeated name is kept as another field).

        Args:
            name: the field name, ``""`` for an unnamed field.
            value: the value (plain, :class:`Typed` or :class:`Field`).
            type: the field type; inferred when ``None``.

        Raises:
            EncodeError: the name or the value cannot travel.
        """
        self._fields.append(make_field(name, value, type))

    def add_field(self, field: Field) -> None:
        """Append an already built field (checked like :meth:`add`)."""
        self._fields.append(make_field(field.name, field.value, field.type))

    def __setitem__(self, name: str, value: Any) -> None:
        new = make_field(name, value)
        index = self._find(name)
        if index >= 0:
            self._fields[index] = new
        else:
            self._fields.append(new)

    def __delitem__(self, name: str) -> None:
        kept = [item for item in self._fields if item.name != name]
        if len(kept) == len(self._fields):
            raise KeyError(name)
        self._fields = kept

    def remove(self, name: str) -> bool:
        """Remove every field named ``name``; True if there was one."""
        before = len(self._fields)
        self._fields = [item for item in self._fields if item.name != name]
        return len(self._fields) != before

    def copy(self) -> DataFrame:
        """A shallow copy: a new field list (nested frames are shared)."""
        return DataFrame._trusted(list(self._fields))

    # Comparing and showing -------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataFrame):
            return NotImplemented
        return self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if not self._fields:
            return "DataFrame()"
        if self.is_array:
            return f"DataFrame.from_list([{', '.join(_show(f) for f in self._fields)}])"
        seen: set[str] = set()
        repeated = False
        for item in self._fields:
            repeated = repeated or item.name in seen
            seen.add(item.name)
        if repeated:
            return f"DataFrame([{', '.join(repr(f) for f in self._fields)}])"
        return "DataFrame({" + ", ".join(f"{f.name!r}: {_show(f)}" for f in self._fields) + "})"


def _to_plain(item: Field) -> Any:
    if item.type is FieldType.FRAME:
        return item.value.to_dict()
    if item.type is FieldType.ARRAY:
        return [_to_plain(element) for element in item.value]
    return item.value


def _show(item: Field) -> str:
    """A value's repr, wrapped in its type helper when inference would pick another type."""
    if item.type is FieldType.ARRAY:
        return f"Array([{', '.join(_show(e) for e in item.value)}])"
    text = repr(item.value)
    try:
        inferred = infer_type(item.value)
    except EncodeError:  # pragma: no cover - values in a frame always infer
        inferred = None
    if inferred is item.type:
        return text
    if isinstance(item.value, float) and math.isnan(item.value):
        text = "float('nan')"
    helper = HELPER_NAMES.get(item.type)
    if helper is not None:
        return f"{helper}({text})"
    return f"typed({text}, FieldType.{item.type.name})"
