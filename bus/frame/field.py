"""One field of a data frame (PROTOCOL.md section 1): the :class:`Field` tuple, finding a field
by name in a list of them (:func:`find_name`, in C when the accelerator was built) and a field's
value as a user reads it (:func:`plain`).

:mod:`bus.frame.frame` builds and checks fields and keeps them in a
:class:`~bus.frame.frame.DataFrame`; it
re-exports what is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from bus.accelerators import PURE_PYTHON_ENV, pure_python_requested
from bus.frame.enums import FieldType

__all__ = ["Field", "find_name", "plain"]


def _find_name_reference(fields: list[Field], name: object) -> int:
    index = 0
    for item in fields:
        if item[0] == name:
            return index
        index += 1
    return -1


# find_name(fields, name): the index of the first field named `name`, or -1. Reading by name
# is on every hot path, so the codec's optional C accelerator does it when it was built.
find_name: Callable[[list[Field], object], int]
try:
    if pure_python_requested():
        raise ImportError(PURE_PYTHON_ENV)
    from bus.native._speedups import find_name
except ImportError:  # no C compiler at install time, or BUSGATE_PURE_PYTHON
    find_name = _find_name_reference


class Field(NamedTuple):
    """One field of a frame: its name (``""`` when unnamed), its type and its value.

    The value is the Python form of the type: ``int`` for the integer types, ``float`` for
    FLOAT and DOUBLE, ``str`` for STRING and URI, ``bytes`` for BYTEARRAY, ``bool``, ``None``
    for UDEF, an aware UTC ``datetime`` (millisecond precision) for DATE (an ``int`` of
    milliseconds for an instant outside years 1..9999), a :class:`~bus.frame.frame.DataFrame` for
    FRAME, and a tuple of unnamed :class:`Field` elements for ARRAY.
    """

    name: str
    type: FieldType
    value: Any


def plain(field: Field) -> Any:
    """The value of ``field`` as a user reads it: an ARRAY becomes a list of element values."""
    if field.type is FieldType.ARRAY:
        return [plain(element) for element in field.value]
    return field.value
