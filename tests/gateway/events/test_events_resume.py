"""SSE that resumes from the broker's journal: a client coming back with ``Last-Event-ID`` to
another gateway process (or asking ``?since=``) gets exactly what it missed, then live events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import uvicorn

from bus.asyncio.client import connect
from gateway.app import create_app
from tests.conftest import NATS_SERVER, NatsServer
from tests.gateway.conftest import GATEWAY_HTTP, Stack, base_settings, free_port, running_stack
from tests.gateway.routes.test_events import SseReader

pytestmark = pytest.mark.asyncio(loop_scope="function")


@pytest.fixture(params=["broker", pytest.param("jetstream", marks=pytest.mark.nats)])
def two_gateways(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Stack, str]]:
    """Two gateway processes on one bus that keeps events: the broker with a journal, or a
    nats-server with JetStream (the BUSGATE stream, PROTOCOL.md 10.1)."""
    with contextlib.ExitStack() as resources:
        if request.param == "jetstream":
            if not os.path.exists(NATS_SERVER):
                pytest.fail(f"nats-server is not installed at {NATS_SERVER}: make install")
            nats = NatsServer(0, "-js", "-sd", str(tmp_path / "js")).start()
            resources.callback(nats.stop)
            bus = {"bus_url": nats.url}
        else:
            # fsync none: these tests are about what SSE resumes give, not the disk's speed
            bus = {"journal": str(tmp_path), "journal_fsync": "none"}
        yield resources.enter_context(_second_gateway(**bus))


@contextlib.contextmanager
def _second_gateway(**bus: str) -> Iterator[tuple[Stack, str]]:
    with running_stack(base_settings(), demo=False, http=GATEWAY_HTTP, **bus) as stack:
        port = free_port()
        app = create_app(replace(stack.settings, port=port))

        async def serve() -> tuple[uvicorn.Server, asyncio.Task[None]]:
            config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
            server = uvicorn.Server(config)
            task = asyncio.create_task(server.serve())
            async with asyncio.timeout(15):
                while not server.started:
                    await asyncio.sleep(0.01)
            await app.state.gateway.bridge.wait_connected(15)
            return server, task

        server, task = stack.call(serve())
        try:
            yield stack, f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            stack.call(asyncio.wait_for(task, 20))


async def _events(
    http: httpx.AsyncClient, url: str, count: int, **kw: object
) -> list[dict[str, str]]:
    async with http.stream("GET", url, **kw) as response:  # type: ignore[arg-type]
        assert response.status_code == 200
        reader = SseReader(response)
        return [await reader.next_event() for _ in range(count)]


async def test_last_event_id_on_another_gateway_replays_exactly_what_was_missed(
    two_gateways: tuple[Stack, str],
) -> None:
    stack, other = two_gateways
    async with httpx.AsyncClient(timeout=15.0) as http:
        first = f"{stack.url}/v1/subscribe?types=tank.*"
        async with http.stream("GET", first) as response:
            reader = SseReader(response)
            for i in range(3):
                await http.post(f"{stack.url}/v1/publish/tank.level", json={"i": i})
            seen = [await reader.next_event() for _ in range(3)]
        assert all(event["id"].isdigit() for event in seen)  # journal numbers
        # Gone; meanwhile five more, and one of a type it did not ask for.
        for i in range(3, 8):
            await http.post(f"{stack.url}/v1/publish/tank.level?confirm=1", json={"i": i})
        await http.post(f"{stack.url}/v1/publish/pump.state?confirm=1", json={"i": -1})
        headers = {"Last-Event-ID": seen[-1]["id"]}
        async with http.stream(
            "GET", f"{other}/v1/subscribe?types=tank.*", headers=headers
        ) as response:
            reader = SseReader(response)
            missed = [await reader.next_event() for _ in range(5)]
            await http.post(f"{other}/v1/publish/tank.level", json={"i": 8})
            live = await reader.next_event()
        got = [int(json.loads(e["data"])["payload"]["i"]) for e in [*missed, live]]
        assert got == [3, 4, 5, 6, 7, 8]  # exactly what it missed, then live, none twice
        ids = [int(e["id"]) for e in [*missed, live]]
        assert ids == sorted(ids) and ids[0] > int(seen[-1]["id"])


async def test_since_a_time_or_a_sequence_number_starts_there(
    two_gateways: tuple[Stack, str],
) -> None:
    stack, other = two_gateways
    async with httpx.AsyncClient(timeout=15.0) as http:
        seqs = []
        for i in range(4):
            answer = await http.post(f"{stack.url}/v1/publish/mill.rpm?confirm=1", json={"i": i})
            seqs.append(answer.json()["seq"])
        url = f"{other}/v1/subscribe"
        events = await _events(http, url, 4, params={"types": "mill.*", "since": "10m"})
        assert [e["id"] for e in events] == [str(seq) for seq in seqs]
        events = await _events(http, url, 2, params={"types": "mill.*", "since": str(seqs[1])})
        assert [e["id"] for e in events] == [str(seq) for seq in seqs[2:]]
        # the same from the gateway that answers streams in its HTTP protocol (sse_resume.py)
        lean = f"{stack.url}/v1/subscribe"
        events = await _events(http, lean, 4, params={"types": "mill.*", "since": "10m"})
        assert [e["id"] for e in events] == [str(seq) for seq in seqs]
        events = await _events(http, lean, 2, params={"types": "mill.*", "since": str(seqs[1])})
        assert [e["id"] for e in events] == [str(seq) for seq in seqs[2:]]
        bad = await http.get(url, params={"types": "mill.*", "since": "soon"})
        assert bad.status_code == 400 and "sequence number" in bad.json()["error"]["message"]


async def test_since_with_a_backlog_larger_than_the_queues_streams_all_of_it_in_order(
    two_gateways: tuple[Stack, str],
) -> None:
    # More than the gateway's bus subscription and its SSE queue hold (10,000 each): the
    # stream must start at once and give every event, in order, then live ones.
    stack, other = two_gateways
    total = 12_000
    async with (
        await connect(stack.settings.bus_url) as publisher,
        httpx.AsyncClient(timeout=15.0) as http,
    ):
        for i in range(total):
            await publisher.publish("vat.temp", {"i": i})
        await publisher.flush(timeout=30.0)
        params = {"types": "vat.*", "since": "0"}
        async with http.stream("GET", f"{other}/v1/subscribe", params=params) as response:
            assert response.status_code == 200
            reader = SseReader(response)
            got = [json.loads((await reader.next_event())["data"]) for _ in range(total)]
            await publisher.publish("vat.temp", {"i": total})
            live = json.loads((await reader.next_event())["data"])
    assert [event["payload"]["i"] for event in [*got, live]] == list(range(total + 1))
