"""The keepalive pings of the lean ``/ws`` clients, one pass per slot
(gateway/websocket/ws_pings.py, PROTOCOL.md 6.8), against the real gateway under uvicorn and
raw-socket clients."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest

from gateway.process.settings import GatewaySettings
from tests.gateway.conftest import base_settings
from tests.gateway.websocket.test_lean import (
    Reader,
    Writer,
    _closed_with,
    _read_frame,
    _subscribed,
    _url,
    gateway,
)
from tests.gateway.websocket.test_ws import WsClient
from tests.gateway.websocket.test_ws_reader import frame

pytestmark = pytest.mark.loops  # the gateway runs on uvloop: each test on both loops

CLIENTS = 20
PINGS = 3  # each answering client answers this many while the silent one is dropped


@pytest.fixture(autouse=True)
def _no_link(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")


@pytest.fixture
def settings(bus_url: str) -> GatewaySettings:
    # pings 0.2 s apart, a pong may take 0.3 s (the defaults, 25 s and 20 s, are too slow)
    return replace(base_settings(bus_url=bus_url), ws_ping_interval=0.2, ws_ping_timeout=0.3)


async def _answer(reader: Reader, writer: Writer, count: int) -> list[bytes]:
    """Answer ``count`` pings with their pongs; their payloads."""
    pings: list[bytes] = []
    while len(pings) < count:
        opcode, payload = await _read_frame(reader)
        if opcode == 0x89:
            pings.append(payload)
            writer.write(frame(0xA, payload))
    return pings


async def test_among_many_clients_only_the_silent_one_is_closed(
    settings: GatewaySettings,
) -> None:
    async with gateway(settings) as server:
        watcher = await WsClient.open(_url(server))  # the websockets client answers pings
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(_subscribed(server, f"c{i}"))
                for i in range(CLIENTS)
            ]
            for i in range(CLIENTS):
                await watcher.expect("routing/subscribe/notify", routing_id=f"c{i}")
            (silent_reader, _), answering = clients[0], clients[1:]
            async with asyncio.timeout(30):
                answered, code = await asyncio.gather(
                    asyncio.gather(*(_answer(r, w, PINGS) for r, w in answering)),
                    _closed_with(silent_reader),  # pinged, never answers
                )
            assert code == 1011
            for pings in answered:  # every answering client, every ping a new payload
                assert len(set(pings)) == PINGS
            await watcher.expect("routing/disconnect", routing_id="c0")
            # the answering ones are all still there: each is pinged on and answers
            async with asyncio.timeout(30):
                await asyncio.gather(*(_answer(r, w, 1) for r, w in answering))
            await watcher.send({"event": "ping", "id": "p"})
            seen = []
            while (obj := await watcher.recv()).event != "pong":
                seen.append(obj)
            assert not [o for o in seen if o.event == "routing/disconnect"]
            # closed first: the others' departures, unread, would hold its close handshake
            await watcher.close()


async def test_a_pong_split_across_reads_or_sent_with_a_message_counts(
    settings: GatewaySettings,
) -> None:
    async with gateway(settings) as server:
        watcher = await WsClient.open(_url(server))
        async with _subscribed(server, "odd") as (reader, writer):
            await watcher.expect("routing/subscribe/notify", routing_id="odd")
            await _answer_oddly(reader, writer)
            await watcher.send({"event": "ping", "id": "p"})
            seen = []
            while (obj := await watcher.recv()).event != "pong":
                seen.append(obj)
            assert not [o for o in seen if o.event == "routing/disconnect"]
        await watcher.close()


async def _answer_oddly(reader: Reader, writer: Writer) -> None:
    async with asyncio.timeout(30):
        for _ in range(PINGS):  # over twice the pong timeout
            while (ping := await _read_frame(reader))[0] != 0x89:
                pass
            pong = frame(0xA, ping[1])
            writer.write(pong[:3])  # the pong in two reads...
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.write(pong[3:] + frame(0x1, b'{"event":"ping","id":"x"}'))  # ...and more
