"""Lean SSE streams that resume from the journal (gateway/events/sse_resume.py), on both loops.

A client that comes back with a journal number in ``Last-Event-ID`` (or asks ``?since=``) is
answered in the gateway's HTTP protocol, like any other stream: no task or ASGI cycle while it
streams. What it must get is what the route's stream gives (PROTOCOL.md 9.5): exactly the
events it missed, then live ones, none twice (also through two patterns that both match), and
a replay longer than every queue and buffer in order, to a client that reads slowly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.events.sse_resume import ResumingStream
from tests.gateway.conftest import GATEWAY_HTTP, Stack, base_settings, eventually, running_stack
from tests.gateway.events.test_sse_lean import _body, _head, _streams, _tasks, opened, the_asgi_way

pytestmark = [pytest.mark.stack_loops]  # the broker, on the standard loop and on uvloop

QUEUE = 20  # events a stream holds for a client that does not read


@pytest.fixture(scope="module")
def stack(stack_loop: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = base_settings(sse_queue=QUEUE)
    journal = str(tmp_path_factory.mktemp("journal"))
    with running_stack(
        settings,
        demo=False,
        loop=stack_loop,
        http=GATEWAY_HTTP,
        journal=journal,
        journal_fsync="none",  # what resumes give, not the disk's speed
    ) as running:
        yield running


async def _confirmed(stack: Stack, type_: str, *payloads: dict[str, object]) -> list[int]:
    """Publish each, journaled: their sequence numbers."""
    client = await stack.bus_client()
    try:
        return [await client.publish(type_, p, confirm=True) or 0 for p in payloads]
    finally:
        await client.close()


def _events(body: bytes) -> list[tuple[int, int]]:
    """``(id, payload n)`` of each event of a de-chunked body."""
    found = []
    for block in body.split(b"\n\n"):
        if b"event: message" in block:
            fields = dict(line.split(b": ", 1) for line in block.split(b"\n"))
            found.append((int(fields[b"id"]), json.loads(fields[b"data"])["payload"]["n"]))
    return found


async def test_a_reconnection_gets_what_it_missed_then_live_events_once_in_the_protocol(
    stack: Stack,
) -> None:
    seqs = await _confirmed(stack, "res.a", *({"n": n} for n in range(5)))
    target = "/v1/subscribe?types=res.*,res.a"  # both patterns bring every res.a event
    since = f"Last-Event-ID: {seqs[1]}\r\n"
    async with opened(stack, target, since) as (reader, _):
        assert (await _head(reader)).startswith(b"HTTP/1.1 200 OK\r\n")
        missed = await _body(reader, 3)
        streams = await stack.run(_streams(stack))
        assert [type(s) for s in streams] == [ResumingStream]  # answered in the protocol
        assert await stack.run(_tasks(stack)) == 0  # no ASGI cycle, no task of its own
        live = await _confirmed(stack, "res.a", {"n": 5}, {"n": 6})
        rest = await _body(reader, 2)
        with the_asgi_way(stack):  # the route's stream of the same request
            async with opened(stack, target, since) as (asgi, _):
                await _head(asgi)
                reference = await _body(asgi, 5)
    assert missed.startswith(b"retry: 2000\n: subscribed\n\n")
    got = _events(missed + rest)
    assert got == list(zip([*seqs[2:], *live], range(2, 7), strict=True))  # no gap, none twice
    # the same events as the route's stream (which pattern's subscription brought an event
    # first, its header's RPL, may differ from one stream to the next)
    assert _events(reference) == got and reference.startswith(b"retry: 2000\n: subscribed\n\n")


async def test_a_replay_longer_than_every_queue_reaches_a_slow_client_whole_and_in_order(
    stack: Stack,
) -> None:
    # More events than the stream's queue (QUEUE) and the sockets' buffers hold: the replay
    # waits for the client instead of ending with the overflow error.
    pad = "x" * 8000
    client = await stack.bus_client()
    try:
        total = 400
        for n in range(total - 1):
            await client.publish("big.x", {"n": n, "pad": pad})
        last = await client.publish("big.x", {"n": total - 1, "pad": pad}, confirm=True)
    finally:
        await client.close()
    gateway = stack.gateway
    assert gateway is not None
    async with opened(stack, "/v1/subscribe?types=big.x&since=0", rcvbuf=4096) as (reader, _):
        assert (await _head(reader)).startswith(b"HTTP/1.1 200 OK\r\n")

        async def held_back() -> bool:  # the client reads nothing: the transport is full
            streams = await stack.run(_streams(stack))
            return bool(streams) and all(s.paused for s in streams)

        await eventually(held_back, timeout=15)
        parts, count = [], 0
        async with asyncio.timeout(60):
            while count < total:
                parts.append(part := await _body(reader, 1))
                count += part.count(b"event: message")
        body = b"".join(parts)
        got = _events(body)
        assert [n for _, n in got] == list(range(total))
        assert got[-1][0] == last and b"overflow" not in body

    async def none_left() -> bool:  # the client went: the stream and its subscriptions too
        return await stack.run(_streams(stack)) == [] and gateway.metrics.open_streams == 0

    await eventually(none_left, timeout=15)


async def _on_own(stack: Stack, pattern: str) -> tuple[int, int]:
    """``(streams fed by subscriptions of their own, the gateway's bus subscriptions of
    pattern)``, read in the gateway's loop."""
    gateway = stack.gateway
    assert gateway is not None and gateway.bridge.client is not None

    async def read() -> tuple[int, int]:
        client: Any = gateway.bridge.client
        return gateway.bridge.hub.resuming, len(client._subs.get(pattern, []))

    return await stack.run(read())


