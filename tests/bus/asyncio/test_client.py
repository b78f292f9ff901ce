"""The asyncio client against the real broker (``bus/client.py``, PROTOCOL.md 5.8)."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bus.asyncio.client import Backoff, Client, connect
from bus.broker import Broker, BrokerConfig
from bus.errors import (
    BufferFullError,
    ClosedError,
    ConfigError,
    ConnectError,
    DisconnectedError,
    EncodeError,
    NakError,
    RequestTimeout,
)
from bus.frame.enums import CloseReason
from bus.frame.frame import DataFrame
from bus.message.message import Message
from tests.conftest import MANAGERS, OFFICES, MakeClient

pytestmark = [pytest.mark.transports, pytest.mark.loops]  # broker and NATS, each on both loops

WAIT = 10.0


async def _answer_all(client: Client, group: str) -> None:
    consumer = await client.consume(group)
    async for request in consumer:
        if request.cmd == "fail":
            await client.send(request.nak("it failed", 409, {"why": "asked to"}))
        elif request.cmd != "ignore":
            await client.send(request.ack({"x": request.payload.get("x")}))


@pytest.fixture
async def service(make_client: MakeClient) -> AsyncIterator[Client]:
    """A client answering group ``svc``: echo x, NAK 409 on ``fail``, silence on ``ignore``."""
    client = await make_client(name="bob")
    task = asyncio.create_task(_answer_all(client, "svc"))
    await asyncio.sleep(0)
    yield client
    task.cancel()


async def test_request_returns_the_ack(service: Client, client: Client) -> None:
    reply = await client.request("svc", "echo", {"x": 41}, timeout=WAIT)
    assert reply.typ == "ACK" and reply.payload["x"] == 41


async def test_arguments_may_be_keywords(service: Client, client: Client) -> None:
    reply = await client.request("svc", "echo", x=42, timeout=WAIT)
    assert reply.payload["x"] == 42
    merged = await client.request("svc", "echo", {"x": 1, "y": 2}, x=43, timeout=WAIT)
    assert merged.payload["x"] == 43
    streamed = [r async for r in client.request_stream("svc", "echo", x=44, timeout=WAIT)]
    assert [r.payload["x"] for r in streamed] == [44]
    with pytest.raises(ConfigError):
        await client.request("svc", "echo", DataFrame({"x": 1}), x=2)


async def test_a_nak_raises_with_its_msg_and_rcd(service: Client, client: Client) -> None:
    with pytest.raises(NakError) as caught:
        await client.request("svc", "fail", timeout=WAIT)
    assert (caught.value.msg, caught.value.rcd) == ("it failed", 409)
    assert caught.value.response is not None and caught.value.response.payload["why"] == "asked to"


def _nested(levels: int) -> dict[str, Any]:
    """A dict ``levels`` frames deep (itself the first)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"in": value}
    return value


async def test_a_payload_nested_beyond_max_depth_is_refused_at_once(
    service: Client, client: Client
) -> None:
    """Issue 30 item 7: a request nested past max_depth timed out after its timeout with
    nothing logged (the service's client cannot read it and drops it; HTTP says 400 at once).
    The client refuses it before sending, naming the limit; what receivers read still goes."""
    fits = _nested(31)  # x is level 2 of the message: its innermost frame at level 32
    reply = await client.request("svc", "echo", {"x": fits}, timeout=WAIT)
    assert reply.payload["x"].to_dict() == fits
    started = time.monotonic()
    with pytest.raises(EncodeError, match=r"max_depth \(32 levels\)"):
        await client.request("svc", "echo", {"x": _nested(32)}, timeout=WAIT)
    with pytest.raises(EncodeError, match=r"max_depth \(32 levels\)"):
        await client.publish("deep.event", {"x": _nested(32)})
    assert time.monotonic() - started < 2  # at once, not after the timeout
    assert (await client.request("svc", "echo", {"x": 1}, timeout=WAIT)).payload["x"] == 1


async def test_no_answer_raises_request_timeout(service: Client, client: Client) -> None:
    with pytest.raises(RequestTimeout) as caught:
        await client.request("svc", "ignore", timeout=0.2)
    assert caught.value.group == "svc"


