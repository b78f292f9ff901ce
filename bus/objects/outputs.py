"""What the Object System router asks of its driver, sans-I/O: frozen output types.

Every call of :class:`~bus.objects.router.Router` returns a list of outputs, in order:
:class:`Deliver` (these bytes to that connection) and :class:`Close` (close that connection).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from bus.objects.codec import BusinessObject

__all__ = ["Close", "Deliver", "Output"]


@dataclass(frozen=True, slots=True)
class Deliver:
    """Send ``data`` (the wire bytes of ``obj``) to connection ``conn``."""

    conn: Hashable
    obj: BusinessObject
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close connection ``conn`` (after the outputs before this one are written)."""

    conn: Hashable
    reason: str


Output = Deliver | Close
