"""History and last values from the JetStream stream (``bus/asyncio/jetstream_history.py``,
PROTOCOL.md 5.15 and 10.1) against a real ``nats-server -js``: the same pages the broker's
journal gives, and a 409 from a NATS server without JetStream."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.history import HistoryPage
from bus.errors import NotJournaledError
from tests.conftest import NATS_SERVER, NatsServer

pytestmark = [pytest.mark.nats, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def js_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server with JetStream for the module (each test its own types)."""
    if not os.path.exists(NATS_SERVER):
        pytest.fail(f"nats-server is not installed at {NATS_SERVER}: make install")
    server = NatsServer(0, "-js", "-sd", str(tmp_path_factory.mktemp("js"))).start()
    yield server
    server.stop()


@pytest.fixture
async def client(js_server: NatsServer) -> AsyncIterator[Client]:
    made = await connect(js_server.url, "alice")
    yield made
    await made.close()


def _ids(page: HistoryPage) -> list[tuple[str | None, int]]:
    return [(e.message.grp, e.message.payload["i"]) for e in page.events]


async def test_pages_forward_backward_and_a_major_type_as_from_the_journal(client: Client) -> None:
    started = time.time()
    events = [(t, i) for i in range(5) for t in ("vat.level", "vat.temp", "vat")]
    seqs = [await client.publish(t, {"i": i}, confirm=True) for t, i in events]
    newest = await client.history("vat.level", limit=2)
    assert _ids(newest) == [("vat.level", 3), ("vat.level", 4)]
    assert [e.seq for e in newest.events] == [seqs[9], seqs[12]]
    assert newest.more and newest.next == {"before": seqs[9]} and newest.seq >= seqs[-1]
    back = await client.history("vat.level", limit=2, **newest.next)
    assert _ids(back) == [("vat.level", 1), ("vat.level", 2)]
    forward = await client.history("vat.*", limit=3, since=seqs[2])
    assert _ids(forward) == [("vat.level", 1), ("vat.temp", 1), ("vat.level", 2)]
    assert forward.more and forward.next == {"since": seqs[6]}
    major = await client.history("vat", limit=4)  # vat and vat.>: two subjects, merged
    assert _ids(major) == [("vat", 3), ("vat.level", 4), ("vat.temp", 4), ("vat", 4)]
    timed = await client.history("vat", since_time=started - 1, limit=100)
    assert len(timed.events) == 15 and not timed.more
    assert all(started - 1 <= e.time <= time.time() + 1 for e in timed.events)
    assert (await client.history("vat.none")).events == []


async def test_the_newest_of_a_rare_type_among_many_others(client: Client) -> None:
    rare = []
    for block in range(4):
        for i in range(150):
            await client.publish("din.busy", {"i": i})
        rare.append(await client.publish("din.rare", {"i": block}, confirm=True))
    page = await client.history("din.rare", limit=3)
    assert [e.seq for e in page.events] == rare[1:] and page.more
    assert page.next == {"before": rare[1]}
    rest = await client.history("din.rare", limit=3, **page.next)
    assert [e.seq for e in rest.events] == rare[:1] and not rest.more


async def test_last_gives_the_newest_of_each_type_then_live(
    client: Client, js_server: NatsServer
) -> None:
    for t, i in [("oven.a", 1), ("oven.b", 2), ("oven.a", 3), ("fan.x", 4)]:
        await client.publish(t, {"i": i}, confirm=True)
    reader = await connect(js_server.url, "bob")
    try:
        sub = await reader.subscribe("oven.*", last=True)
        first = [await sub.get(10) for _ in range(2)]
        assert [(m.grp, m.payload["i"]) for m in first] == [("oven.b", 2), ("oven.a", 3)]
        await client.publish("oven.b", {"i": 5})
        live = await sub.get(10)
        assert (live.grp, live.payload["i"]) == ("oven.b", 5)
        with pytest.raises(TimeoutError):
            await sub.get(0.3)
    finally:
        await reader.close()


async def test_without_jetstream_history_and_last_are_409(nats_server: NatsServer) -> None:
    client = await connect(nats_server.url, "alice")
    try:
        await client.publish("plain.x", {"i": 1})
        with pytest.raises(NotJournaledError, match="without JetStream"):
            await client.history("plain.x")
        with pytest.raises(NotJournaledError):
            await client.subscribe("plain.*", last=True)
        await asyncio.sleep(0)
    finally:
        await client.close()
