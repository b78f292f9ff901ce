"""The Service helper when something waits: a handler that waits before it answers, a link that
cannot take the answer yet, the trace a handler sees either way (a real broker on a loopback
port, real clients; bus/asyncio/service.py answers the usual request at once, the rest by the
path these exercise)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bus.asyncio.client import Client
from bus.asyncio.service import Request, Service, ServiceError
from bus.asyncio.subscription import Subscription
from bus.broker import Broker
from bus.errors import NakError
from bus.message import trace as bus_trace
from bus.message.message import Message
from tests.conftest import MakeClient

pytestmark = [pytest.mark.transports, pytest.mark.loops]  # broker and NATS, each on both loops

WAIT = 10.0  # bound on every wait: nothing here can hang
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

Connect = Callable[[], Awaitable[Client]]


@pytest.fixture
def new_client(make_client: MakeClient) -> Connect:
    """An anonymous client of the test's bus (closed by ``make_client`` at the end)."""
    return lambda: make_client(name=None)


async def until_in_flight(svc: Service, count: int) -> None:
    """Wait until ``count`` of the service's requests are running (bounded by WAIT)."""
    async with asyncio.timeout(WAIT):
        while svc.in_flight < count:
            await asyncio.sleep(0.01)


def waiting_service(client: Client, gate: asyncio.Event) -> Service:
    svc = Service(client, "wait")

    @svc.command("now")
    async def now(req: Request) -> dict[str, Any]:
        return {"trace": bus_trace.current()}

    @svc.command("later")
    async def later(req: Request) -> dict[str, Any]:
        before = bus_trace.current()
        await gate.wait()
        return {"trace": before, "after": bus_trace.current()}

    @svc.command("refuse_later")
    async def refuse_later(req: Request) -> None:
        await gate.wait()
        raise ServiceError("not today", 409)

    @svc.command("break_later")
    async def break_later(req: Request) -> None:
        await gate.wait()
        raise RuntimeError("fuse blown")

    return svc


async def test_a_handler_sees_a_child_of_the_requests_trace_whether_it_waits_or_not(
    new_client: Connect,
) -> None:
    gate = asyncio.Event()
    svc = waiting_service(await new_client(), gate)
    await svc.start()
    caller = await new_client()
    bus_trace.use(PARENT)  # the caller's requests carry it (TRC)
    try:
        at_once = await caller.request("wait", "now", timeout=WAIT)
        waiting = asyncio.create_task(caller.request("wait", "later", timeout=WAIT))
        await until_in_flight(svc, 1)
        gate.set()
        waited = await asyncio.wait_for(waiting, WAIT)
    finally:
        bus_trace.use(None)
        await svc.stop()
    seen = at_once.payload["trace"]
    assert bus_trace.trace_id(seen) == bus_trace.trace_id(PARENT) and seen != PARENT
    before, after = waited.payload["trace"], waited.payload["after"]
    assert before == after  # the same context before and after the wait
    assert bus_trace.trace_id(before) == bus_trace.trace_id(PARENT)
    assert before not in (PARENT, seen)  # a child of its own per request
    assert at_once.trc == PARENT and waited.trc == PARENT  # the ACKs carry the request's trace
    assert bus_trace.current() is None  # nothing leaked into the caller's context


@pytest.mark.logs_tracebacks  # a handler fails on purpose: the service logs it
async def test_a_handler_that_fails_after_waiting_is_answered_with_its_nak(
    new_client: Connect,
) -> None:
    gate = asyncio.Event()
    svc = waiting_service(await new_client(), gate)
    await svc.start()
    caller = await new_client()
    calls = [
        asyncio.create_task(caller.request("wait", cmd, timeout=WAIT))
        for cmd in ("refuse_later", "break_later", "later")
    ]
    await until_in_flight(svc, 3)
    gate.set()
    refused, broken, fine = await asyncio.wait_for(
        asyncio.gather(*calls, return_exceptions=True), WAIT
    )
    await svc.stop()
    assert isinstance(refused, NakError) and (refused.rcd, refused.msg) == (409, "not today")
    assert isinstance(broken, NakError) and (broken.rcd, broken.msg) == (500, "fuse blown")
    assert isinstance(fine, Message) and fine.payload.to_dict() == {"trace": None, "after": None}
    assert (svc.handled, svc.failed, svc.in_flight) == (1, 2, 0)


@pytest.mark.broker_only  # the broker stops reading the service's link (NATS: not ours to stop)
async def test_answers_the_link_cannot_take_yet_all_arrive_once_it_drains(
    broker: Broker, new_client: Connect
) -> None:
    svc = Service(await new_client(), "echo")

    @svc.command("echo")
    async def echo(req: Request) -> dict[str, Any]:
        return req.args

    await svc.start()
    caller = await new_client()
    # The broker stops reading the service: its answers fill the socket, then its buffer.
    (number,) = broker.router.group_table["echo"].consumers
    service_link = broker._links[number]
    assert service_link.transport is not None
    service_link.transport.pause_reading()
    blob = "x" * (200 * 1024)
    calls = [
        asyncio.create_task(caller.request("echo", "echo", {"i": i, "blob": blob}, timeout=WAIT))
        for i in range(60)  # 12 MB of answers: more than the kernel and the link hold
    ]
    transport = svc.client.transport
    assert transport is not None
    async with asyncio.timeout(WAIT):
        while transport._wire is None or transport._wire.writable.is_set():  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
    assert not any(call.done() for call in calls)
    service_link.transport.resume_reading()
    answers = await asyncio.wait_for(asyncio.gather(*calls), WAIT)
    await svc.stop()
    assert [answer.payload["i"] for answer in answers] == list(range(60))
    assert all(answer.payload["blob"] == blob for answer in answers)
    assert (svc.handled, svc.failed, svc.in_flight) == (60, 0, 0)


async def test_next_ready_takes_what_is_queued_without_waiting() -> None:
    sub = Subscription(None, "consume", "g", 10)  # type: ignore[arg-type]  # no client needed
    assert sub.next_ready() is None
    first, second = Message.request("g", "a"), Message.request("g", "b")
    sub._put(first)
    sub._put(second)
    assert sub.next_ready() is first and sub.next_ready() is second
    assert sub.next_ready() is None
    sub._put(Message.request("g", "c"))
    sub._end()
    assert sub.next_ready() is not None  # what was queued before the end is still taken
    assert sub.next_ready() is None  # the end is left for the iterator to raise
    with pytest.raises(StopAsyncIteration):
        await sub.__anext__()
