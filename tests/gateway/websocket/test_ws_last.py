"""The last value of each bus type: ``GET /v1/history/{pattern}?last=1`` and ``/ws`` subscriptions
with ``"last": true`` (gateway/websocket/ws_last.py, PROTOCOL.md 5.15, 6.8), from the broker's
journal and
from JetStream."""

from __future__ import annotations

import json

import httpx

from bus.objects.codec import BusinessObject
from tests.gateway.conftest import Stack, base_settings, running_stack
from tests.gateway.events.test_events_resume import two_gateways
from tests.gateway.websocket.test_ws import WsClient

__all__ = ["two_gateways"]  # the fixture: the broker with a journal, or nats-server -js


async def _content(ws: WsClient) -> BusinessObject:
    """The next content object (notices and replies passed over)."""
    while True:
        obj = await ws.recv()
        if obj.event is None:
            return obj


async def _publish(http: httpx.AsyncClient, url: str, type_: str, i: int) -> int:
    answer = await http.post(f"{url}/v1/publish/{type_}?confirm=1", json={"i": i})
    assert answer.status_code == 200, answer.text
    seq: int = answer.json()["seq"]
    return seq


async def test_last_values_over_http_and_on_ws(two_gateways: tuple[Stack, str]) -> None:
    stack, other = two_gateways
    async with httpx.AsyncClient(timeout=15.0) as http:
        seqs = [
            await _publish(http, stack.url, type_, i)
            for i, type_ in enumerate(["boiler.temp", "boiler.flow", "boiler.temp", "fan.rpm"])
        ]
        page = (await http.get(f"{other}/v1/history/boiler.*", params={"last": "1"})).json()
        assert [(e["type"], e["payload"]["i"], e["seq"]) for e in page["events"]] == [
            ("boiler.flow", 1, seqs[1]),
            ("boiler.temp", 2, seqs[2]),
        ]  # the newest of each type, oldest first
        assert page["more"] is False
        one = (await http.get(f"{other}/v1/history/boiler.*?last=1&limit=1")).json()
        assert [e["type"] for e in one["events"]] == ["boiler.temp"] and one["more"] is True
        url = other.replace("http", "ws") + "/ws"
        ws = await WsClient.open(url, receive="all", types=["bus/boiler.*"], last=True)
        try:
            got = [await _content(ws) for _ in range(2)]
            assert [(o.type, o.metadata["seq"], o.metadata["last"]) for o in got] == [
                ("bus/boiler.flow", seqs[1], True),
                ("bus/boiler.temp", seqs[2], True),
            ]
            assert [json.loads(o.payload)["i"] for o in got] == [1, 2]
            # (live bus events reach /ws through the broker's Object System bridge: test_ws.py)
        finally:
            await ws.ws.close()


async def test_ws_last_values_of_types_the_bus_keeps_none_of_is_an_error_object() -> None:
    with running_stack(base_settings(), demo=False) as stack:  # no journal
        url = stack.url.replace("http", "ws") + "/ws"
        ws = await WsClient.open(url, receive="all", types=["bus/boiler.*"], last=True)
        try:
            error = await ws.expect("routing/last/error")
            assert "keeps no journal" in error.metadata["message"]
        finally:
            await ws.ws.close()
