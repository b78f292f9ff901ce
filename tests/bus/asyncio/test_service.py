"""The Service helper over a real broker on a loopback port, with real clients."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.directory import ServiceDirectory
from bus.asyncio.service import Request, Response, Service, ServiceError
from bus.broker import Broker, BrokerConfig
from bus.errors import BusError, ConfigError, NakError, NoRespondersError, RequestTimeout
from bus.frame.enums import Encoding
from bus.message.message import Message, MessageType

pytestmark = [pytest.mark.transports, pytest.mark.loops]  # broker and NATS, each on both loops

WAIT = 10.0  # bound on every wait: nothing here can hang

Connect = Callable[[], Awaitable[Client]]


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(BrokerConfig(port=0, open=True)) as running:
        yield running


@pytest.fixture
async def new_client(bus_url: str) -> AsyncIterator[Connect]:
    clients: list[Client] = []

    async def make() -> Client:
        client = await connect(bus_url)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def caller(new_client: Connect) -> Client:
    return await new_client()


async def started(svc: Service) -> Service:
    await svc.start()
    return svc


def math_service(client: Client, **kw: Any) -> Service:
    svc = Service(client, "math", **kw)

    @svc.command("add")
    async def add(req: Request) -> dict[str, Any]:
        return {"sum": req["a"] + req["b"]}

    @svc.command("divide")
    async def divide(req: Request) -> dict[str, Any]:
        return {"q": req["a"] / req["b"]}

    @svc.command("teapot")
    async def teapot(req: Request) -> None:
        raise ServiceError("I am a teapot", 418)

    @svc.command("answer")
    async def answer(req: Request) -> Response:
        return Response({"v": 42}, msg="found", rcd=200)

    @svc.command("bare")
    async def bare(req: Request) -> list[int]:
        return [1, 2, 3]

    return svc


async def test_a_command_is_answered_with_its_ack(new_client: Connect, caller: Client) -> None:
    svc = await started(math_service(await new_client()))
    ack = await caller.request("math", "add", {"a": 2, "b": 3}, timeout=WAIT)
    assert ack.typ == MessageType.ACK
    assert ack.payload.to_dict() == {"sum": 5}
    await svc.stop()


async def test_unknown_command_is_a_404_nak_listing_the_known_ones(
    new_client: Connect, caller: Client
) -> None:
    svc = await started(math_service(await new_client()))
    with pytest.raises(NakError) as info:
        await caller.request("math", "multiply", {"a": 1}, timeout=WAIT)
    assert info.value.rcd == 404
    assert "multiply" in info.value.msg
    for known in ("add", "divide", "teapot"):
        assert known in info.value.msg
    await svc.stop()


@pytest.mark.logs_tracebacks  # a handler fails on purpose: the service logs it
async def test_handler_error_is_a_500_nak_without_traceback(
    new_client: Connect, caller: Client
) -> None:
    svc = await started(math_service(await new_client()))
    with pytest.raises(NakError) as info:
        await caller.request("math", "divide", {"a": 1, "b": 0}, timeout=WAIT)
    assert info.value.rcd == 500
    assert info.value.msg == "division by zero"
    assert "Traceback" not in info.value.msg
    assert svc.failed == 1
    # the service keeps serving after a failure
    ack = await caller.request("math", "divide", {"a": 6, "b": 3}, timeout=WAIT)
    assert ack.payload["q"] == 2.0
    await svc.stop()


async def test_service_error_gives_its_own_msg_and_rcd(new_client: Connect, caller: Client) -> None:
    svc = await started(math_service(await new_client()))
    with pytest.raises(NakError) as info:
        await caller.request("math", "teapot", timeout=WAIT)
    assert (info.value.msg, info.value.rcd) == ("I am a teapot", 418)
    await svc.stop()


async def test_missing_argument_is_a_400_nak(new_client: Connect, caller: Client) -> None:
    svc = await started(math_service(await new_client()))
    with pytest.raises(NakError) as info:
        await caller.request("math", "add", {"a": 1}, timeout=WAIT)
    assert info.value.rcd == 400
    assert "'b'" in info.value.msg
    await svc.stop()


async def test_response_object_sets_msg_and_rcd_on_the_ack(
    new_client: Connect, caller: Client
) -> None:
    svc = await started(math_service(await new_client()))
    ack = await caller.request("math", "answer", timeout=WAIT)
    assert (ack.msg, ack.rcd, ack.payload["v"]) == ("found", 200, 42)
    bare = await caller.request("math", "bare", timeout=WAIT)
    assert bare.payload.to_dict() == {"result": [1, 2, 3]}
    await svc.stop()


@pytest.mark.parametrize("enc", [Encoding.JSON, Encoding.FRAM])
async def test_reply_keeps_the_request_encoding(
    new_client: Connect, caller: Client, enc: Encoding
) -> None:
    svc = await started(math_service(await new_client()))
    ack = await caller.request("math", "add", {"a": 1, "b": 1}, enc=enc, timeout=WAIT)
    assert ack.enc == enc
    assert ack.payload["sum"] == 2
    with pytest.raises(NakError) as info:  # a NAK too
        await caller.request("math", "nothing", enc=enc, timeout=WAIT)
    assert info.value.response is not None and info.value.response.enc == enc
    await svc.stop()


async def test_concurrency_limit_is_honoured_and_nothing_dropped(
    new_client: Connect, caller: Client
) -> None:
    svc = Service(await new_client(), "slow", concurrency=3)
    gate = asyncio.Event()
    running = 0
    most = 0

    @svc.command("work")
    async def work(req: Request) -> dict[str, Any]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1
        return {"n": req["n"]}

    await svc.start()
    calls = [
        asyncio.create_task(caller.request("slow", "work", {"n": n}, timeout=WAIT))
        for n in range(10)
    ]
    async with asyncio.timeout(WAIT):
        while svc.queued < 7:  # 3 run, 7 wait for a slot
            await asyncio.sleep(0.01)
    assert running == 3
    gate.set()
    answers = await asyncio.wait_for(asyncio.gather(*calls), WAIT)
    assert sorted(a.payload["n"] for a in answers) == list(range(10))
    assert most == 3
    assert svc.max_in_flight == 3
    assert svc.handled == 10
    await svc.stop()


async def test_requests_waiting_for_a_slot_run_in_arrival_order(
    new_client: Connect, caller: Client
) -> None:
    svc = Service(await new_client(), "one", concurrency=1)
    gate = asyncio.Event()
    started: list[int] = []

    @svc.command("work")
    async def work(req: Request) -> dict[str, Any]:
        started.append(req["n"])
        await gate.wait()
        return {"n": req["n"]}

    await svc.start()
    calls = []
    for n in range(6):
        calls.append(asyncio.create_task(caller.request("one", "work", {"n": n}, timeout=WAIT)))
        async with asyncio.timeout(WAIT):  # this one is in before the next is sent
            while len(started) + svc.queued < n + 1:
                await asyncio.sleep(0.005)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*calls), WAIT)
    assert started == list(range(6))
    assert (svc.in_flight, svc.queued, svc.max_in_flight) == (0, 0, 1)
    await svc.stop()


async def test_stop_answers_503_to_running_and_waiting_requests_alike(
    new_client: Connect, caller: Client
) -> None:
    svc = Service(await new_client(), "full", concurrency=2, drain_timeout=0.1)

    @svc.command("hang")
    async def hang(req: Request) -> None:
        await asyncio.Event().wait()

    await svc.start()
    calls = [asyncio.create_task(caller.request("full", "hang", timeout=WAIT)) for _ in range(5)]
    async with asyncio.timeout(WAIT):
        while svc.queued < 3:  # 2 run, 3 wait
            await asyncio.sleep(0.01)
    await asyncio.wait_for(svc.stop(), WAIT)
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
    assert [getattr(r, "rcd", r) for r in results] == [503] * 5
    assert (svc.in_flight, svc.queued, svc.failed) == (0, 0, 5)


def stream_service(client: Client) -> Service:
    svc = Service(client, "stream")

    @svc.command("count")
    async def count(req: Request) -> AsyncIterator[dict[str, Any]]:
        for i in range(req.get("n", 3)):
            yield {"i": i}

    @svc.command("broken")
    async def broken(req: Request) -> AsyncIterator[dict[str, Any]]:
        yield {"i": 0}
        yield {"i": 1}
        raise RuntimeError("sensor unplugged")

    return svc


async def test_streaming_handler_sends_each_response_then_an_end_marker(
    new_client: Connect, caller: Client
) -> None:
    svc = await started(stream_service(await new_client()))
    responses = [r async for r in caller.request_stream("stream", "count", {"n": 4}, timeout=WAIT)]
    *items, end = responses
    assert [r.payload["i"] for r in items] == [0, 1, 2, 3]
    assert all(r.more and not r.end for r in items)
    assert end.end and not end.more and "PLD" not in end.frame
    assert {r.typ for r in responses} == {"ACK"}
    await svc.stop()


async def test_a_streamed_response_arrives_before_the_next_is_made(
    new_client: Connect, caller: Client
) -> None:
    # The handler makes its second item only after the caller has seen the first: a service
    # that held a response back until the next one existed would never get there.
    seen_first = asyncio.Event()
    svc = Service(await new_client(), "progress")

    @svc.command("watch")
    async def watch(req: Request) -> AsyncIterator[dict[str, Any]]:
        yield {"step": 1}
        await seen_first.wait()
        yield {"step": 2}

    await started(svc)
    stream = caller.request_stream("progress", "watch", timeout=WAIT)
    first = await asyncio.wait_for(anext(stream), WAIT)
    assert first.payload["step"] == 1 and first.more
    seen_first.set()
    rest = [r async for r in stream]
    assert [r.payload["step"] for r in rest if not r.end] == [2]
    assert rest[-1].end
    await svc.stop()


async def test_empty_stream_is_one_end_marker(new_client: Connect, caller: Client) -> None:
    svc = await started(stream_service(await new_client()))
    responses = [r async for r in caller.request_stream("stream", "count", {"n": 0}, timeout=WAIT)]
    assert len(responses) == 1
    assert responses[0].typ == "ACK" and not responses[0].more and responses[0].end
    await svc.stop()


@pytest.mark.logs_tracebacks  # a handler fails on purpose: the service logs it
async def test_stream_that_fails_midway_ends_with_a_nak(
    new_client: Connect, caller: Client
) -> None:
    svc = await started(stream_service(await new_client()))
    responses = [r async for r in caller.request_stream("stream", "broken", timeout=WAIT)]
    assert [r.typ for r in responses] == ["ACK", "ACK", "NAK"]
    assert [r.more for r in responses] == [True, True, False]
    assert responses[-1].msg == "sensor unplugged"
    assert responses[-1].rcd == 500
    await svc.stop()


async def test_stop_lets_running_requests_finish(new_client: Connect, caller: Client) -> None:
    svc = Service(await new_client(), "drain")
    entered = asyncio.Event()

    @svc.command("slow")
    async def slow(req: Request) -> dict[str, Any]:
        entered.set()
        await asyncio.sleep(0.2)
        return {"done": True}

    await svc.start()
    call = asyncio.create_task(caller.request("drain", "slow", timeout=WAIT))
    await asyncio.wait_for(entered.wait(), WAIT)
    await asyncio.wait_for(svc.stop(), WAIT)
    assert (await asyncio.wait_for(call, WAIT)).payload["done"] is True


async def test_stop_past_the_drain_timeout_answers_503(new_client: Connect, caller: Client) -> None:
    svc = Service(await new_client(), "stuck", drain_timeout=0.1)
    entered = asyncio.Event()

    @svc.command("hang")
    async def hang(req: Request) -> None:
        entered.set()
        await asyncio.Event().wait()

    await svc.start()
    call = asyncio.create_task(caller.request("stuck", "hang", timeout=WAIT))
    await asyncio.wait_for(entered.wait(), WAIT)
    await asyncio.wait_for(svc.stop(), WAIT)
    with pytest.raises(NakError) as info:
        await asyncio.wait_for(call, WAIT)
    assert info.value.rcd == 503


async def test_expired_request_is_not_run(new_client: Connect, caller: Client) -> None:
    svc = await started(math_service(await new_client()))
    with pytest.raises(RequestTimeout):
        await caller.request(
            "math", "add", {"a": 1, "b": 2}, xpy=int(time.time()) - 10, timeout=0.5
        )
    assert svc.expired == 1 and svc.handled == 0
    await svc.stop()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        Service(None, "g", concurrency=0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Service(None, "g", heartbeat_interval=0)  # type: ignore[arg-type]


# -- heartbeats and the directory, live --------------------------------------------------------


async def test_directory_counts_instances_from_heartbeats(
    new_client: Connect, caller: Client
) -> None:
    directory = ServiceDirectory(caller)
    await directory.start()
    one = await started(math_service(await new_client(), heartbeat_interval=0.2))
    two = await started(math_service(await new_client(), heartbeat_interval=0.2))
    other = await started(stream_service(await new_client()))

    def counted(d: ServiceDirectory) -> bool:
        return {s.group: s.instances for s in d.services()} == {"math": 2, "stream": 1}

    await directory.wait_for(counted, WAIT)
    math = next(s for s in directory.services() if s.group == "math")
    assert math.status == "Running"
    assert "add" in math.commands
    assert {i.instance_id for i in directory.instances("math")} == {
        one.instance_id,
        two.instance_id,
    }

    await one.stop()  # Terminating removes it at once, without waiting for expiry
    await directory.wait_for(
        lambda d: [i.instance_id for i in d.instances("math")] == [two.instance_id], WAIT
    )
    await two.stop()
    await other.stop()
    await directory.wait_for(lambda d: d.services() == [], WAIT)
    await directory.stop()


@pytest.mark.logs_tracebacks  # a handler fails on purpose: the service logs it
async def test_heartbeats_carry_the_load(new_client: Connect, caller: Client) -> None:
    svc = await started(math_service(await new_client(), heartbeat_interval=0.1))
    await caller.request("math", "add", {"a": 1, "b": 1}, timeout=WAIT)
    with pytest.raises(NakError):
        await caller.request("math", "divide", {"a": 1, "b": 0}, timeout=WAIT)
    async with ServiceDirectory(caller) as directory:
        await directory.wait_for(
            lambda d: any(s.load.handled == 1 and s.load.failed == 1 for s in d.services()), WAIT
        )
    await svc.stop()


async def test_a_silent_instance_expires_after_missed_heartbeats(
    new_client: Connect, caller: Client
) -> None:
    directory = ServiceDirectory(caller)
    await directory.start()
    service_client = await new_client()
    await started(math_service(service_client, heartbeat_interval=0.1))
    await directory.wait_for(lambda d: len(d.instances("math")) == 1, WAIT)
    await service_client.close()  # a crash: heartbeats stop, no Terminating
    await directory.wait_for(lambda d: d.instances("math") == [], WAIT)
    await directory.stop()


async def test_a_probe_brings_heartbeats_at_once(new_client: Connect, caller: Client) -> None:
    # A 60 s interval: only the directory's probe can explain seeing the service quickly.
    svc = await started(math_service(await new_client(), heartbeat_interval=60))
    async with ServiceDirectory(caller) as directory:
        await directory.wait_for(lambda d: len(d.instances("math")) == 1, WAIT)
    await svc.stop()


async def test_kestrel_heartbeats_on_oam_services_are_listed(caller: Client) -> None:
    def kestrel_beat(payload: dict[str, Any]) -> Message:
        message = Message.event("OAM.SERVICES", payload)  # the topic Kestrel's code uses
        message.frame["TYP"] = MessageType.HBT.value
        return message

    async with ServiceDirectory(caller) as directory:
        await caller.send(kestrel_beat({"InstanceId": "k-1", "GroupName": "legacy"}))
        await directory.wait_for(lambda d: [s.group for s in d.services()] == ["legacy"], WAIT)
        await caller.send(kestrel_beat({"Event": "Terminating", "InstanceId": "k-1"}))
        await directory.wait_for(lambda d: d.services() == [], WAIT)


@pytest.mark.parametrize("switch", ["1", None])
async def test_the_operator_switch_heartbeats_on_kestrels_topic_too(
    new_client: Connect, caller: Client, monkeypatch: pytest.MonkeyPatch, switch: str | None
) -> None:
    """A Kestrel consumer of OAM.SERVICES sees our services once BUSGATE_KESTREL_HEARTBEATS=1;
    without it only OAM.SERVICE carries them (PROTOCOL.md 5.10)."""
    if switch is None:
        monkeypatch.delenv("BUSGATE_KESTREL_HEARTBEATS", raising=False)
    else:
        monkeypatch.setenv("BUSGATE_KESTREL_HEARTBEATS", switch)
    kestrel = await caller.subscribe("OAM.SERVICES")
    ours = await caller.subscribe("OAM.SERVICE")
    svc = await started(math_service(await new_client(), heartbeat_interval=60))
    beat = await asyncio.wait_for(ours.get(), WAIT)  # the one at start
    assert beat.typ == "HBT" and beat.payload["GroupName"] == "math"
    await svc.stop()
    assert (await asyncio.wait_for(ours.get(), WAIT)).payload["Event"] == "Terminating"
    if switch is None:
        assert kestrel.pending() == 0  # the same link carried ours and would have carried it
        return
    seen = [await asyncio.wait_for(kestrel.get(), WAIT) for _ in range(2)]
    assert [m.grp for m in seen] == ["OAM.SERVICES", "OAM.SERVICES"]
    assert [m.typ for m in seen] == ["HBT", "HBT"]
    assert [m.payload["Event"] for m in seen] == ["Heartbeat", "Terminating"]
    assert seen[0].payload["InstanceId"] == svc.instance_id


def test_the_switch_takes_a_yes_or_a_no(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUSGATE_KESTREL_HEARTBEATS", "maybe")
    with pytest.raises(ConfigError, match="BUSGATE_KESTREL_HEARTBEATS"):
        Service(None, "g")  # type: ignore[arg-type]
    assert Service(None, "g", kestrel_heartbeats=True).heartbeat_topics == (  # type: ignore[arg-type]
        "OAM.SERVICE",
        "OAM.SERVICES",
    )


@pytest.mark.logs_tracebacks  # a handler fails on purpose: the service logs it
async def test_an_answer_that_cannot_travel_becomes_a_nak(
    new_client: Connect, caller: Client
) -> None:
    svc = Service(await new_client(), "odd")

    @svc.command("snowman")
    async def snowman(req: Request) -> dict[str, Any]:
        return {"text": "snow \u2603"}  # outside Latin-1: no STRING can carry it

    @svc.command("huge")
    async def huge(req: Request) -> dict[str, Any]:
        return {"blob": b"x" * (2 * 1024 * 1024)}  # over the broker's 1 MiB message limit

    @svc.command("unicode_error")
    async def unicode_error(req: Request) -> None:
        raise ServiceError("\u2603 melted", 409)

    await svc.start()
    with pytest.raises(NakError) as info:
        await caller.request("odd", "snowman", timeout=WAIT)
    assert info.value.rcd == 500 and "Latin-1" in info.value.msg
    with pytest.raises(NakError) as info:
        await caller.request("odd", "huge", timeout=WAIT)
    assert info.value.rcd == 500 and "max_message_size" in info.value.msg
    with pytest.raises(NakError) as info:
        await caller.request("odd", "unicode_error", timeout=WAIT)
    assert (info.value.msg, info.value.rcd) == ("? melted", 409)
    await svc.stop()


async def test_a_service_keeps_answering_after_the_broker_restarts() -> None:
    first = Broker(BrokerConfig(port=0, open=True))
    await first.start()
    port = first.port
    url = f"bus://127.0.0.1:{port}"
    server, caller = await connect(url), await connect(url)
    svc = await started(math_service(server))
    assert (await caller.request("math", "add", {"a": 1, "b": 1}, timeout=WAIT)).payload["sum"] == 2
    await first.stop()
    second = Broker(BrokerConfig(port=port, open=True))
    await second.start()
    try:
        async with asyncio.timeout(WAIT):
            while True:  # both clients reconnect with backoff; the service's group is restored
                try:
                    ack = await caller.request("math", "add", {"a": 2, "b": 2}, timeout=1.0)
                    break
                except BusError:  # no responders yet, disconnected, ...
                    await asyncio.sleep(0.1)
        assert ack.payload["sum"] == 4
        await svc.stop()
    finally:
        await caller.close()
        await server.close()
        await second.stop()


def test_a_plain_function_is_refused_as_a_handler() -> None:
    svc = Service(None, "g")  # type: ignore[arg-type]

    def blocking(req: Request) -> dict[str, Any]:
        return {}

    with pytest.raises(ConfigError, match="async"):
        svc.add_command("blocking", blocking)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        svc.add_command("", blocking)  # type: ignore[arg-type]


async def test_requests_racing_a_stopping_instance_are_all_answered(
    new_client: Connect, caller: Client
) -> None:
    # Requests the broker routed to an instance just before it left the group reach it after
    # it stopped consuming: each must still be answered (by the other instance), none lost.
    leaving = await started(math_service(await new_client()))
    staying = await started(math_service(await new_client()))
    calls = [
        asyncio.create_task(caller.request("math", "add", {"a": n, "b": 1}, timeout=WAIT))
        for n in range(200)
    ]
    await asyncio.sleep(0)  # the requests are on their way to the broker
    await asyncio.wait_for(leaving.stop(), WAIT)
    answers = await asyncio.wait_for(asyncio.gather(*calls), WAIT + 1)
    assert [answer.payload["sum"] for answer in answers] == [n + 1 for n in range(200)]
    assert leaving.handled + staying.handled == 200
    await staying.stop()


async def test_requests_racing_the_last_instance_leaving_fail_clearly(
    new_client: Connect, caller: Client
) -> None:
    # The only consumer leaves while requests are on their way: each one is answered or gets
    # the broker's "no responders", none waits for its timeout.
    consumer = await new_client()
    group = await consumer.consume("lonely")

    async def serve() -> None:
        async for request in group:
            await consumer.send(request.ack({"ok": True}))

    server = asyncio.create_task(serve())
    calls = [
        asyncio.create_task(caller.request("lonely", "ping", timeout=WAIT)) for _ in range(100)
    ]
    await asyncio.sleep(0)
    await asyncio.wait_for(group.unsubscribe(), WAIT)
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT + 1)
    await asyncio.wait_for(server, WAIT)
    for result in results:
        assert isinstance(result, Message | NoRespondersError), repr(result)


@pytest.mark.broker_only  # manage.drain is the central post office's
async def test_a_drained_service_hears_of_it_and_says_draining() -> None:
    # A manager drained the group and the service kept saying "Running" while it got nothing.
    config = BrokerConfig(port=0, open=True, offices={"admin": "pw"}, managers={"admin"})
    async with Broker(config) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        service_client = await connect(url)
        admin = await connect(url, "admin", "pw")
        try:
            svc = await started(math_service(service_client, heartbeat_interval=60))
            directory = ServiceDirectory(admin)
            await directory.start()
            await directory.wait_for(
                lambda d: [s.status for s in d.services()] == ["Running"], WAIT
            )
            drained = await admin.manage("manage.drain", {"group": "math"})
            assert drained.payload["drained"] == 1
            # at once, not at the next heartbeat a minute later
            await directory.wait_for(
                lambda d: [s.status for s in d.services()] == ["Draining"], WAIT
            )
            assert svc.status == "Draining"
            assert svc._consumer.drained
            with pytest.raises(NoRespondersError):  # and it is not given requests any more
                await admin.request("math", "add", {"a": 1, "b": 2}, timeout=WAIT)
            await directory.stop()
            await svc.stop()
        finally:
            await admin.close()
            await service_client.close()


@pytest.mark.logs_tracebacks  # a handler fails on purpose: the service logs it
async def test_an_rcd_beyond_32_bits_is_an_immediate_nak_not_a_timeout(
    new_client: Connect, caller: Client
) -> None:
    # The NAK could not be encoded: the handler task died ("Task exception was never
    # retrieved") and the caller waited its whole timeout.
    svc = Service(await new_client(), "odd")

    @svc.command("raise")
    async def raising(req: Request) -> None:
        raise ServiceError("too big", 10_000_000_000)

    @svc.command("answer")
    async def answering(req: Request) -> Response:
        return Response({"x": 1}, rcd=-(2**40))

    await started(svc)
    for cmd in ("raise", "answer"):
        with pytest.raises(NakError) as refused:  # answered: not a RequestTimeout
            await caller.request("odd", cmd, timeout=WAIT)
        assert refused.value.rcd == 500 and "32-bit" in refused.value.msg
    assert svc.failed == 2
    await svc.stop()


@pytest.mark.broker_only  # the broker's rule; on NATS, the directory's own (HBT only)
async def test_events_forged_on_the_systems_types_are_refused(
    new_client: Connect, caller: Client, broker: Broker
) -> None:
    # Anyone who may publish could add a service to the directory or remove a live one with
    # an EVT shaped as a heartbeat (the instance ids are readable on OAM.*).
    svc = await started(math_service(await new_client(), heartbeat_interval=60))
    async with ServiceDirectory(caller) as directory:
        await directory.wait_for(lambda d: len(d.instances("math")) == 1, WAIT)
        forger = await new_client()
        await forger.publish(
            "OAM.SERVICE", {"Event": "Heartbeat", "InstanceId": "fake", "GroupName": "bank"}
        )
        await forger.publish("OAM.SERVICE", {"Event": "Terminating", "InstanceId": svc.instance_id})
        async with asyncio.timeout(WAIT):  # both refused by the broker, counted
            while broker.stats["refused_system"] < 2:
                await asyncio.sleep(0.01)
        await forger.publish("OAM.PROBE", {"Event": "Probe"})  # a probe is the system's: allowed
        await directory.wait_for(lambda d: d.version > 0, WAIT)
        assert [s.group for s in directory.services()] == ["math"]
        assert [i.instance_id for i in directory.instances("math")] == [svc.instance_id]
    await svc.stop()
