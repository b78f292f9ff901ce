"""The broker's other listeners over TLS (PROTOCOL.md 4.7): the Object System listener, its
``tls://`` server links, and the MOP listener.

With ``tls_cert``/``tls_key`` every listener of the broker speaks TLS only. The real broker runs
in-process on port 0, its Object System server is started as ``busgate broker --objects-port``
starts it (:func:`bus.cli.broker.open_objects`), its MOP listener as ``--mop-port`` does
(:func:`bus.mop.listener.open_mop_listener`); certificates are made here (``tests/bus/pki.py``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from bus.asyncio.client import connect
from bus.asyncio.service import Request, Service
from bus.broker import Broker
from bus.broker.management import connections
from bus.cli.broker import open_objects
from bus.errors import ConfigError
from bus.frame.enums import CloseReason
from bus.link.tls import ENV_CA, ENV_CERT, ENV_KEY
from bus.mop.listener import open_mop_listener
from bus.objects.address import LinkTarget, parse_link, parse_link_target
from bus.objects.bridging import BRIDGE_OFFICE, RunningBridge
from gateway.process.settings import GatewaySettings
from tests.bus.mopclient import MopClient
from tests.bus.objclient import ObjClient
from tests.bus.pki import Pki
from tests.bus.test_objects_bridge import _call, _discover
from tests.conftest import OFFICES, MakeBroker

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops

WAIT = 5.0
#: A plain peer's bytes are refused at once; this is far below the handshake deadline the
#: brokers below get, so a close only that deadline would bring fails the test.
PROMPT = 2.0
MOP_OFFICES = {"test1": "secret"}

Stoppers = list[Callable[[], Awaitable[None]]]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
async def stoppers(make_broker: MakeBroker) -> AsyncIterator[Stoppers]:
    """Things to stop before the brokers (this fixture depends on ``make_broker``)."""
    started: Stoppers = []
    yield started
    for stop in reversed(started):
        await stop()


async def tls_broker(
    make_broker: MakeBroker, pki: Pki, mutual: bool = False, **overrides: Any
) -> Broker:
    settings: dict[str, Any] = {
        "open": True,
        "tls_cert": str(pki.cert),
        "tls_key": str(pki.key),
        "tls_ca": str(pki.ca_file) if mutual else None,
        "connect_timeout_ms": 30_000,
    }
    return await make_broker(**{**settings, **overrides})


async def objects(broker: Broker, stoppers: Stoppers) -> RunningBridge:
    running = await open_objects(broker, 0)
    stoppers.append(running.stop)
    return running


def assert_no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad]


async def assert_refused(first_words: Awaitable[object]) -> None:
    """The server closes the link (EOF or reset) within :data:`PROMPT` seconds of the
    client's first words."""
    with pytest.raises(ConnectionError):
        async with asyncio.timeout(PROMPT):
            await first_words


def stranger_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    trustme.CA().configure_trust(context)
    return context


# ---------------------------------------------------------------- the Object System listener


