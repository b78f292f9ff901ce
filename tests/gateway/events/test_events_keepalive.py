"""SSE keepalives from the one timer wheel (gateway.events.keepalives), on both loops: an idle
stream
still gets its ``: keepalive`` comment, events still flow after it, and a stream whose client
went away is still cleaned up (its listener, its count, its place in the wheel)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from gateway.events.keepalives import keepalives
from tests.gateway.conftest import GATEWAY_HTTP, Stack, eventually

#: The shared stack runs the gateway's own protocol: its SSE streams are answered there.
STACK_HTTP = GATEWAY_HTTP

pytestmark = [pytest.mark.stack_loops]  # the broker, on the standard loop and on uvloop


async def _subscribe(stack: Stack, types: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.settings.port)
    writer.write(f"GET /v1/subscribe?types={types} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await asyncio.wait_for(reader.readuntil(b": subscribed\n\n"), 10.0)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return reader, writer


async def _wheel_size(stack: Stack) -> int:
    """The streams waiting for their keepalive: in the lean streams' pass (one entry of the
    loop's wheel), or each its own entry (the route's ASGI stream)."""
    assert stack.server is not None
    lean = stack.server.config.app.lean_sse
    if lean is not None:
        return len(lean.quiet)
    return len(keepalives(stack.settings.sse_keepalive_interval))


async def test_an_idle_stream_gets_keepalives_and_then_its_events(stack: Stack) -> None:
    reader, writer = await _subscribe(stack, "idle.x")
    try:
        assert stack.settings.sse_keepalive_interval == 0.5
        async with asyncio.timeout(15):  # two, so the wheel puts it back after the first
            for _ in range(2):
                assert (await reader.readuntil(b"\n\n")).endswith(b": keepalive\n\n")
        client = await stack.bus_client()
        try:
            await client.publish("idle.x", {"n": 1})
        finally:
            await client.close()
        async with asyncio.timeout(15):
            while b"event: message" not in (block := await reader.readuntil(b"\n\n")):
                assert block.endswith(b": keepalive\n\n"), block  # nothing else meanwhile
        data = block.partition(b"data: ")[2].strip()
        assert json.loads(data)["payload"] == {"n": 1}
    finally:
        writer.close()


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked body (RFC 9112 7.1), its size line checked against its data."""
    size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
    data = await reader.readexactly(size + 2)
    assert data.endswith(b"\r\n"), data
    return data[:-2]


async def test_keepalives_the_wheel_writes_are_whole_chunks_between_the_events(
    stack: Stack,
) -> None:
    # Issue 35: the wheel writes an idle stream's keepalive to its connection itself (no
    # wake-up of the stream's task); each must still be one whole chunk of the response.
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.settings.port)
    writer.write(b"GET /v1/subscribe?types=chunk.x HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        async with asyncio.timeout(15):
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"transfer-encoding: chunked" in head.lower(), head
            assert (await _chunk(reader)).endswith(b": subscribed\n\n")
            assert [await _chunk(reader) for _ in range(2)] == [b": keepalive\n\n"] * 2
        client = await stack.bus_client()
        try:
            await client.publish("chunk.x", {"n": 1})
            async with asyncio.timeout(15):
                while (chunk := await _chunk(reader)) == b": keepalive\n\n":
                    pass
                assert chunk.startswith(b"id: ") and b"event: message\n" in chunk, chunk
                await client.publish("chunk.x", {"n": 2})  # the stream goes on after both
                while (chunk := await _chunk(reader)) == b": keepalive\n\n":
                    pass
                assert json.loads(chunk.partition(b"data: ")[2])["payload"] == {"n": 2}
        finally:
            await client.close()
    finally:
        writer.close()


async def test_streams_whose_clients_went_away_are_cleaned_up(stack: Stack) -> None:
    gateway = stack.gateway
    assert gateway is not None

    async def earlier_ones_closed() -> bool:  # the test before closed its stream: the
        return gateway.metrics.open_streams == 0  # gateway may not have seen it go yet

    await eventually(earlier_ones_closed, timeout=15)
    before = gateway.metrics.open_streams
    streams = [await _subscribe(stack, "gone.x") for _ in range(5)]
    try:

        async def all_open() -> bool:
            return gateway.metrics.open_streams == before + 5

        await eventually(all_open, timeout=15)
        assert await stack.run(_wheel_size(stack)) >= 5
    finally:
        for _, writer in streams:
            writer.transport.abort()  # gone without a word, as a crashed client

    async def all_closed() -> bool:
        return gateway.metrics.open_streams == before

    async def out_of_the_wheel() -> bool:
        return await stack.run(_wheel_size(stack)) == 0

    await eventually(all_closed, timeout=15)
    await eventually(out_of_the_wheel, timeout=15)
    # and the gateway still serves a new stream its keepalives
    reader, writer = await _subscribe(stack, "gone.x")
    try:
        async with asyncio.timeout(15):
            assert (await reader.readuntil(b"\n\n")).endswith(b": keepalive\n\n")
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _loop_wheel_entries(interval: float) -> int:
    return len(keepalives(interval))


async def test_keepalives_follow_the_interval_of_quiet_from_one_pass(stack: Stack) -> None:
    # Issue 35: the lean streams' keepalives are one entry of the loop's wheel (one pass writes
    # them all), and each stream still gets its comment once it was quiet for the interval:
    # never sooner, after the last keepalive or the last event alike.
    interval = stack.settings.sse_keepalive_interval
    loop = asyncio.get_running_loop()
    streams = [await _subscribe(stack, "pass.x") for _ in range(20)]
    try:
        assert await stack.run(_wheel_size(stack)) >= 20
        assert await stack.run(_loop_wheel_entries(interval)) == 1
        reader = streams[0][0]
        async with asyncio.timeout(15):
            times = []
            for _ in range(3):
                assert (await reader.readuntil(b"\n\n")).endswith(b": keepalive\n\n")
                times.append(loop.time())
            for other, _ in streams[1:]:  # every stream got its own
                assert (await other.readuntil(b"\n\n")).endswith(b": keepalive\n\n")
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert min(gaps) >= interval * 0.9, gaps  # a tick late at most, never early
        client = await stack.bus_client()
        try:
            await client.publish("pass.x", {"n": 1})
            async with asyncio.timeout(15):
                while b"event: message" not in await reader.readuntil(b"\n\n"):
                    pass
                event_at = loop.time()
                assert (await reader.readuntil(b"\n\n")).endswith(b": keepalive\n\n")
                assert loop.time() - event_at >= interval * 0.8  # quiet since the event
        finally:
            await client.close()
    finally:
        for _, writer in streams:
            writer.close()
