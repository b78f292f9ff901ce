"""``gateway/websocket/ws_frames.py``: frames built once are the frames the websockets library
reads."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import TypeVar, cast

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from gateway.websocket.ws_frames import FrameCache, Outbox, server_frame

_T = TypeVar("_T")


def _run(step: Generator[None, None, _T]) -> _T:
    """Run one of websockets' parsing coroutines over data already fed (it must not wait)."""
    try:
        next(step)
    except StopIteration as done:
        return cast(_T, done.value)
    raise AssertionError("the parser wants more bytes than were written")


def _read(data: bytes) -> list[Frame]:
    """Parse server frames as a websockets client does (mask=False: a client refuses masked
    frames from a server)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames = []
    while not _run(reader.at_eof()):
        frames.append(_run(Frame.parse(reader.read_exact, mask=False, max_size=None)))
    return frames


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65_535, 65_536, 70_000])
@pytest.mark.parametrize("text", [True, False])
def test_a_frame_of_any_length_reads_back_as_sent(size: int, text: bool) -> None:
    payload = b"x" * size
    (frame,) = _read(server_frame(payload, text=text))
    assert frame.opcode == (Opcode.TEXT if text else Opcode.BINARY)
    assert frame.fin and frame.data == payload


def test_frames_written_together_read_back_in_order() -> None:
    frames = [server_frame(str(n).encode(), text=True) for n in range(100)]
    assert [f.data for f in _read(b"".join(frames))] == [str(n).encode() for n in range(100)]


def test_the_cache_frames_an_object_once_and_text_without_its_nul() -> None:
    cache = FrameCache()
    data = b'{"event":"hi"}\x00'
    first = cache.frame(data, text=True)
    assert cache.frame(data, text=True) is first  # the next client gets the same bytes
    (frame,) = _read(first)
    assert (frame.opcode, frame.data) == (Opcode.TEXT, b'{"event":"hi"}')
    other = b'{"type":"a/b","size":2}\x00hi'
    (frame,) = _read(cache.frame(other, text=False))
    assert (frame.opcode, frame.data) == (Opcode.BINARY, other)


async def test_an_outbox_keeps_order_refuses_past_its_limit_and_wakes_its_sender() -> None:
    outbox: Outbox[int] = Outbox(3)
    getter = asyncio.create_task(outbox.get())
    await asyncio.sleep(0)
    assert not getter.done()  # nothing yet: the sender waits
    assert outbox.put(1) and outbox.put(2) and outbox.put(3)
    assert await getter == 1
    assert outbox.put(4)
    assert not outbox.put(5)  # full: the client is too slow
    outbox.put_last(0)  # a close marker still goes in, after what is queued, the oldest dropped
    assert [await outbox.get() for _ in range(3)] == [3, 4, 0]
