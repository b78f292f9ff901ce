"""The demo service over a real broker on a loopback port."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.service import Service
from bus.broker import Broker, BrokerConfig
from bus.demo import create_demo_service
from bus.errors import NakError
from bus.frame.enums import Encoding

WAIT = 10.0


@pytest.fixture
async def demo() -> AsyncIterator[tuple[Client, Service]]:
    async with Broker(BrokerConfig(port=0, open=True)) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        server, caller = await connect(url), await connect(url)
        svc = create_demo_service(server, max_sleep=0.05, max_count=5)
        await svc.start()
        yield caller, svc
        await svc.stop()
        await caller.close()
        await server.close()


async def test_echo_returns_its_arguments(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    args = {"x": 1, "name": "Ann", "nested": {"ok": True}, "list": [1, 2]}
    ack = await caller.request("demo", "echo", args, timeout=WAIT)
    assert ack.payload.to_dict() == args


async def test_echo_over_json_answers_in_json(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    ack = await caller.request("demo", "echo", {"x": 1}, enc=Encoding.JSON, timeout=WAIT)
    assert ack.enc == Encoding.JSON and ack.payload["x"] == 1


async def test_time_is_the_server_time(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    before = int(time.time() * 1000)
    ack = await caller.request("demo", "time", timeout=WAIT)
    after = int(time.time() * 1000)
    assert before <= ack.payload["epoch_ms"] <= after
    assert ack.payload["iso"].startswith(time.strftime("%Y-", time.gmtime()))
    assert ack.payload["zone"] == "UTC"


async def test_sleep_is_capped(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    ack = await caller.request("demo", "sleep", {"seconds": 3600}, timeout=WAIT)
    assert ack.payload["slept"] < 1.0


@pytest.mark.parametrize("seconds", [-1, "soon", True])
async def test_sleep_refuses_a_bad_duration(demo: tuple[Client, Service], seconds: object) -> None:
    caller, _ = demo
    with pytest.raises(NakError) as info:
        await caller.request("demo", "sleep", {"seconds": seconds}, timeout=WAIT)
    assert info.value.rcd == 400


async def test_fail_naks_with_defaults_or_given_msg_and_rcd(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    with pytest.raises(NakError) as info:
        await caller.request("demo", "fail", timeout=WAIT)
    assert (info.value.msg, info.value.rcd) == ("demo failure", 500)
    with pytest.raises(NakError) as info:
        await caller.request("demo", "fail", {"msg": "out of paper", "rcd": 507}, timeout=WAIT)
    assert (info.value.msg, info.value.rcd) == ("out of paper", 507)


async def test_count_streams_n_responses(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    stream = caller.request_stream("demo", "count", {"n": 3, "interval": 0.01}, timeout=WAIT)
    *responses, end = [r async for r in stream]
    assert [r.payload.to_dict() for r in responses] == [
        {"i": 1, "n": 3},
        {"i": 2, "n": 3},
        {"i": 3, "n": 3},
    ]
    assert [r.more for r in responses] == [True, True, True]
    assert end.end and not end.more


async def test_count_is_capped(demo: tuple[Client, Service]) -> None:
    caller, _ = demo
    responses = [r async for r in caller.request_stream("demo", "count", {"n": 99}, timeout=WAIT)]
    assert len([r for r in responses if not r.end]) == 5


async def test_demo_lists_its_commands(demo: tuple[Client, Service]) -> None:
    _, svc = demo
    assert svc.group == "demo"
    assert set(svc.commands) == {"echo", "time", "sleep", "fail", "count"}
