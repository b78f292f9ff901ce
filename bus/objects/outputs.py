"""What the Object System router asks of its driver, sans-I/O: immutable output types
(named tuples: one is made per delivery, and a tuple is made in a third of a frozen
dataclass's time).

Every call of :class:`~bus.objects.router.Router` returns a list of outputs, in order:
:class:`Deliver` (these bytes to that connection) and :class:`Close` (close that connection).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Final, NamedTuple

from bus.objects.codec import BusinessObject

__all__ = ["Close", "Deliver", "Output"]


class Deliver(NamedTuple):
    """Send ``data`` (the wire bytes of ``obj``) to connection ``conn``."""

    conn: Hashable
    obj: BusinessObject
    data: bytes


class Close(NamedTuple):
    """Close connection ``conn`` (after the outputs before this one are written)."""

    conn: Hashable
    reason: str


Output = Deliver | Close

#: ``Deliver((conn, obj, data))`` without the named tuple's ``__new__`` (a Python function):
#: a third of the time, for the one made per delivery.
new_deliver: Final[Callable[[tuple[Hashable, BusinessObject, bytes]], Deliver]] = functools.partial(
    tuple.__new__, Deliver
)
