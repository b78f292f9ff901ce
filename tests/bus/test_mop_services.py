"""MOP mail to a service group (``bus/mop/services.py``, PROTOCOL.md 11.5): a MOP post office
mails ``central.<group>``, a real :class:`~bus.asyncio.service.Service` answers, the answer comes
back as MOP mail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bus.asyncio.service import Request, Service, ServiceError
from bus.mop.listener import open_mop_listener
from bus.mop.services import service_group
from tests.bus.mopclient import MopClient, content, env
from tests.conftest import OFFICES, MakeBroker, MakeClient

MOP_OFFICES = {"test1": "secret"}


@pytest.fixture
async def test1(make_broker: MakeBroker, make_client: MakeClient) -> AsyncIterator[MopClient]:
    broker = await make_broker(offices={**OFFICES, **MOP_OFFICES})
    svc = Service(await make_client(f"bus://127.0.0.1:{broker.port}", "carol"), "orders")

    @svc.command("quote")
    async def quote(req: Request) -> dict[str, Any]:
        return {"item": req["item"], "price": 12.5, "caller": req.caller}

    @svc.command("refuse")
    async def refuse(req: Request) -> None:
        raise ServiceError("out of stock", 409)

    @svc.command("count")
    async def count(req: Request) -> AsyncIterator[dict[str, Any]]:
        for i in range(int(req["n"])):
            yield {"i": i}

    await svc.start()
    listener = await open_mop_listener(broker, "127.0.0.1", 0, mail_timeout=2.0)
    client = await MopClient.open(listener.port, "test1", MOP_OFFICES["test1"])
    yield client
    await client.close()
    await listener.stop()
    await svc.stop()


def test_the_mailboxes_of_central_name_groups() -> None:
    assert service_group("central.orders") == "orders"
    assert service_group("central.po") is None and service_group("test1.orders") is None


async def test_mail_to_a_group_is_a_request_and_its_ack_comes_back(test1: MopClient) -> None:
    asked = test1.mail("desk", "central.orders", "quote", expect=True, item="pump")
    reply = await test1.expect_reply(asked)
    assert env(reply)["from"] == "central.orders" and env(reply)["to"] == "test1.desk"
    assert env(reply)["type"] == "quote"
    assert content(reply) == {"item": "pump", "price": 12.5, "caller": "test1"}


async def test_the_command_may_be_a_cmd_field(test1: MopClient) -> None:
    asked = test1.mail("desk", "central.orders", expect=True, CMD="quote", item="valve")
    assert content(await test1.expect_reply(asked))["item"] == "valve"


async def test_a_nak_and_failures_come_back_as_error_and_rcd(test1: MopClient) -> None:
    refused = test1.mail("desk", "central.orders", "refuse", expect=True)
    assert content(await test1.expect_reply(refused)) == {"error": "out of stock", "rcd": 409}
    nobody = test1.mail("desk", "central.nobody", "x", expect=True)
    reply = content(await test1.expect_reply(nobody))
    assert reply["rcd"] == 503 and "nobody" in reply["error"]
    no_cmd = test1.mail("desk", "central.orders", expect=True, item="x")
    assert content(await test1.expect_reply(no_cmd))["rcd"] == 400
    bad = test1.mail("desk", "central.a b", "x", expect=True)
    assert content(await test1.expect_reply(bad))["rcd"] == 400


async def test_a_stream_comes_back_as_one_reply_per_response(test1: MopClient) -> None:
    asked = test1.mail("desk", "central.orders", "count", expect=True, n=3)
    got = [content(await test1.expect_reply(asked)) for _ in range(4)]
    assert got == [
        {"i": 0, "more": True},
        {"i": 1, "more": True},
        {"i": 2, "more": True},
        {"end": True},
    ]
