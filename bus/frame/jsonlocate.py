"""Where in JSON text an offending value starts (:func:`locate`), so that a
:class:`~bus.errors.DecodeError` from :func:`bus.frame.jsonmap.from_json` (or the gateway's reading
of a
request body) can point at it. Only called on the error path: it scans the text by hand, after
the parser has refused it or a value found in it.
"""

from __future__ import annotations

import contextlib
import math

__all__ = ["locate"]

_WHITE = frozenset(" \t\r\n")


def locate(text: str, what: str, depth: int = 0) -> int | None:
    """Where in ``text`` (a character index) the first offending JSON value starts.

    Only called on the error path. ``what`` is ``"depth"`` (the first ``[`` or ``{`` at nesting
    level ``depth``, the top being 1), ``"integer"`` (the first integer outside -2**63..2**64-1),
    ``"float"`` (the first number beyond a double, ``1e400``),
    ``"latin1"`` (the first character above U+00FF), ``"empty-name"`` (the first object member
    named ``""``). ``None`` when nothing is found.
    """
    level = 0
    index, end = 0, len(text)
    while index < end:
        char = text[index]
        if char == '"':
            close = _string_end(text, index)
            if what == "latin1":
                for offset in range(index + 1, close):
                    if ord(text[offset]) > 0xFF:
                        return offset
            if what == "empty-name" and close == index + 1:
                after = close + 1
                while after < end and text[after] in _WHITE:
                    after += 1
                if after < end and text[after] == ":":
                    return index
            index = close + 1
            continue
        if char in "[{":
            level += 1
            if what == "depth" and level >= depth:
                return index
        elif char in "]}":
            level -= 1
        elif what in ("integer", "float") and (char == "-" or char.isdigit()):
            stop = index + 1
            while stop < end and (text[stop].isdigit() or text[stop] in ".eE+-"):
                stop += 1
            digits = text[index:stop].lstrip("-")
            if what == "float" and not digits.isdigit():
                with contextlib.suppress(ValueError):
                    if not math.isfinite(float(text[index:stop])):
                        return index
            elif digits.isdigit() and (
                len(digits) > 20 or not -(2**63) <= int(text[index:stop]) < 2**64
            ):
                return index
            index = stop
            continue
        index += 1
    return None


def _string_end(text: str, start: int) -> int:
    """The index of the quote that closes the string opening at ``start``."""
    index = start + 1
    while True:
        index = text.find('"', index)
        if index < 0:
            return len(text)
        backslashes = 0
        while text[index - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return index
        index += 1