async def test_a_request_nobody_takes_is_refused_to_its_reply_group(
    make_client: MakeClient, client: Client
) -> None:
    # A Kestrel client names a group in RPY, not an inbox: the broker sends its "no responders"
    # there; on NATS the request was published without a reply subject, and lost unheard.
    replies = await (await make_client(name="bob")).consume("replies.kestrel")
    request = Message.request("nobody.home", "echo", {"x": 1}, reply_to="replies.kestrel")
    await client.send(request)
    nak = await replies.get(WAIT)
    assert (nak.typ, nak.rid, nak.rcd, nak.msg) == ("NAK", request.mid, 503, "no responders")
    # mail to a post office nobody holds: NAK 404 to the reply group, as for a request
    mail = Message.request("", "x", {}, reply_to="replies.kestrel")
    mail.grp = None
    mail.tgt = "nobody.box"
    await client.send(mail)
    nak = await replies.get(WAIT)
    assert (nak.typ, nak.rid, nak.rcd, nak.msg) == ("NAK", mail.mid, 404, "no post office 'nobody'")


async def test_a_stream_yields_a_nak_as_a_response(service: Client, client: Client) -> None:
    responses = [r async for r in client.request_stream("svc", "fail", timeout=WAIT)]
    assert [(r.typ, r.rcd) for r in responses] == [("NAK", 409)]


async def test_unsubscribe_ends_the_iterator(client: Client) -> None:
    sub = await client.subscribe("news")
    await client.publish("news", {"n": 1})
    await sub.get(WAIT)
    await sub.unsubscribe()
    assert [m async for m in sub] == []


async def test_credentials_in_the_url(broker: Broker) -> None:
    client = await connect(f"bus://carol:{OFFICES['carol']}@127.0.0.1:{broker.port}")
    assert client.name == "carol" and client.inbox.startswith("_INBOX.")
    await client.close()


async def test_bad_urls_and_unreachable_brokers() -> None:
    with pytest.raises(ConfigError):
        await connect("http://127.0.0.1:1")
    with pytest.raises(ConnectError):
        await connect("bus://127.0.0.1:1", "alice", "x", connect_timeout=2.0)


async def test_a_publish_that_cannot_travel_raises_and_sends_nothing(
    make_client: MakeClient,
) -> None:
    client = await make_client()
    sub = await (await make_client(name="bob")).subscribe("checked.*")
    with pytest.raises(EncodeError):
        await client.publish("checked.bad", {"value": object()})
    await client.publish("checked.good", DataFrame({"n": 1}))
    await client.publish("checked.none")
    first, second = await sub.get(WAIT), await sub.get(WAIT)
    assert (first.grp, first.payload["n"]) == ("checked.good", 1)
    assert second.grp == "checked.none" and second.payload == DataFrame()
    assert sub.pending() == 0


async def test_a_closed_client_refuses_to_work(client: Client) -> None:
    await client.close()
    with pytest.raises(ClosedError):
        await client.publish("x", {})
    with pytest.raises(ClosedError):
        await client.subscribe("x")


# --- losing the link ----------------------------------------------------------------------------

Restartable = Callable[[], Awaitable[Broker]]


@pytest.fixture
async def restartable() -> AsyncIterator[tuple[Broker, Restartable]]:
    """A broker and a function that starts a new one on the same port."""
    brokers: list[Broker] = []
    config = BrokerConfig(port=0, offices=OFFICES, managers=MANAGERS)
    first = Broker(config)
    await first.start()
    brokers.append(first)

    async def restart() -> Broker:
        again = Broker(BrokerConfig(port=first.port, offices=OFFICES, managers=MANAGERS))
        await again.start()
        brokers.append(again)
        return again

    yield first, restart
    for broker in brokers:
        await broker.stop(timeout=2.0)


