"""Data-frame codec speed: encode+decode round trips of a typical request, next to orjson.

The message is what the broker routes all day: 8 header fields (MID, GRP, RPY, TYP, CMD, ENC,
XPY, FLG) and a nested payload of 5 fields. The reference is orjson ``dumps`` + ``loads`` of
the same message as a dict, in the same run. "x orjson" is our time over orjson's: 1.0 means
the binary codec costs as much CPU as orjson's JSON; lower is better.

Two workloads: the same message over and over, and a stream of 1000 distinct messages (new MID,
other payload values) so that caches of repeated fields do not flatter the figure.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import orjson

from bus.frame import codec
from bus.frame.codec import decode, encode
from bus.frame.frame import DataFrame
from bus.message.message import Message, decode_message, encode_message

__all__ = ["main", "typical_request"]


def typical_request(index: int = 0) -> Message:
    """The benchmark's message: 8 header fields and a 5-field payload (``index`` varies it)."""
    return Message.request(
        "demo.inventory",
        "reserve",
        {
            "sku": f"AB-{1234 + index}",
            "qty": 3 + index % 50,
            "price": 19.99 + index / 100,
            "rush": index % 2 == 0,
            "note": f"gift wrap #{index}",
        },
        reply_to="_INBOX.7f3a9c",
        xpy=1_767_225_600 + index,
        to_all=True,
        mid=f"7d444840-9dc0-11d1-b245-{index:012x}",
    )


def _rate(step: Callable[[], Any], seconds: float = 1.2) -> float:
    """Calls per second of ``step``: the best of five runs of ``seconds`` / 5 each."""
    batch = 1000
    best = 0.0
    for _ in range(5):
        count = 0
        started = time.perf_counter()
        deadline = started + seconds / 5
        while True:
            for _ in range(batch):
                step()
            count += batch
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, count / (now - started))
    return best


def _rows() -> list[tuple[str, int, float]]:
    message = typical_request()
    frame: DataFrame = message.frame
    as_dict = frame.to_dict()
    raw = encode(frame)
    json_raw = orjson.dumps(as_dict)
    assert decode(raw) == frame and orjson.loads(json_raw) == as_dict

    frames = [typical_request(i).frame for i in range(1000)]
    dicts = [f.to_dict() for f in frames]
    next_frame = itertools.cycle(frames).__next__
    next_dict = itertools.cycle(dicts).__next__

    def orjson_stream() -> None:
        orjson.loads(orjson.dumps(next_dict()))

    def frame_stream() -> None:
        decode(encode(next_frame()))

    return [
        (
            "orjson dumps+loads (reference)",
            len(json_raw),
            _rate(lambda: orjson.loads(orjson.dumps(as_dict))),
        ),
        ("frame encode+decode", len(raw), _rate(lambda: decode(encode(frame)))),
        ("orjson, 1000 distinct (reference)", len(json_raw), _rate(orjson_stream)),
        ("frame, 1000 distinct messages", len(raw), _rate(frame_stream)),
        (
            "message encode+decode (+ENC)",
            len(raw),
            _rate(lambda: decode_message(encode_message(message))),
        ),
        ("frame encode only", len(raw), _rate(lambda: encode(frame))),
        ("frame decode only", len(raw), _rate(lambda: decode(raw))),
    ]


def main() -> None:
    """Print round trips per second for our codec and for orjson, and the ratios."""
    implementations = ["C accelerator", "pure Python"] if codec.accelerator_available() else []
    if not implementations:
        implementations = ["pure Python (accelerator not built)"]
    for name in implementations:
        codec.use_accelerator(name == "C accelerator")
        try:
            rows = _rows()
        finally:
            codec.use_accelerator(True)
        print(f"-- {name}")
        print(
            f"{'round trip of a typical request':36} {'bytes':>6} {'per second':>12} "
            f"{'x orjson':>9}"
        )
        for label, size, rate in rows:
            reference = rows[2][2] if "distinct" in label else rows[0][2]
            print(f"{label:36} {size:6d} {rate:12,.0f} {reference / rate:9.2f}")
        print(
            f"ratio, frame encode+decode CPU / orjson CPU: {rows[0][2] / rows[1][2]:.2f} "
            f"(same message), {rows[2][2] / rows[3][2]:.2f} (1000 distinct messages)\n"
        )
