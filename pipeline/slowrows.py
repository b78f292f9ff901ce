"""The helper process of the JVM reader: full-decoder rows for the bodies its fast path leaves.

``python -m pipeline.slowrows`` reads requests on stdin and answers on stdout, until stdin ends:

    request   count (u32 BE), then count x [length (u32 BE), body]
    answer    count x [length (u32 BE), JSON]

Each JSON answer is :func:`pipeline.rows.slow_row` of the body as
``{"t": [MID, RID, GRP, RPY, TYP, CMD, ENC, MSG, SRC, TGT, CLR, TRC], "i": [RCD, FLG, XPY, PRI],
"p": payload, "m": [[name, text], ...]}`` (nulls where absent). A body that fails to decode
(larger than 16 MiB) answers ``{"e": "reason"}``.
"""

from __future__ import annotations

import struct
import sys
from typing import BinaryIO

import orjson

from bus.errors import BusError
from pipeline.rows import HEADER_INTS, HEADER_TEXT, slow_row

__all__ = ["answer", "main"]

_U32 = struct.Struct(">I")


def answer(body: bytes) -> bytes:
    """The JSON answer for one body."""
    try:
        row = slow_row(body)
    except BusError as exc:
        return orjson.dumps({"e": str(exc)})
    return orjson.dumps(
        {
            "t": [row[name] for name in HEADER_TEXT],
            "i": [row[name] for name in HEADER_INTS],
            "p": row["payload"],
            "m": row["payload_map"],
        },
        option=orjson.OPT_PASSTHROUGH_SUBCLASS,
    )


def _exactly(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    return data if data is not None and len(data) == size else None


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    """Answer requests from ``source`` on ``sink`` until ``source`` ends."""
    while True:
        head = _exactly(source, 4)
        if head is None:
            return
        (count,) = _U32.unpack(head)
        answers = []
        for _ in range(count):
            size = _exactly(source, 4)
            body = _exactly(source, _U32.unpack(size)[0]) if size is not None else None
            if body is None:
                return
            answers.append(answer(body))
        sink.write(b"".join(_U32.pack(len(a)) + a for a in answers))
        sink.flush()


def main() -> None:
    """Serve stdin to stdout."""
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
