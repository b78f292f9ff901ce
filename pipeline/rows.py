"""One journal record's row through the full decoder: the reference every fast path matches.

Light on purpose (no numpy, no pyarrow): :mod:`pipeline.slowrows` imports it in the helper
process the JVM reader starts for the records its fast path does not take.
"""

from __future__ import annotations

from typing import Any

from bus.frame.frame import DataFrame
from bus.frame.jsonmap import to_json
from bus.message.message import decode_message

__all__ = ["HEADER_INTS", "HEADER_TEXT", "slow_row"]

#: The header text columns, in column order: CLR (the caller) and TRC (the W3C traceparent) of
#: PROTOCOL.md 5.11 last.
HEADER_TEXT = ("MID", "RID", "GRP", "RPY", "TYP", "CMD", "ENC", "MSG", "SRC", "TGT", "CLR", "TRC")
HEADER_INTS = ("RCD", "FLG", "XPY", "PRI")


def slow_row(raw: bytes) -> dict[str, Any]:
    """The body-dependent columns of one record through ``bus.message.message.decode_message``.

    Args:
        raw: the message body.

    Returns:
        ``MID .. TRC`` (text or None; CMD falls back to the payload's, ENC is how the body was
        read), ``RCD FLG XPY PRI`` (int or None), ``payload`` (Kestrel JSON text or None) and
        ``payload_map`` (list of (name, text) pairs, or None).
    """
    message = decode_message(raw)
    frame = message.frame
    row: dict[str, Any] = {}
    for name in HEADER_TEXT:
        value = frame.get(name)
        row[name] = None if value is None else str(value)
    row["CMD"] = message.cmd
    row["ENC"] = str(message.enc)
    for name in HEADER_INTS:
        value = frame.get(name)
        row[name] = value if isinstance(value, int) and not isinstance(value, bool) else None
    payload = frame.get("PLD")
    if isinstance(payload, DataFrame):
        row["payload"] = to_json(payload)
        row["payload_map"] = [(item.name, _map_text(item.value)) for item in payload.fields]
    else:
        row["payload"] = None if payload is None else to_json(DataFrame({"PLD": payload}))[7:-1]
        row["payload_map"] = None
    return row


def _map_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, DataFrame):
        return to_json(value)
    return to_json(DataFrame({"v": value}))[5:-1]
