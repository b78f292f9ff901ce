"""A service runs an idempotent request once (bus/asyncio/idempotent.py, bus/idempotency.py;
PROTOCOL.md 5.17): a request whose MID is a name-based UUID is answered again, streams
included, to whoever repeats it; another payload under the same MID is NAK 409."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bus.asyncio.service import Request, Service
from bus.errors import DecodeError, NakError
from bus.idempotency import CONFLICT, check_key, derive_mid, is_derived
from bus.message.ids import new_id
from bus.message.message import Message
from tests.conftest import MakeClient
from tests.docexamples import examples


def test_derived_ids() -> None:
    mid = derive_mid("ci", "request demo", "k-1")
    assert mid == derive_mid("ci", "request demo", "k-1") and is_derived(mid)
    assert mid != derive_mid("ops", "request demo", "k-1")  # another caller: another id
    assert mid != derive_mid("ci", "publish demo.x", "k-1")
    assert not is_derived(new_id()) and not is_derived(None) and not is_derived("5" * 20)
    for bad in ("", "a b", "é", "k" * 256):
        with pytest.raises(DecodeError):
            check_key(bad)


async def test_a_repeat_from_another_client_gets_the_first_answers_and_runs_nothing(
    make_client: MakeClient,
) -> None:
    runs = {"n": 0}
    service_client = await make_client(name="bob")
    service = Service(service_client, "mill")

    @service.command("grind")
    async def grind(req: Request) -> AsyncIterator[dict[str, Any]]:
        runs["n"] += 1
        for i in range(req["n"]):
            await asyncio.sleep(0.05)
            yield {"i": i, "run": runs["n"]}

    await service.start()
    first, second = await make_client(name="alice"), await make_client(name="carol")
    mid = derive_mid("alice", "request mill", "batch-7")

    async def ask(client: Any, n: int) -> list[dict[str, Any]]:
        request = Message.request("mill", "grind", {"n": n}, reply_to=client.inbox)
        request.mid = mid
        return [r.payload_data() async for r in client.call_stream(request, timeout=5)]

    # the repeat comes from another client (another inbox) while the first still runs
    one, two = await asyncio.gather(ask(first, 3), ask(second, 3))
    assert one == two and runs["n"] == 1 and service.recent.replayed == 1
    assert [item.get("i") for item in one[:3]] == [0, 1, 2]
    request = Message.request("mill", "grind", {"n": 4}, reply_to=second.inbox)
    request.mid = mid  # the same id, another payload
    with pytest.raises(NakError) as refused:
        await second.call(request, timeout=5)
    assert (refused.value.rcd, refused.value.msg) == (409, CONFLICT)
    plain = Message.request("mill", "grind", {"n": 1}, reply_to=first.inbox)
    assert [r.payload_data() async for r in first.call_stream(plain, timeout=5)][0]["run"] == 2
    await service.stop()


def test_the_documented_derived_id() -> None:
    (example,) = examples("idempotency")
    body = example.body
    assert derive_mid(body["caller"], body["route"], body["key"]) == body["mid"]
