"""Caller identity and trace context end to end (PROTOCOL.md 5.11).

A real broker (journal on, the gateway's post office trusted to act for callers), a real
gateway under uvicorn with API keys, and a service on its own bus client: HTTP -> gateway ->
service -> nested request -> ACK -> HTTP response, and the journal.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bus import otel
from bus.asyncio.client import Client, connect
from bus.asyncio.service import Request, Service
from bus.broker import Broker, BrokerConfig
from bus.broker.config import JournalSetting
from bus.errors import NakError
from bus.journal import JournalReader
from bus.message import trace as bus_trace
from bus.message.message import Message, decode_message
from gateway.process.settings import ApiKey
from tests.gateway.conftest import Stack, base_settings

WAIT = 10.0
GATEWAY_OFFICE = ("gw", "gw-secret")
KEYS = (ApiKey(name="ops", key="ops-key-0123456789"), ApiKey(name="reader", key="reader-key-0123"))
INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _IdentityStack(Stack):
    """The shared stack, its broker with a journal and the gateway's post office trusted."""

    def __init__(self, journal: Path) -> None:
        settings = base_settings(
            api_keys=KEYS, bus_name=GATEWAY_OFFICE[0], bus_secret=GATEWAY_OFFICE[1]
        )
        super().__init__(settings, demo=False)
        self.journal = journal
        self.service: Service | None = None

    async def start_broker(self) -> None:
        config = BrokerConfig(
            host="127.0.0.1",
            port=self.broker_port,
            open=True,
            offices={GATEWAY_OFFICE[0]: GATEWAY_OFFICE[1], "alice": "alice-secret"},
            gateways=frozenset({GATEWAY_OFFICE[0]}),
            journal=JournalSetting(str(self.journal)),
        )
        self.broker = Broker(config)
        await self.broker.start()

    async def start_demo(self) -> None:
        self.service_client = await connect(self.settings.bus_url, "svc")
        self.service = _who_service(self.service_client)
        await self.service.start()

    async def _start(self) -> None:
        await self.start_broker()
        await self.start_demo()
        await self._start_gateway_only()
        await self.wait_ready()

    async def stop_demo(self) -> None:
        if self.service is not None:
            await self.service.stop()
        await super().stop_demo()


def _who_service(client: Client) -> Service:
    service = Service(client, "who", heartbeat_interval=1.0)

    @service.command("whoami")
    async def whoami(req: Request) -> dict[str, Any]:
        return {"caller": req.caller, "trace": req.trace}

    @service.command("secret", allow=["ops", "alice"])
    async def secret(req: Request) -> dict[str, Any]:
        return {"secret": 42}

    @service.command("nested")
    async def nested(req: Request) -> dict[str, Any]:
        inner = await client.request("who", "whoami")
        return {"trace": req.trace, "inner": inner.payload.to_dict()}

    return service


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_IdentityStack]:
    running = _IdentityStack(tmp_path_factory.mktemp("journal"))
    try:
        yield running.start()  # type: ignore[misc]
    finally:
        running.stop()


