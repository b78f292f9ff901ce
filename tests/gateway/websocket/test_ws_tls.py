"""The gateway's ``/ws`` object server linked to a broker's Object System listener over TLS
(``--objects-link tls://HOST:PORT``, PROTOCOL.md 4.7), with real uvicorn and websockets."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bus.link.tls import ENV_CA
from gateway.app import create_app
from gateway.websocket.ws import check_link
from tests.bus.link.test_tls_listeners import (  # noqa: F401 - pytest fixtures
    Stoppers,
    objects,
    pki,
    stoppers,
    tls_broker,
)
from tests.bus.objclient import ObjClient
from tests.bus.pki import Pki
from tests.conftest import MakeBroker
from tests.gateway.conftest import base_settings
from tests.gateway.websocket.test_ws import WsClient, _serve

pytestmark = pytest.mark.loops  # the gateway runs on uvloop: each test on both loops


async def test_websocket_clients_reach_a_tls_hub_through_a_tls_link(
    make_broker: MakeBroker,
    pki: Pki,  # noqa: F811
    stoppers: Stoppers,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ENV_CA, str(pki.ca_file))  # what the gateway and the bridge trust
    broker = await tls_broker(make_broker, pki, objects_server_peers=("127.0.0.1",))
    hub = await objects(broker, stoppers)
    link = f"tls://127.0.0.1:{hub.server.port}"
    settings = base_settings(bus_url=f"bus+tls://127.0.0.1:{broker.port}", objects_links=(link,))
    assert await check_link(settings)  # the start-up check speaks TLS too
    server, task, port = await _serve(create_app(settings))
    try:
        tcp = await ObjClient.open(hub.server.port, tls=pki.client(), receive_mode="no_echo")
        ws = await WsClient.open(f"ws://127.0.0.1:{port}/ws", receive_mode="no_echo")
        await ws.send({"event": "hello"})
        assert (await tcp.expect("hello")).route[0] == ws.routing_id
        await tcp.send({"event": "back", "to": ws.routing_id})
        await ws.expect("back")
        await ws.close()
        await tcp.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


async def test_a_plain_link_to_a_tls_hub_is_reported_at_start(
    make_broker: MakeBroker,
    pki: Pki,  # noqa: F811
    stoppers: Stoppers,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    broker = await tls_broker(make_broker, pki)
    hub = await objects(broker, stoppers)
    settings = base_settings(objects_links=(f"tls://127.0.0.1:{hub.server.port}",))
    # Not trusting the hub's CA: refused, and the WARNING says it is about TLS.
    assert not await check_link(settings)
    assert any("TLS failed" in r.getMessage() for r in caplog.records)
