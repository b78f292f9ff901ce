"""The broker's memory is bounded, and comes back after a burst (bus/broker/server.py, link.py;
PROTOCOL.md 5.7).

Output waits per link up to ``max_queue_bytes`` and over all links up to
``max_total_queue_bytes`` (then the link holding the most is evicted); once a burst is over,
the broker gives the freed memory back to the system (``malloc_trim``). The RSS test runs the
real broker as a child process on uvloop, with publishers as fast as they can go.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import psutil
import pytest

from bus.asyncio.client import Client
from tests.conftest import OFFICES, BrokerProcess, MakeBroker, MakeClient

WAIT = 15.0
MB = 1024 * 1024

#: Publishes as fast as it can: argv url, secret, count, payload bytes.
_PUBLISHER = """
import asyncio, sys
from bus.asyncio.client import connect
async def main():
    client = await connect(sys.argv[1], "alice", sys.argv[2])
    pad = "x" * int(sys.argv[4])
    for i in range(int(sys.argv[3])):
        await client.publish("flood.x", {"i": i, "pad": pad})
    await client.flush()
    await client.close()
asyncio.run(main())
"""


def _stall(client: Client) -> None:
    """The client's process hangs: its socket takes nothing more."""
    client._transport._wire.transport.pause_reading()  # type: ignore[union-attr]


@pytest.mark.loops
async def test_the_links_queues_together_are_bounded_the_biggest_goes(
    make_broker: MakeBroker, make_client: MakeClient
) -> None:
    limit = 32 * MB
    # a stalled client reads no Pong: the broker's ping interval (which its clients take) is
    # long enough that neither stalled client drops its own link while the test runs on a
    # loaded machine (at 5 s, `late` did, in CI); the eviction is read on the broker's side
    broker = await make_broker(
        max_queue_bytes=256 * MB, max_total_queue_bytes=limit, ping_interval_ms=600_000
    )
    url = f"bus://127.0.0.1:{broker.port}"
    early = await make_client(url, "bob", backoff_initial=5.0)
    early_link = max(broker._links)  # the newest link is the client just connected
    await early.subscribe("flood")
    publisher = await make_client(url, "alice")
    _stall(early)

    async def burst() -> None:  # 20 MB; the sockets' buffers hold a few of them
        for i in range(2000):
            await publisher.publish("flood.x", {"i": i, "pad": "x" * 10_000})
            assert broker.queued_bytes() <= broker.queued_total <= limit + 20_000
        await publisher.flush()

    await burst()
    assert broker.stats["slow_consumers"] == 0 and broker.queued_total > 4 * MB
    late = await make_client(url, "bob", backoff_initial=5.0)
    late_link = max(broker._links)
    await late.subscribe("flood")
    _stall(late)
    await burst()  # both queue now, early more: together they pass the limit
    assert broker.stats["slow_consumers"] == 1  # one eviction was enough: the biggest's
    async with asyncio.timeout(WAIT):
        while early_link in broker._links:  # early's link went, not late's
            await asyncio.sleep(0.02)
    assert late_link in broker._links and late.connected
    assert 0 < broker.queued_total < limit


@pytest.mark.slow
async def test_memory_comes_back_after_a_burst_of_unthrottled_publishers(
    make_client: MakeClient,
) -> None:
    # Issue 30 item 12: publishers as fast as they could drove the broker's RSS to 278 MB,
    # and 189 MB stayed after every client left.
    broker = BrokerProcess()
    broker.start()
    assert broker.process is not None
    rss = psutil.Process(broker.process.pid).memory_info
    try:
        reader = await make_client(broker.url, "bob")
        reading = await reader.subscribe("flood")
        stalled = [await make_client(broker.url, "bob", reconnect=False) for _ in range(2)]
        for client in stalled:
            await client.subscribe("flood")
            _stall(client)
        start = rss().rss
        publishers = [
            subprocess.Popen(
                [sys.executable, "-c", _PUBLISHER, broker.url, OFFICES["alice"], "30000", "2000"]
            )
            for _ in range(2)
        ]
        peak = start
        while any(p.poll() is None for p in publishers):
            peak = max(peak, rss().rss)
            while reading.pending():  # a subscriber that keeps up
                await reading.get()
            await asyncio.sleep(0.05)
        assert all(p.returncode == 0 for p in publishers)
        for client in [reader, *stalled]:
            await client.close()
        assert peak - start > 80 * MB  # the burst was real: the queues held it
        deadline = time.monotonic() + 4 * WAIT
        while (after := rss().rss) > start + 24 * MB:  # every client has left
            assert time.monotonic() < deadline, (
                f"broker RSS {start / MB:.0f} MB before, {peak / MB:.0f} MB at the peak, "
                f"{after / MB:.0f} MB after every client left"
            )
            await asyncio.sleep(0.1)
        print(
            f"broker RSS: {start / MB:.0f} MB, peak {peak / MB:.0f} MB, after {after / MB:.0f} MB"
        )
    finally:
        broker.stop()
