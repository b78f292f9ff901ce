"""Header fields read without decoding a message, and the writer's filter on them.

:func:`header_fields` scans a binary data frame's top-level fields (seed 000) or, failing that,
reads Latin-1 JSON (ENC=JSON), as Kestrel's decoder does; :class:`JournalFilter` decides which
messages the journal records from their GRP and TYP (PROTOCOL.md section 8).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

__all__ = ["JournalFilter", "header_fields"]

_FIXED_SIZES = {
    1: 0,  # UDEF
    4: 1,  # S8
    5: 1,  # U8
    6: 2,  # S16
    7: 2,  # U16
    8: 4,  # S32
    9: 4,  # U32
    10: 8,  # S64
    11: 8,  # U64
    12: 4,  # FLOAT
    13: 8,  # DOUBLE
    14: 1,  # BOOLEAN
    15: 8,  # DATE
}
_VARIABLE = frozenset({0, 2, 3, 16, 17})  # FRAME BYTEARRAY STRING URI ARRAY
_INT_FORMATS = {4: ">b", 5: ">B", 6: ">h", 7: ">H", 8: ">i", 9: ">I", 10: ">q", 11: ">Q"}


def _frame_fields(raw: bytes, wanted: frozenset[str]) -> dict[str, object] | None:
    """Top-level string/int fields of a binary data frame named in ``wanted`` (first wins).

    Returns ``None`` when ``raw`` is not a well-formed binary frame.
    """
    found: dict[str, object] = {}
    pos, size = 0, len(raw)
    while pos < size:
        namelen = raw[pos]
        pos += 1
        if pos + namelen + 1 > size:
            return None
        name = raw[pos : pos + namelen].decode("latin-1")
        ftype = raw[pos + namelen]
        pos += namelen + 1
        if ftype in _VARIABLE:
            if pos + 4 > size:
                return None
            (length,) = struct.unpack_from(">I", raw, pos)
            pos += 4
        elif ftype in _FIXED_SIZES:
            length = _FIXED_SIZES[ftype]
        else:
            return None
        if pos + length > size:
            return None
        if name in wanted and name not in found:
            if ftype in (3, 16):
                found[name] = raw[pos : pos + length].decode("latin-1")
            elif ftype in _INT_FORMATS:
                (found[name],) = struct.unpack_from(_INT_FORMATS[ftype], raw, pos)
        pos += length
    return found


def header_fields(raw: bytes, names: Iterable[str]) -> dict[str, object]:
    """Read the named top-level header fields of a message without decoding its payload.

    Binary frames (ENC=FRAM) are scanned field by field; anything else is tried as Latin-1 JSON
    (ENC=JSON), as Kestrel's decoder does. Only text and integer values are returned.

    Args:
        raw: the message's wire form.
        names: the header fields wanted (``"GRP"``, ``"TYP"``, ...).

    Returns:
        The fields found, by name (missing names are left out).
    """
    wanted = frozenset(names)
    found = _frame_fields(raw, wanted)
    if found is not None:
        return found
    try:
        value = orjson.loads(raw.decode("latin-1"))
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in wanted and isinstance(v, str | int)}


def _pattern_matches(pattern: str, group: str) -> bool:
    """The bus's subscription rule (PROTOCOL.md section 5): ``*`` one token, ``>`` the rest."""
    tokens, names = pattern.split("."), group.split(".")
    for index, token in enumerate(tokens):
        if token == ">":
            return len(names) > index
        if index >= len(names) or (token != "*" and token != names[index]):
            return False
    return len(names) == len(tokens)


@dataclass(frozen=True)
class JournalFilter:
    """Which messages the journal records.

    Attributes:
        groups: patterns on GRP, with the bus's subscription rules (``demo`` exact, ``sensor.*``
            one token, ``sensor.>`` one or more tokens, ``>`` everything); ``None``: every group.
        types: TYP values recorded (``{"RQS", "ACK"}``); ``None`` records every type.
    """

    groups: tuple[str, ...] | None = None
    types: frozenset[str] | None = None

    @property
    def everything(self) -> bool:
        """True when the filter lets every message through (no header scan needed)."""
        return self.groups is None and self.types is None

    def accepts(self, raw: bytes) -> bool:
        """Whether a message (in wire form) is to be recorded.

        Args:
            raw: the message bytes.

        Returns:
            True to record it.
        """
        if self.everything:
            return True
        fields = header_fields(raw, ("GRP", "TYP"))
        if self.types is not None and fields.get("TYP") not in self.types:
            return False
        if self.groups is not None:
            grp = fields.get("GRP")
            if not isinstance(grp, str):
                return False
            return any(_pattern_matches(pattern, grp) for pattern in self.groups)
        return True
