"""The originals talk to each other through one busgate (issue 32): a MOP post office that routes
as MOP's ``PostOffice`` does, an Objectoplex client whose library cuts content types at the dot,
a Kestrel-style service (answers in Kestrel's field order, heartbeats on ``OAM.SERVICES``) and
curl (HTTP through the real gateway), on the real broker with its MOP listener and Object System
bridge. Each leg is one block below; the legs that cannot exist are named in PROTOCOL.md 11.5.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from bus.asyncio.client import Client
from bus.message.message import Message
from bus.mop.listener import open_mop_listener
from bus.objects.bridge import Bridge
from bus.objects.router import Router
from bus.objects.tcp import ObjectServer
from gateway.app import create_app
from tests.bus.mop_postoffice import MopPostOffice
from tests.bus.mopclient import content, env
from tests.bus.objclient import ObjClient
from tests.bus.objectoplex_library import sent_by_library
from tests.conftest import OFFICES, MakeBroker, MakeClient
from tests.gateway.conftest import base_settings, free_port
from tests.gateway.routes.test_events import SseReader

WAIT = 10.0
MOP_OFFICES = {"irrigation": "secret"}
KESTREL = {"kestrel": "kestrel-secret"}


async def _kestrel_service(client: Client) -> None:
    """A Kestrel service of group ``profile``: heartbeats as Kestrel's (OAM.SERVICES, no MID,
    its status frame; every 0.2 s here, not Kestrel's 60 s, and never in answer to a probe, as
    Kestrel), answers each request in the request's encoding, in Kestrel's field order."""

    async def beat() -> None:
        while True:
            heartbeat = Message({"GRP": "OAM.SERVICES", "TYP": "HBT"})
            status = {"Name": "Status", "InstanceId": "_INBOX.k1", "GroupName": "profile"}
            heartbeat.frame.add("PLD", {**status, "State": {"Loader": "Running"}})
            await client.send(heartbeat)
            await asyncio.sleep(0.2)

    beating = asyncio.create_task(beat())
    try:
        requests = await client.consume("profile")
        async for request in requests:
            who = request.payload.get("user", "?")
            await client.send(request.ack({"user": who, "plan": "gold"}, msg="OK", rcd=200))
    finally:
        beating.cancel()


@contextlib.asynccontextmanager
async def _gateway(port: int) -> AsyncIterator[str]:
    settings = base_settings(bus_url=f"bus://127.0.0.1:{port}", bus_name="carol",
                             bus_secret=OFFICES["carol"])  # fmt: skip
    http_port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=http_port,
                                           log_level="warning", lifespan="on"))  # fmt: skip
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(WAIT):
            while not server.started:
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def _content_object(client: ObjClient, bus_type: str) -> Any:
    obj = await client.expect_any(lambda o: o.metadata.get("bus-type") == bus_type, WAIT)
    return obj.metadata, orjson.loads(obj.payload)


async def test_mop_objectoplex_a_kestrel_service_and_curl_on_one_busgate(
    make_broker: MakeBroker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUSGATE_MOP_SOURCES", "irrigation.io")
    monkeypatch.setenv("BUSGATE_MOP_TYPES", "sensor")  # for the Object System's ">"
    broker = await make_broker(offices={**OFFICES, **MOP_OFFICES, **KESTREL})
    url = f"bus://127.0.0.1:{broker.port}"
    listener = await open_mop_listener(broker, "127.0.0.1", 0, follow_interval=0.05)
    objects = ObjectServer(Router("broker-os"))
    await objects.start(port=0)
    bridge = Bridge(objects, await make_client(url, "bob"))
    await bridge.start()
    kestrel = asyncio.create_task(
        _kestrel_service(await make_client(url, "kestrel", secret=KESTREL["kestrel"]))
    )
    mop = await MopPostOffice.open(listener.port, "irrigation", MOP_OFFICES["irrigation"])
    oplex = await ObjClient.open(objects.port, subscriptions=["bus/*", "@services/*"], echo=True)
    try:
        async with (
            _gateway(broker.port) as base,
            httpx.AsyncClient(base_url=base, timeout=WAIT) as http,
        ):
            async with asyncio.timeout(WAIT):
                while (await http.get("/readyz")).status_code != 200:
                    await asyncio.sleep(0.05)
            # A MOP mailbox follows alarms from anyone on the bus.
            await mop.expect_reply(mop.subscribe("panel", "oplex.any", "alarm"))
            params = {"types": "sensor.*,alarm.*"}
            async with http.stream("GET", "/v1/subscribe", params=params) as stream:
                sse = SseReader(stream)
                async with asyncio.timeout(WAIT):  # the gateway's stream is on the bus
                    while "carol" not in broker.router.patterns().get("alarm.*", ()):
                        await asyncio.sleep(0.02)
                await mop.wait_for(lambda: "irrigation.io.alarm" in mop.central_buckets())
                # MOP publication -> curl (SSE) and Objectoplex, asked of MOP by the listener.
                mop.publish("io", "sensor.temp", c=18.5)
                event = json.loads((await sse.next_event(WAIT))["data"])
                assert event["type"] == "sensor.temp" and event["payload"] == {"c": 18.5}
                metadata, payload = await _content_object(oplex, "sensor.temp")
                assert metadata["type"] == "bus/sensor.temp" and payload == {"c": 18.5}
                # Objectoplex publication (its library cut the type) -> curl and MOP.
                body = b'{"room":"kitchen"}'
                await oplex.send(
                    sent_by_library({"type": "bus/alarm.fire", "bus-type": "alarm.fire"}, body),
                    body,
                )
                event = json.loads((await sse.next_event(WAIT))["data"])
                assert event["type"] == "alarm.fire" and event["payload"] == {"room": "kitchen"}
                got = await asyncio.wait_for(mop.mailboxes["panel"].get(), WAIT)
                assert env(got)["type"] == "alarm.fire" and content(got) == {"room": "kitchen"}
                # curl publication -> Objectoplex and MOP.
                assert (await http.post("/v1/publish/alarm.http", json={"n": 1})).status_code == 202
                assert (await _content_object(oplex, "alarm.http"))[1] == {"n": 1}
                got = await asyncio.wait_for(mop.mailboxes["panel"].get(), WAIT)
                assert env(got)["type"] == "alarm.http" and content(got) == {"n": 1}
            # The Kestrel service, from curl, from Objectoplex and from MOP.
            async with asyncio.timeout(WAIT):
                while "profile" not in {
                    s["group"] for s in (await http.get("/v1/services")).json()["services"]
                }:
                    await asyncio.sleep(0.05)
            for attempt in range(200):  # the bridge registers it from the heartbeats it reads
                ask = {"event": "services/discovery", "id": f"d{attempt}", "name": "profile"}
                await oplex.send(ask)
                found = await oplex.expect("services/discovery/reply", in_reply_to=f"d{attempt}")
                if found.metadata["services"]:
                    break
                await asyncio.sleep(0.05)
            assert [s["name"] for s in found.metadata["services"]] == ["profile"]
            answer = await http.post("/v1/request/profile", json={"CMD": "get", "user": "ann"})
            assert answer.status_code == 200 and answer.json()["payload"] == {
                "user": "ann",
                "plan": "gold",
            }
            await oplex.send({"event": "services/request", "id": "q1", "name": "profile",
                              "request": "get", "args": {"user": "oli"}})  # fmt: skip
            reply = await oplex.expect("services/reply", in_reply_to="q1")
            assert orjson.loads(reply.payload) == {"user": "oli", "plan": "gold"}
            asked = mop.link.mail("desk", "central.profile", "get", expect=True, user="max")
            reply = await _reply_to(mop, "desk", asked)
            assert content(reply) == {"user": "max", "plan": "gold"}
            # curl mails a MOP mailbox and gets its reply.
            posting = asyncio.create_task(
                http.post("/v1/mail/irrigation/valve", params={"type": "open"}, json={"v": 2})
            )
            mail = await asyncio.wait_for(mop.mailboxes["valve"].get(), WAIT)
            mop.link.send(
                {"from": "irrigation.valve", "to": env(mail)["from"], "reply": env(mail)["id"]},
                done=True,
            )
            response = await posting
            assert response.status_code == 200 and response.json()["payload"] == {"done": True}
    finally:
        kestrel.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kestrel
        await oplex.close()
        await mop.close()
        await bridge.stop()
        await objects.stop()
        await listener.stop()


async def _reply_to(mop: MopPostOffice, mailbox: str, message_id: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        while True:
            message = await mop.mailboxes[mailbox].get()
            if env(message).get("reply") == message_id:
                return message