async def test_a_resumer_that_caught_up_moves_to_the_shared_subscription_and_misses_nothing(
    stack: Stack,
) -> None:
    # A browser that comes back with Last-Event-ID had a bus subscription of its own for as
    # long as it stayed: each reconnection after a gateway restart added one per browser, and
    # every event went to each of them. Once it has caught up, it shares the app's.
    before = await _confirmed(stack, "hand.x", *({"n": n} for n in range(200)))
    client = await stack.bus_client()
    try:
        since = f"Last-Event-ID: {before[49]}\r\n"  # 150 to catch up, while 200 more come live
        async with opened(stack, "/v1/subscribe?types=hand.x", since) as (reader, _):
            assert (await _head(reader)).startswith(b"HTTP/1.1 200 OK\r\n")
            for n in range(200, 400):  # published while it catches up and moves
                await client.publish("hand.x", {"n": n})
            last = await client.publish("hand.x", {"n": 400}, confirm=True)
            body = await _body(reader, 351)

            async def moved() -> bool:  # on the shared subscription alone
                return await _on_own(stack, "hand.x") == (0, 1)

            await eventually(moved, timeout=15)
            # A second resumer, now that the shared subscription runs: it moves at once.
            again = f"Last-Event-ID: {last}\r\n"
            async with opened(stack, "/v1/subscribe?types=hand.x", again) as (second, _):
                assert (await _head(second)).startswith(b"HTTP/1.1 200 OK\r\n")
                await eventually(moved, timeout=15)
                live = await _confirmed(stack, "hand.x", {"n": 401}, {"n": 402})
                body += await _body(reader, 2)
                both = await _body(second, 2)
    finally:
        await client.close()
    got = _events(body)
    assert [n for _, n in got] == list(range(50, 403))  # every event once, in order
    assert [seq for seq, _ in got][-3:] == [last, *live]
    assert [n for _, n in _events(both)] == [401, 402]


async def test_the_routes_resuming_stream_moves_to_the_shared_subscription_too(
    stack: Stack,
) -> None:
    # The route's stream (the ASGI way: HTTP/1.0, or an app that refreshes a JWKS) resumes
    # through the same hub, from a queue its task reads.
    seqs = await _confirmed(stack, "route.x", *({"n": n} for n in range(3)))
    with the_asgi_way(stack):
        target = "/v1/subscribe?types=route.x"
        async with opened(stack, target, f"Last-Event-ID: {seqs[0]}\r\n") as (reader, _):
            assert (await _head(reader)).startswith(b"HTTP/1.1 200 OK\r\n")
            body = await _body(reader, 2)

            async def moved() -> bool:
                return await _on_own(stack, "route.x") == (0, 1)

            await eventually(moved, timeout=15)
            live = await _confirmed(stack, "route.x", {"n": 3})
            body += await _body(reader, 1)
    assert _events(body) == [(seqs[1], 1), (seqs[2], 2), (live[0], 3)]
