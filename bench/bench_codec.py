"""Data-frame codec speed: encode+decode round trips of a typical request, next to orjson.

The message is what the broker routes all day: 8 header fields (MID, GRP, RPY, TYP, CMD, ENC,
XPY, FLG) and a nested payload of 5 fields. The reference is orjson ``dumps`` + ``loads`` of
the same message as a dict, in the same run. The ratio is our time over orjson's (1.0 means the
binary codec costs as much CPU as orjson's JSON; lower is better).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from bus.codec import decode, encode
from bus.frame import DataFrame
from bus.message import Message, decode_message, encode_message

__all__ = ["main", "typical_request"]


def typical_request() -> Message:
    """The benchmark's message: 8 header fields and a 5-field payload."""
    return Message.request(
        "demo.inventory",
        "reserve",
        {"sku": "AB-1234", "qty": 3, "price": 19.99, "rush": True, "note": "gift wrap"},
        reply_to="_INBOX.7f3a9c",
        xpy=1_767_225_600,
        to_all=True,
        mid="7d444840-9dc0-11d1-b245-5ffdce74fad2",
    )


def _rate(step: Callable[[], Any], seconds: float = 1.5) -> float:
    """Calls per second of ``step``, best of three runs of about ``seconds`` / 3 each."""
    batch = 1000
    best = 0.0
    for _ in range(3):
        count = 0
        started = time.perf_counter()
        deadline = started + seconds / 3
        while True:
            for _ in range(batch):
                step()
            count += batch
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, count / (now - started))
    return best


def main() -> None:
    """Print round trips per second for our codec and for orjson, and the ratio."""
    message = typical_request()
    frame: DataFrame = message.frame
    as_dict = frame.to_dict()
    raw = encode(frame)
    json_raw = orjson.dumps(as_dict)
    assert decode(raw) == frame and orjson.loads(json_raw) == as_dict

    rows = [
        (
            "orjson dumps+loads (reference)",
            len(json_raw),
            _rate(lambda: orjson.loads(orjson.dumps(as_dict))),
        ),
        ("frame encode+decode", len(raw), _rate(lambda: decode(encode(frame)))),
        ("message encode+decode", len(raw), _rate(lambda: decode_message(encode_message(message)))),
        ("frame encode only", len(raw), _rate(lambda: encode(frame))),
        ("frame decode only", len(raw), _rate(lambda: decode(raw))),
    ]
    reference = rows[0][2]
    print(f"{'round trip of a typical request':34} {'bytes':>6} {'per second':>12} {'x orjson':>9}")
    for label, size, rate in rows:
        print(f"{label:34} {size:6d} {rate:12,.0f} {reference / rate:9.2f}")
    print(f"ratio (frame encode+decode CPU / orjson CPU): {reference / rows[1][2]:.2f}")
