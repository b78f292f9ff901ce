"""A broker link's output batching (``bus/broker/link.py``), on the real broker and client."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import bus.asyncio.transport as transport_module
import bus.broker.link as link_module
from bus.broker import Broker
from bus.broker.link import COALESCE_SECONDS, Link
from tests.conftest import MakeClient


class _Ticking:
    """A monotonic clock that moves on by ``step`` each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


async def test_a_long_input_batch_is_routed_on_before_it_ends(
    broker: Broker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher, subscriber = await make_client(), await make_client()
    subscription = await subscriber.subscribe("batch.*")
    sub_link = next(link for link in broker._links.values() if link.conn and link.conn.inbox
                    == subscriber.inbox)  # fmt: skip
    batches: list[int] = []
    write_batch = Link.write_batch

    def record(link: Link) -> None:
        if link is sub_link and link.batch:
            batches.append(len(link.batch))
        write_batch(link)

    monkeypatch.setattr(Link, "write_batch", record)
    # The publisher's three events leave in one write (its clock stands still); routing each
    # takes the broker longer than COALESCE_SECONDS (its clock runs).
    monkeypatch.setattr(transport_module, "time", SimpleNamespace(monotonic=lambda: 5.0))
    monkeypatch.setattr(
        link_module, "time", SimpleNamespace(monotonic=_Ticking(COALESCE_SECONDS).monotonic)
    )
    for n in range(3):
        await publisher.publish("batch.tick", {"n": n})
    for n in range(3):
        event = await asyncio.wait_for(anext(subscription), 5)
        assert event.payload_data() == {"n": n}
    assert batches == [1, 1, 1]  # each written as soon as its turn took too long


async def test_a_short_input_batch_leaves_in_one_write(
    broker: Broker, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher, subscriber = await make_client(), await make_client()
    subscription = await subscriber.subscribe("batch.*")
    batches: list[int] = []
    write_batch = Link.write_batch

    def record(link: Link) -> None:
        if link.batch and b"batch.tick" in link.batch[0]:
            batches.append(len(link.batch))
        write_batch(link)

    monkeypatch.setattr(Link, "write_batch", record)
    monkeypatch.setattr(transport_module, "time", SimpleNamespace(monotonic=lambda: 5.0))
    monkeypatch.setattr(link_module, "time", SimpleNamespace(monotonic=lambda: 7.0))
    for n in range(3):
        await publisher.publish("batch.tick", {"n": n})
    for n in range(3):
        event = await asyncio.wait_for(anext(subscription), 5)
        assert event.payload_data() == {"n": n}
    assert batches == [3]
