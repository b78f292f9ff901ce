"""``bench/fanout.py``'s frame reader: it counts every tick a server sent and nothing else, however
the socket cuts the bytes (the fan-out ratio is read from its count)."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode

from bench.fanout import Counter, FrameCounter

HEAD = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
BUSGATE_TICK = (
    b'{"type":"bus/bench.tick","id":"cb1540ec-658d-45fa-9801-1455288bab1d","route":["bus-bridge",'
    b'"a3d3d63d-0f86-4c33-9714-a5e461092d3c"],"size":22}\x00{"n":0,"text":"hello"}'
)
REFERENCE_TICK = b'{"type": "bench.tick", "n": 7}'
FRAMES = {
    "busgate tick": Frame(Opcode.BINARY, BUSGATE_TICK),  # 126..65535 bytes: a 16-bit length
    "reference tick": Frame(Opcode.TEXT, REFERENCE_TICK),  # under 126 bytes
    "longer tick": Frame(Opcode.BINARY, BUSGATE_TICK + b" " * 300),  # both length bytes used
    "large tick": Frame(Opcode.BINARY, BUSGATE_TICK + b" " * 70_000),  # a 64-bit length
    "other event": Frame(Opcode.TEXT, b'{"type": "bench.tock"}'),
    "ping": Frame(Opcode.PING, b'"bench.tick"'),  # a control frame is not a delivery
    "reply": Frame(Opcode.TEXT, b'{"event":"routing/subscribe/reply","routing-ids":[]}'),
}
TICKS = {"busgate tick", "reference tick", "longer tick", "large tick"}


def _read(names: list[str], cuts: list[int], awaiting_reply: bool) -> tuple[int, bool]:
    async def main() -> tuple[int, bool]:
        counter = Counter(expected=10**9)
        reader = FrameCounter(counter)
        replied = asyncio.get_running_loop().create_future() if awaiting_reply else None
        reader.replied = replied
        data = HEAD + b"".join(FRAMES[name].serialize(mask=False) for name in names)
        points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
        for start, stop in itertools.pairwise(points):
            reader.data_received(data[start:stop])
        assert reader.opened.done() and reader.opened.exception() is None
        return counter.count, replied is not None and replied.done()

    return asyncio.run(main())


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(FRAMES)), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=80_000), max_size=12),
)
def test_every_tick_is_counted_once_wherever_the_stream_is_cut(
    names: list[str], cuts: list[int]
) -> None:
    count, replied = _read(names, cuts, awaiting_reply=True)
    assert count == sum(name in TICKS for name in names)
    assert replied == ("reply" in names)


def test_a_refused_upgrade_fails_the_opening() -> None:
    async def main() -> None:
        reader = FrameCounter(Counter(expected=1))
        reader.data_received(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        assert isinstance(reader.opened.exception(), ConnectionError)

    asyncio.run(main())