async def test_object_system_clients_exchange_objects_over_tls(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    broker = await tls_broker(make_broker, pki)
    running = await objects(broker, stoppers)
    assert running.bridge is not None  # bridged to its broker (in process)
    port = running.server.port
    a = await ObjClient.open(port, tls=pki.client(), **{"receive-mode": "no_echo"})
    b = await ObjClient.open(port, tls=pki.client())
    await a.expect("routing/subscribe/notify", routing_id=b.routing_id)
    await a.send({"type": "text/plain; charset=UTF-8"}, "hyvä".encode())
    got = await b.expect_any(lambda obj: obj.type is not None)
    assert got.payload.decode() == "hyvä" and got.route[0] == a.routing_id
    await b.send({"event": "chat"})
    assert (await a.expect("chat")).route[0] == b.routing_id
    assert b.writer.get_extra_info("ssl_object") is not None
    assert any("(TLS)" in r.getMessage() for r in caplog.records)
    for client in (a, b):
        await client.close()
    assert_no_tracebacks(caplog)


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mutual-tls"])
async def test_the_broker_bridges_its_own_object_system_whoever_signed_its_certificate(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    mutual: bool,
) -> None:
    """Issue 30 item 9: with a certificate from a private CA that the broker's host does not
    trust (no BUSGATE_BUS_TLS_CA), or without open mode, the broker's own bridge failed once
    at start and was never tried again: Object System clients got silence on
    services/request. It reaches its broker in process now, as the broker vouches for it."""
    monkeypatch.delenv(ENV_CA, raising=False)
    broker = await tls_broker(make_broker, pki, mutual=mutual, open=False)
    running = await objects(broker, stoppers)
    assert running.bridge is not None and running.down == ""
    tls = pki.client("alice") if mutual else pki.client()
    service_client = await connect(
        f"bus+tls://127.0.0.1:{broker.port}", "alice", OFFICES["alice"], tls=tls
    )
    stoppers.append(service_client.close)
    calc = Service(service_client, "calc", heartbeat_interval=0.5)

    @calc.command("add")
    async def add(req: Request) -> dict[str, Any]:
        return {"sum": req["a"] + req["b"]}

    await calc.start()
    stoppers.append(calc.stop)
    client = await ObjClient.open(running.server.port, tls=tls, receive_mode="no_echo")
    await _discover(client, "calc")
    [reply] = await _call(client, "1", name="calc", request="add", payload={"a": 2, "b": 3})
    assert orjson.loads(reply.payload) == {"sum": 5}
    await client.close()


async def test_the_brokers_own_bridge_comes_back_when_its_link_is_closed(
    make_broker: MakeBroker, pki: Pki, stoppers: Stoppers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30 item 9: the in-process bridge is a link like any other, which a manager (or
    the slow-consumer bound) may close; it reconnects, and Object System requests are served
    again, instead of the bridge going quiet for good."""
    monkeypatch.delenv(ENV_CA, raising=False)
    broker = await tls_broker(make_broker, pki, open=False)
    running = await objects(broker, stoppers)
    service_client = await connect(
        f"bus+tls://127.0.0.1:{broker.port}", "alice", OFFICES["alice"], tls=pki.client()
    )
    stoppers.append(service_client.close)
    calc = Service(service_client, "calc", heartbeat_interval=0.5)

    @calc.command("add")
    async def add(req: Request) -> dict[str, Any]:
        return {"sum": req["a"] + req["b"]}

    await calc.start()
    stoppers.append(calc.stop)
    client = await ObjClient.open(running.server.port, tls=pki.client(), receive_mode="no_echo")
    await _discover(client, "calc")
    [bridge_link] = [c["link"] for c in connections(broker) if c["office"] == BRIDGE_OFFICE]
    broker.close_link(bridge_link, CloseReason.SERVER_CLOSING, "disconnected by a manager")
    async with asyncio.timeout(20):  # reconnected within its backoff (0.5 s doubling)
        while not any(
            c["office"] == BRIDGE_OFFICE and c["ready"] and c["link"] != bridge_link
            for c in connections(broker)
        ):
            await asyncio.sleep(0.05)
    await _discover(client, "calc")
    [reply] = await _call(client, "2", name="calc", request="add", payload={"a": 2, "b": 5})
    assert orjson.loads(reply.payload) == {"sum": 7}
    await client.close()


async def test_a_plain_or_untrusting_client_is_refused_and_the_listener_carries_on(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = await tls_broker(make_broker, pki)
    port = (await objects(broker, stoppers)).server.port
    # a plain client's subscribe is no TLS hello: the link is closed at once
    plain = await ObjClient.open(port, subscribe=False)
    await assert_refused(plain.subscribe())
    await plain.close()
    # a TLS client that does not trust the listener's CA hears why
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        await ObjClient.open(port, tls=stranger_context())
    # the listener still serves TLS clients, and nothing above logged a traceback
    client = await ObjClient.open(port, tls=pki.client())
    assert client.routing_id
    await client.close()
    assert_no_tracebacks(caplog)


async def test_a_plain_client_that_sends_nothing_is_closed_at_the_handshake_deadline(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = await tls_broker(make_broker, pki, connect_timeout_ms=300)
    port = (await objects(broker, stoppers)).server.port
    silent = await ObjClient.open(port, subscribe=False)
    try:
        async with asyncio.timeout(PROMPT):
            assert await silent.recv(PROMPT) is None  # closed, not left hanging
    except ConnectionResetError:
        pass  # closed too
    await silent.close()
    assert_no_tracebacks(caplog)


# ---------------------------------------------------------------- server links


async def test_two_object_servers_linked_over_tls_route_an_object(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Mutual TLS on both: the link (and each bridge) presents the certificate of the
    # BUSGATE_BUS_TLS_CERT/_KEY variables and trusts the broker's --tls-ca.
    caplog.set_level(logging.INFO)
    cert, key = pki.client_files("objects-link")
    monkeypatch.setenv(ENV_CERT, str(cert))
    monkeypatch.setenv(ENV_KEY, str(key))
    monkeypatch.delenv(ENV_CA, raising=False)
    first = await tls_broker(make_broker, pki, mutual=True, objects_server_peers=("127.0.0.1",))
    a = await objects(first, stoppers)
    link = f"tls://127.0.0.1:{a.server.port}"
    second = await tls_broker(make_broker, pki, mutual=True, objects_links=(link,))
    b = await objects(second, stoppers)
    assert a.bridge is not None and b.bridge is not None
    await b.links[0].wait(WAIT)
    # the listeners ask for client certificates too
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await ObjClient.open(a.server.port, tls=pki.client())
    x = await ObjClient.open(a.server.port, tls=pki.client("x"))
    y = await ObjClient.open(b.server.port, tls=pki.client("y"))
    await y.send({"event": "hello/over-tls", "id": "h1"})
    got = await x.expect("hello/over-tls")
    assert got.route[0] == y.routing_id and got.id == "h1"
    for client in (x, y):
        await client.close()
    assert_no_tracebacks(caplog)


async def test_a_link_that_cannot_verify_the_other_server_says_why(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The target's bridge trusts its --tls-ca and presents the variables' certificate; the
    # linker, a plain broker with no CA configured, trusts only the system's CAs.
    caplog.set_level(logging.INFO)
    cert, key = pki.client_files("bridge")
    monkeypatch.setenv(ENV_CERT, str(cert))
    monkeypatch.setenv(ENV_KEY, str(key))
    monkeypatch.delenv(ENV_CA, raising=False)
    target = await objects(await tls_broker(make_broker, pki, mutual=True), stoppers)
    linker = await make_broker(open=True, objects_links=(f"tls://127.0.0.1:{target.server.port}",))
    running = await objects(linker, stoppers)
    await asyncio.wait_for(running.links[0].settled.wait(), WAIT)
    assert not running.links[0].connected.is_set()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "is down (TLS failed: CERTIFICATE_VERIFY_FAILED" in m and "BUSGATE_BUS_TLS_CA" in m
        for m in warnings
    ), warnings
    assert_no_tracebacks(caplog)


async def test_a_tls_link_to_a_plain_server_says_so(
    make_broker: MakeBroker, stoppers: Stoppers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    target = await objects(await make_broker(open=True), stoppers)
    linker = await make_broker(open=True, objects_links=(f"tls://127.0.0.1:{target.server.port}",))
    running = await objects(linker, stoppers)
    await asyncio.wait_for(running.links[0].settled.wait(), WAIT)
    assert not running.links[0].connected.is_set()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("(TLS failed:" in m and "does the other side speak TLS?" in m for m in warnings)
    assert_no_tracebacks(caplog)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("host:7890", LinkTarget("host", 7890)),
        ("tls://host:7890", LinkTarget("host", 7890, tls=True)),
        ("TLS://[::1]:7890", LinkTarget("::1", 7890, tls=True)),
        (" 10.0.0.5:1 ", LinkTarget("10.0.0.5", 1)),
    ],
)
def test_link_targets_parse_and_print(text: str, target: LinkTarget) -> None:
    assert parse_link_target(text) == target
    assert parse_link_target(str(target)) == target


@pytest.mark.parametrize("text", ["host", "tls://host", "tcp://host:7890", "tls://:7890", "h:0"])
def test_bad_link_targets_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT or tls://HOST:PORT"):
        parse_link_target(text)


def test_tls_links_are_refused_where_only_plain_links_are_made() -> None:
    assert parse_link("host:7890") == ("host", 7890)
    with pytest.raises(ConfigError, match="busgate broker and busgate run only"):
        parse_link("tls://host:7890")
    # The gateway's /ws links take tls:// too (tests/gateway/websocket/test_ws_tls.py); a bad one is
    # named.
    assert GatewaySettings(objects_links=("tls://127.0.0.1:7890",)).objects_links
    with pytest.raises(ConfigError, match="objects_links"):
        GatewaySettings(objects_links=("tls://127.0.0.1",))


# ---------------------------------------------------------------- the MOP listener


async def test_a_mop_post_office_connects_over_tls_and_publishes_to_the_bus(
    make_broker: MakeBroker,
    pki: Pki,
    stoppers: Stoppers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Mutual TLS: the post office presents a certificate; the listener's bus clients present
    # BUSGATE_BUS_TLS_CERT/_KEY's and trust the broker's --tls-ca.
    caplog.set_level(logging.INFO)
    cert, key = pki.client_files("mop-listener")
    monkeypatch.setenv(ENV_CERT, str(cert))
    monkeypatch.setenv(ENV_KEY, str(key))
    monkeypatch.delenv(ENV_CA, raising=False)
    broker = await tls_broker(make_broker, pki, mutual=True, offices={**OFFICES, **MOP_OFFICES})
    listener = await open_mop_listener(broker, "127.0.0.1", 0)
    stoppers.append(listener.stop)
    bob = await connect(
        f"bus+tls://127.0.0.1:{broker.port}", "bob", OFFICES["bob"], tls=pki.client("bob")
    )
    stoppers.append(bob.close)
    sub = await bob.subscribe("sensor")
    post_office = await MopClient.open(
        listener.port, "test1", MOP_OFFICES["test1"], tls=pki.client("test1")
    )
    stoppers.append(post_office.close)
    assert post_office.accept is not None
    post_office.publish("io", "sensor.temp", c=18.5)
    event = await asyncio.wait_for(sub.get(), WAIT)
    assert event.src == "test1.io" and event.payload.to_dict() == {"c": 18.5}
    assert_no_tracebacks(caplog)


async def test_a_plain_mop_post_office_is_refused_promptly(
    make_broker: MakeBroker, pki: Pki, stoppers: Stoppers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = await tls_broker(make_broker, pki, offices={**OFFICES, **MOP_OFFICES})
    listener = await open_mop_listener(broker, "127.0.0.1", 0)
    stoppers.append(listener.stop)
    plain = await MopClient.open(listener.port, "test1", MOP_OFFICES["test1"], connect=False)
    stoppers.append(plain.close)
    plain.send_connect()
    await assert_refused(plain.expect(type="manage.connect"))
    with pytest.raises(ssl.SSLCertVerificationError):
        await MopClient.open(listener.port, "test1", "x", tls=stranger_context(), connect=False)
    assert_no_tracebacks(caplog)