@pytest.fixture
async def http(stack: _IdentityStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


def _key(name: str) -> dict[str, str]:
    return {"X-API-Key": next(k.key for k in KEYS if k.name == name)}


# -- caller identity -------------------------------------------------------------------------


async def test_a_service_sees_the_api_key_name_of_an_http_caller(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/who", json={"CMD": "whoami"}, headers=_key("ops"))
    assert response.status_code == 200, response.text
    assert response.json()["payload"]["caller"] == "ops"


async def test_protocol_names_the_api_key_caller_as_a_service_sees_it(
    http: httpx.AsyncClient,
) -> None:
    """Issue 30 item 13: PROTOCOL.md 5.11 said an API key's caller is `key:<name>`, but a
    service sees `<name>`: a service written by the document (allow=["key:ops"]) refused
    every caller. What the document says is what arrives."""
    protocol = (Path(__file__).parents[2] / "docs" / "PROTOCOL.md").read_text()
    section = protocol.split("### 5.11 ", 1)[1].split("\n### ", 1)[0]
    said = re.search(r"`([^`]*<name>[^`]*)` for an API key", " ".join(section.split()))
    assert said is not None, "PROTOCOL.md 5.11 no longer says what an API key's caller is"
    response = await http.post("/v1/request/who", json={"CMD": "whoami"}, headers=_key("ops"))
    assert response.status_code == 200, response.text
    assert response.json()["payload"]["caller"] == said.group(1).replace("<name>", "ops")


async def test_a_service_sees_the_post_office_of_a_bus_caller(stack: _IdentityStack) -> None:
    async def ask() -> dict[str, Any]:
        client = await connect(stack.settings.bus_url, "alice", secret="alice-secret")
        try:
            return (await client.request("who", "whoami", timeout=WAIT)).payload.to_dict()
        finally:
            await client.close()

    assert (await stack.run(ask()))["caller"] == "alice"


async def test_a_bus_client_cannot_pass_for_an_http_caller(stack: _IdentityStack) -> None:
    async def ask() -> dict[str, Any]:
        client = await connect(stack.settings.bus_url, "alice", secret="alice-secret")
        try:
            # CLR names "ops" (an API key the service trusts): the broker overwrites it.
            forged = Message.request("who", "whoami", {}, reply_to=client.inbox, caller="ops")
            ack = await client.call(forged, timeout=WAIT)
            return {"forged": ack.payload.to_dict()}
        finally:
            await client.close()

    got = await stack.run(ask())
    assert got["forged"]["caller"] == "alice"


async def test_per_command_authorization_refuses_with_403(
    http: httpx.AsyncClient, stack: _IdentityStack
) -> None:
    refused = await http.post("/v1/request/who", json={"CMD": "secret"}, headers=_key("reader"))
    assert refused.status_code == 403, refused.text
    assert "'reader' may not call 'secret'" in refused.json()["error"]["message"]
    allowed = await http.post("/v1/request/who", json={"CMD": "secret"}, headers=_key("ops"))
    assert allowed.status_code == 200 and allowed.json()["payload"] == {"secret": 42}

    async def as_alice() -> int:
        client = await connect(stack.settings.bus_url, "alice", secret="alice-secret")
        try:
            return int((await client.request("who", "secret", timeout=WAIT)).payload["secret"])
        finally:
            await client.close()

    assert await stack.run(as_alice()) == 42

    async def as_anonymous() -> int | None:
        client = await connect(stack.settings.bus_url)
        try:
            await client.request("who", "secret", timeout=WAIT)
        except NakError as exc:
            return exc.rcd
        finally:
            await client.close()
        return None

    assert await stack.run(as_anonymous()) == 403


# -- trace context ---------------------------------------------------------------------------


async def test_one_trace_id_from_http_through_a_nested_request_and_back(
    http: httpx.AsyncClient, stack: _IdentityStack
) -> None:
    response = await http.post(
        "/v1/request/who",
        json={"CMD": "nested"},
        headers={**_key("ops"), "traceparent": INCOMING},
    )
    assert response.status_code == 200, response.text
    trace_id = bus_trace.trace_id(INCOMING)
    body = response.json()
    outer, inner = body["payload"]["trace"], body["payload"]["inner"]["trace"]
    # the service saw the caller's trace; its own request carried a child of it
    assert outer == INCOMING
    assert bus_trace.trace_id(inner) == trace_id and inner != outer
    assert body["header"]["TRC"] == INCOMING  # the ACK carries its request's trace
    assert response.headers["traceparent"] == INCOMING
    mid = response.headers["X-Busgate-Mid"]
    traced = await _journal_traces(stack, trace_id, 4)
    kinds = sorted(typ for typ, _ in traced)
    assert kinds == ["ACK", "ACK", "RQS", "RQS"]
    assert ("RQS", mid) in {(typ, m) for typ, m in traced}


async def _journal_traces(
    stack: _IdentityStack, trace_id: str, count: int
) -> list[tuple[str, str]]:
    """(TYP, MID) of the journal records of one trace, once ``count`` of them are written."""

    async def read() -> list[tuple[str, str]]:  # on the broker's loop: it owns the journal
        assert stack.broker is not None and stack.broker.journal is not None
        stack.broker.journal.flush()
        found = []
        for record in JournalReader(stack.journal).records():
            message = decode_message(record.raw)
            if message.trc and bus_trace.trace_id(message.trc) == trace_id:
                found.append((message.typ or "", message.mid or ""))
        return found

    found: list[tuple[str, str]] = []
    for _ in range(int(WAIT / 0.05)):
        found = await stack.run(read())
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    return found


async def test_without_a_traceparent_the_gateway_starts_one(http: httpx.AsyncClient) -> None:
    first = await http.post("/v1/request/who", json={"CMD": "whoami"}, headers=_key("ops"))
    second = await http.post(
        "/v1/request/who",
        json={"CMD": "whoami"},
        headers={**_key("ops"), "traceparent": "00-zz-not-valid"},
    )
    traces = [r.headers["traceparent"] for r in (first, second)]
    assert all(bus_trace.parse(t) == t for t in traces)
    assert [r.json()["payload"]["trace"] for r in (first, second)] == traces
    assert bus_trace.trace_id(traces[0]) != bus_trace.trace_id(traces[1])


async def test_an_error_answer_carries_the_trace_too(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/request/who",
        json={"CMD": "secret"},
        headers={**_key("reader"), "traceparent": INCOMING},
    )
    assert response.status_code == 403
    assert response.headers["traceparent"] == INCOMING
    assert response.json()["error"]["response"]["header"]["TRC"] == INCOMING


def test_traceparent_parsing() -> None:
    assert bus_trace.parse(INCOMING) == INCOMING
    assert bus_trace.parse(INCOMING.upper()) is None
    assert bus_trace.parse("ff" + INCOMING[2:]) is None
    assert bus_trace.parse(INCOMING.replace("00f067aa0ba902b7", "0" * 16)) is None
    assert bus_trace.parse("01" + INCOMING[2:] + "-future") == INCOMING
    assert bus_trace.parse(INCOMING + "-x") is None  # version 00 has exactly four parts
    made = bus_trace.new()
    assert bus_trace.parse(made) == made
    child = bus_trace.child(made)
    assert bus_trace.trace_id(child) == bus_trace.trace_id(made) and child != made


def test_a_new_trace_is_valid_and_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    made = {bus_trace.new() for _ in range(1000)}
    assert len(made) == 1000 and all(bus_trace.parse(text) == text for text in made)
    assert len({bus_trace.trace_id(text) for text in made}) == 1000
    # an all-zero trace or parent id is invalid (W3C): such a draw is drawn again
    draws = iter([0, 5 << 64, 7 << 64 | 9])
    monkeypatch.setattr(bus_trace, "getrandbits", lambda bits: next(draws))
    assert bus_trace.new() == f"00-{7:032x}-{9:016x}-01"


# -- OpenTelemetry ---------------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[Any]:
    """An SDK tracer provider busgate uses, its spans kept in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.configure(provider)
    try:
        yield exporter
    finally:
        otel.configure(None)
        provider.shutdown()


async def test_spans_link_gateway_service_and_nested_request_parent_to_child(
    http: httpx.AsyncClient, spans: Any
) -> None:
    response = await http.post(
        "/v1/request/who",
        json={"CMD": "nested"},
        headers={**_key("ops"), "traceparent": INCOMING},
    )
    assert response.status_code == 200, response.text
    trace_id = int(bus_trace.trace_id(INCOMING), 16)
    by_name: dict[str, Any] = {}
    for _ in range(int(WAIT / 0.05)):  # the gateway's span ends after the answer is written
        by_name = {span.name: span for span in spans.get_finished_spans()}
        if len(by_name) >= 3:
            break
        await asyncio.sleep(0.05)
    gateway = by_name["POST /v1/request/who"]
    outer, inner = by_name["who nested"], by_name["who whoami"]
    assert {s.context.trace_id for s in (gateway, outer, inner)} == {trace_id}
    assert gateway.parent.span_id == int(INCOMING[36:52], 16)  # the HTTP caller's span
    assert outer.parent.span_id == gateway.context.span_id
    assert inner.parent.span_id == outer.context.span_id
    # what went on names the spans: the HTTP answer the gateway's, the nested request the outer
    payload = response.json()["payload"]
    assert response.headers["traceparent"] == _traceparent(gateway)
    assert payload["trace"] == _traceparent(gateway)
    assert payload["inner"]["trace"] == _traceparent(outer)


def _traceparent(span: Any) -> str:
    ids = span.context
    return f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{int(ids.trace_flags):02x}"


def test_without_a_provider_no_span_is_made() -> None:
    assert not otel.active()
    with otel.span("x", INCOMING) as own:
        assert own is None