async def _client(broker: Broker, name: str = "alice", **kwargs: object) -> Client:
    return await connect(
        f"bus://127.0.0.1:{broker.port}",
        name,
        OFFICES[name],
        backoff_initial=0.02,
        backoff_max=0.1,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_reconnect_restores_subscriptions_and_consumers(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, restart = restartable
    client = await _client(broker)
    sub = await client.subscribe("sensor.*")
    task = asyncio.create_task(_answer_all(client, "svc"))
    await asyncio.sleep(0)
    await broker.stop()
    await restart()
    await client.wait_connected(WAIT)
    other = await _client(broker, "bob")
    await other.publish("sensor.temp", {"c": 1})
    assert (await sub.get(WAIT)).payload["c"] == 1
    assert (await other.request("svc", "echo", {"x": 7}, timeout=WAIT)).payload["x"] == 7
    assert client.reconnects == 1
    task.cancel()
    await other.close()
    await client.close()


async def test_sends_wait_in_a_bounded_buffer_while_disconnected(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, restart = restartable
    client = await _client(broker, buffer_size=3)
    sub = await client.subscribe("buffered")
    await broker.stop()
    with pytest.raises(EncodeError, match="max_depth"):  # refused now, not at the reconnection
        await client.send(Message.event("buffered", {"x": _nested(32)}))
    for n in range(3):  # it took no room in the buffer
        await client.publish("buffered", {"n": n})
    with pytest.raises(BufferFullError):
        await client.publish("buffered", {"n": 3})
    await restart()
    assert [(await sub.get(WAIT)).payload["n"] for _ in range(3)] == [0, 1, 2]
    await client.close()


async def test_a_request_in_flight_fails_clearly_when_the_link_drops(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, _ = restartable
    service = await _client(broker, "bob")
    task = asyncio.create_task(_answer_all(service, "svc"))
    client = await _client(broker)
    pending = asyncio.create_task(client.request("svc", "ignore", timeout=WAIT))
    await asyncio.sleep(0.1)  # sent and consumed, never answered
    await broker.stop()
    with pytest.raises(DisconnectedError) as caught:
        await pending
    assert caught.value.close_reason is CloseReason.SERVER_SHUTDOWN
    task.cancel()
    await service.close()
    await client.close()


async def test_a_request_made_while_disconnected_is_answered_after_reconnecting(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, restart = restartable
    client = await _client(broker)  # it serves its own requests: consumers come back first
    task = asyncio.create_task(_answer_all(client, "svc"))
    await asyncio.sleep(0)
    await broker.stop()
    pending = asyncio.create_task(client.request("svc", "echo", {"x": 5}, timeout=WAIT))
    await asyncio.sleep(0.05)
    await restart()
    assert (await pending).payload["x"] == 5
    task.cancel()
    await client.close()


def _running() -> list[asyncio.Task[object]]:
    """The tasks still running besides the test's own."""
    this = asyncio.current_task()
    return [task for task in asyncio.all_tasks() if task is not this and not task.done()]


async def test_closing_a_client_while_it_reconnects_leaves_nothing_running(
    restartable: tuple[Broker, Restartable],
) -> None:
    # "Task was destroyed but it is pending! ... bus-reconnect": a client's reconnection must
    # end with close(), whether it waits between attempts or is in the middle of one.
    broker, _ = restartable
    before = set(_running())
    one, other = await _client(broker), await _client(broker, "bob")
    port = broker.port
    await broker.stop()
    async with asyncio.timeout(WAIT):
        while one.connected or other.connected:
            await asyncio.sleep(0.01)
    accepted: list[asyncio.StreamWriter] = []

    def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # and never answers: the attempt waits for a greeting

    mute = await asyncio.start_server(silent, "127.0.0.1", port)
    try:
        async with asyncio.timeout(WAIT):
            while not accepted:  # one of them is in an attempt, the other one may be too
                await asyncio.sleep(0.01)
        await one.close()
        await other.close()
    finally:
        mute.close()
        for writer in accepted:
            writer.close()
    # The loop's own handling of the silent server's connections (asyncio's selector loop runs
    # each accept in a task that ends an iteration later) is not the client's.
    left = [
        task
        for task in _running()
        if task not in before and "_accept_connection" not in repr(task.get_coro())
    ]
    assert not left, left


async def test_without_reconnect_a_lost_link_ends_everything(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, _ = restartable
    client = await _client(broker, reconnect=False)
    sub = await client.subscribe("x")
    await broker.stop()
    with pytest.raises(DisconnectedError):
        await sub.get(WAIT)
    with pytest.raises(ClosedError):
        await client.publish("x", {})


async def test_a_request_declared_safe_is_sent_again_after_a_drop(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, restart = restartable
    client = await _client(broker)  # serves itself: its consumer comes back before the resend
    consumer = await client.consume("idem")
    seen: list[str] = []

    async def serve() -> None:
        async for request in consumer:
            seen.append(request.mid or "")
            if len(seen) > 1:  # the first attempt is lost with the link
                await client.send(request.ack({"attempt": len(seen)}))

    task = asyncio.create_task(serve())
    pending = asyncio.create_task(client.request("idem", "get", timeout=WAIT, retry=True))
    while not seen:
        await asyncio.sleep(0.01)
    await broker.stop()
    await restart()
    assert (await pending).payload["attempt"] == 2
    assert len(set(seen)) == 2  # two sends, each its own MID
    task.cancel()
    await client.close()


# --- the reconnection schedule (sans-I/O) --------------------------------------------------------


def test_backoff_doubles_up_to_the_maximum_within_the_upper_half() -> None:
    schedule = Backoff(0.5, 5.0)
    highs = [schedule.next_delay(lambda low, high: high) for _ in range(7)]
    assert highs == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    schedule.reset()
    lows = [schedule.next_delay(lambda low, high: low) for _ in range(7)]
    assert lows == [0.25, 0.5, 1.0, 2.0, 2.5, 2.5, 2.5]


def test_backoff_is_jittered_and_stays_within_its_bounds() -> None:
    draws = random.Random(7)
    delays = []
    for _ in range(200):
        schedule = Backoff(0.5, 5.0)
        delays.append([schedule.next_delay(draws.uniform) for _ in range(6)])
    for step, ceiling in enumerate([0.5, 1.0, 2.0, 4.0, 5.0, 5.0]):
        column = [row[step] for row in delays]
        assert all(ceiling / 2 <= delay <= ceiling for delay in column)
        assert len(set(column)) == len(column)  # clients that lost one broker spread out


def test_backoff_starts_over_after_a_reset_and_survives_a_long_outage() -> None:
    schedule = Backoff(0.1, 3.0)
    for _ in range(5000):  # days of failed attempts: no overflow, still the maximum
        assert schedule.next_delay() <= 3.0
    assert schedule.ceiling() == 3.0
    schedule.reset()
    assert schedule.ceiling() == 0.1


@pytest.mark.parametrize(("initial", "maximum"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_a_bad_backoff_is_refused(initial: float, maximum: float) -> None:
    with pytest.raises(ConfigError):
        Backoff(initial, maximum)


async def test_the_schedule_climbs_while_down_and_starts_over_once_reconnected(
    restartable: tuple[Broker, Restartable],
) -> None:
    broker, restart = restartable
    client = await _client(broker)
    await broker.stop()
    async with asyncio.timeout(WAIT):
        while client.backoff_schedule.attempt < 3:  # three attempts failed: nobody listens
            await asyncio.sleep(0.01)
    assert not client.connected
    await restart()
    await client.wait_connected(WAIT)
    assert client.backoff_schedule.attempt == 0 and client.reconnects == 1
    await client.close()


_PUBLISH_AND_EXIT = """
import asyncio, sys
from bus.asyncio import connect

async def main():
    client = await connect(sys.argv[1])
    for n in range(int(sys.argv[2])):
        await client.publish("burst.tick", {"n": n, "text": "x" * 100})
    await client.close()

asyncio.run(main())
"""


async def test_what_a_process_publishes_before_it_closes_and_exits_arrives_whole(
    make_client: MakeClient, bus_url: str
) -> None:
    # A program that publishes a burst, closes and exits must not lose the burst's tail: close
    # used to return while the tail still sat in the socket's buffer, and the exit dropped it.
    # Then (seen in CI on a loaded machine) close gave up on the receipts after one `timeout`
    # while they were still coming, and failed thousands of events the broker was still taking.
    listener = await make_client(name="listener")
    sub = await listener.subscribe("burst.*")
    count = 20_000
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PUBLISH_AND_EXIT,
        bus_url.replace("bus://", "bus://sender@"),
        str(count),
    )

    async def read() -> list[int]:
        return [(await sub.get(timeout=30)).payload["n"] for _ in range(count)]

    got, status = await asyncio.gather(read(), asyncio.wait_for(process.wait(), 60))
    assert status == 0 and got == list(range(count)) and sub.dropped == 0
