"""kill -9 of the broker mid-stream: clients reconnect and no request is left hanging.

The broker runs as a child process (``busgate broker``); the test kills it with SIGKILL while a
requester keeps 8 requests in flight, starts it again on the same port, and checks that every
request either got its own answer or failed with a clear error, and that subscriptions and
consumers came back.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from bus.asyncio.client import Client, connect
from bus.errors import DisconnectedError, NoRespondersError, RequestTimeout
from tests.conftest import OFFICES, BrokerProcess

WAIT = 15.0
TOTAL = 400
KILL_AT = 120
IN_FLIGHT = 8


async def _connect(url: str, name: str) -> Client:
    return await connect(url, name, OFFICES[name], backoff_initial=0.05, backoff_max=0.3)


async def _echo(client: Client) -> None:
    consumer = await client.consume("work")
    async for request in consumer:
        await client.send(request.ack({"n": request.payload["n"]}))


async def test_kill_9_mid_stream(subprocess_broker: BrokerProcess) -> None:
    url = subprocess_broker.url
    service = await _connect(url, "bob")
    serving = asyncio.create_task(_echo(service))
    requester = await _connect(url, "alice")
    events = await requester.subscribe("after.*")
    outcomes: Counter[str] = Counter()
    answered_after_restart = 0
    restarted = asyncio.Event()

    async def one(n: int) -> None:
        nonlocal answered_after_restart
        try:
            reply = await requester.request("work", "echo", {"n": n}, timeout=5.0)
        except (DisconnectedError, NoRespondersError, RequestTimeout) as exc:
            outcomes[type(exc).__name__] += 1
            return
        assert reply.payload["n"] == n  # its own answer, never another request's
        outcomes["answered"] += 1
        if restarted.is_set():
            answered_after_restart += 1

    async def crash() -> None:
        subprocess_broker.kill()
        await asyncio.sleep(0.3)
        await asyncio.to_thread(subprocess_broker.restart)
        restarted.set()

    semaphore = asyncio.Semaphore(IN_FLIGHT)
    crasher: asyncio.Task[None] | None = None

    async def limited(n: int) -> None:
        async with semaphore:
            await one(n)

    async with asyncio.timeout(60):
        tasks = []
        for n in range(TOTAL):
            if n == KILL_AT:
                crasher = asyncio.create_task(crash())
            tasks.append(asyncio.create_task(limited(n)))
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
        assert crasher is not None
        await crasher
        await requester.wait_connected(WAIT)
        await service.wait_connected(WAIT)
        # After the dust settles, everything works again, subscriptions included.
        for n in range(TOTAL, TOTAL + 20):
            await one(n)
        await service.publish("after.restart", {"ok": True})
        assert (await events.get(WAIT)).grp == "after.restart"

    assert sum(outcomes.values()) == TOTAL + 20  # every request accounted for
    assert outcomes["answered"] >= KILL_AT - IN_FLIGHT  # all before the crash but those in flight
    assert answered_after_restart >= 20
    assert requester.reconnects >= 1 and service.reconnects >= 1
    serving.cancel()
    await requester.close()
    await service.close()
