"""Where a read of the journal starts: a time (ISO 8601, epoch seconds, a duration ago) or a
sequence number, as the CLI's ``--since`` and the gateway's ``?since=`` take them. No I/O."""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["SINCE_HINT", "parse_since", "parse_time"]

#: What a start may be, for an error message.
SINCE_HINT = "give a sequence number (digits) or a time (ISO 8601, or 15m, 2h, 1d ago)"

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_time(text: str, now: float) -> float:
    """Read a time argument: ISO 8601, epoch seconds, or a duration before ``now``.

    Args:
        text: the argument.
        now: the current time, epoch seconds.

    Returns:
        Epoch seconds.

    Raises:
        ValueError: the text is none of those.
    """
    text = text.strip()
    match = _DURATION.match(text)
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if value < 0 or value != value:
            raise ValueError(f"{text!r} is not a time")
        return value
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def parse_since(text: str, now: float) -> tuple[int | None, float | None]:
    """A start: a journal sequence number (digits only) or a time (:func:`parse_time`).

    Returns:
        ``(sequence number, None)`` or ``(None, epoch seconds)``.

    Raises:
        ValueError: neither.
    """
    text = text.strip()
    if text.isdigit():
        return int(text), None
    return None, parse_time(text, now)
