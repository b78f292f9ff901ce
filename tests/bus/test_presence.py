"""Presence (bus/presence.py sans-I/O, bus/broker/presence_links.py on a real broker; PROTOCOL.md
5.16): announcements read and written, an origin's snapshot replacing what was known, silent
origins forgotten, the broker's links as bus clients (relays and system types left out)."""

from __future__ import annotations

import asyncio
import json

import pytest

from bus.discovery.topics import overlaps
from bus.message.message import MessageType
from bus.presence import (
    CENTRAL,
    PRESENCE_TYPE,
    Announcement,
    Kind,
    PresenceBoard,
    Present,
    announcement_payload,
    read_announcement,
)
from tests.conftest import MakeClient
from tests.docexamples import examples


def _client(id_: str, *patterns: str, transport: str = "sse") -> Present:
    return Present(id_, transport, "ann", 100.0, patterns)


@pytest.mark.parametrize(
    ("a", "b", "both"),
    [
        ("sensor.*", "*.temp", True),
        ("sensor", "sensor.temp.c", True),  # a major type: sensor and everything under it
        ("sensor", "pump.*", False),
        ("sensor.>", "sensor", True),
        ("a.*.c", "a.b.*", True),
        ("a.*", "a.b.c", False),
        (">", "x", True),
    ],
)
def test_overlaps(a: str, b: str, both: bool) -> None:
    assert overlaps(a, b) is both and overlaps(b, a) is both


def test_an_announcement_round_trips_and_junk_is_ignored() -> None:
    sent = Announcement("gw-1", Kind.JOIN, (_client("c1", "sensor.*", "pump.on"),), 5.0)
    assert read_announcement(announcement_payload(sent)) == sent
    for junk in (
        None,
        [],
        {"origin": "", "kind": "join"},
        {"origin": "x", "kind": "shout"},
        {"origin": "x", "kind": "join", "interval": float("nan")},
    ):
        assert read_announcement(junk) is None
    bad_clients = {
        "origin": "x",
        "kind": "snapshot",
        "clients": [
            {"id": "", "transport": "sse", "since": 1.0},
            {"id": "a", "transport": "pigeon", "since": 1.0},
            {"id": "b", "transport": "ws", "since": "yesterday"},
            {"id": "c", "transport": "ws", "since": 1.0, "patterns": ["ok.*", "a.>.b", 7]},
        ],
    }
    read = read_announcement(bad_clients)
    assert read is not None and [c.id for c in read.clients] == ["c"]
    assert read.clients[0].patterns == ("ok.*",)


def test_a_snapshot_replaces_an_origin_and_silence_forgets_it() -> None:
    board = PresenceBoard("gw-me")
    board.join(_client("mine", "sensor.*"))
    first = board.receive(
        Announcement("gw-2", Kind.SNAPSHOT, (_client("a", "sensor.*"), _client("b", "pump.*"))),
        now=10.0,
    )
    assert [(c.before, c.after and c.after.id) for c in first] == [(None, "a"), (None, "b")]
    assert [c.id for c in board.clients("sensor.temp")] == ["a", "mine"]
    changed = board.receive(
        Announcement("gw-2", Kind.SNAPSHOT, (_client("b", "pump.*", "sensor.hum"),)), now=12.0
    )
    assert [(c.before and c.before.id, c.after and c.after.id) for c in changed] == [
        ("a", None),
        ("b", "b"),
    ]
    assert board.receive(Announcement("gw-me", Kind.SNAPSHOT, ()), now=12.0) == []  # our own
    assert board.receive(Announcement("gw-3", Kind.PROBE), now=12.0) == []
    assert board.expire(now=12.0 + 3 * 5.0) == []  # 15 s: not yet
    gone = board.expire(now=12.0 + 3 * 5.0 + 0.1)
    assert [c.before and c.before.id for c in gone] == ["b"] and board.origins == []
    board.receive(
        Announcement(CENTRAL, Kind.SNAPSHOT, (_client("l", ">", transport="bus"),), 0.0), 1
    )
    assert board.expire(now=1e9) == []  # the broker's links: fed by its answers, not expired
    bye = board.receive(Announcement(CENTRAL, Kind.BYE), now=2.0)
    assert [c.before and c.before.id for c in bye] == ["l"]


def test_alive_keeps_an_origin_and_a_count_we_do_not_hold_asks_for_snapshots() -> None:
    # Issue 35: the periodic word is ``alive`` with a count, not every client every 5 s.
    sent = Announcement("gw-2", Kind.ALIVE, (), 5.0, 2)
    assert read_announcement(announcement_payload(sent)) == sent
    assert announcement_payload(sent)["clients"] == []  # no client travels
    for junk in (-1, True, "2", 1.5):
        read = read_announcement({"origin": "gw-2", "kind": "alive", "count": junk})
        assert read is not None and read.count is None  # a bad count is no count
    board = PresenceBoard("gw-me")
    board.join(_client("mine", "sensor.*"))
    assert board.alive(5.0) == Announcement("gw-me", Kind.ALIVE, (), 5.0, 1)
    assert board.missing(sent)  # a stranger with clients: we lack its snapshot
    assert board.receive(sent, now=10.0) == [] and board.origins == []  # not made up
    assert not board.missing(Announcement("gw-2", Kind.ALIVE, (), 5.0, 2))  # asked already
    board.receive(
        Announcement("gw-2", Kind.SNAPSHOT, (_client("a", "x"), _client("b", "y"))), now=10.0
    )
    assert not board.missing(sent)  # the snapshot came: it holds what the count says
    for now in (20.0, 30.0):  # only alive for longer than three intervals: still known
        assert board.receive(sent, now=now) == [] and board.expire(now=now + 1.0) == []
    assert [c.id for c in board.clients()] == ["a", "b", "mine"]
    board.receive(Announcement("gw-2", Kind.LEAVE, (_client("b", "y"),)), now=31.0)
    assert board.missing(sent)  # it says 2, we hold 1: a leave we heard of it never sent
    assert not board.missing(Announcement("gw-2", Kind.ALIVE, (), 5.0, 1))
    assert not board.missing(board.alive(5.0))  # our own
    assert [c.before and c.before.id for c in board.expire(now=31.0 + 15.1)] == ["a"]


async def test_the_broker_lists_its_links_leaves_out_relays_and_announces_changes(
    make_client: MakeClient,
) -> None:
    watcher = await make_client(name="admin")
    notices = await watcher.subscribe(PRESENCE_TYPE)
    alice = await make_client(name="alice")
    await alice.subscribe("sensor.*")
    await alice.subscribe("sensor.temp", relay=True)  # a relay: not counted
    await alice.subscribe("OAM.SERVICE")  # the system's: not counted
    joined = await notices.get(5)
    assert joined.typ == MessageType.HBT.value and joined.src == CENTRAL
    announcement = read_announcement(joined.payload_data())
    assert announcement is not None and announcement.kind is Kind.JOIN
    (entry,) = announcement.clients
    assert (entry.id, entry.transport, entry.caller, entry.patterns) == (
        alice.inbox, "bus", "alice", ("sensor.*",)
    )  # fmt: skip
    snapshot = read_announcement((await watcher.manage("manage.presence")).payload_data())
    assert snapshot is not None and [c.id for c in snapshot.clients] == [alice.inbox]
    await alice.close()
    left = read_announcement((await notices.get(5)).payload_data())
    assert left is not None and left.kind is Kind.LEAVE and left.clients[0].id == alice.inbox
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(notices.get(), 0.2)


def test_the_documented_announcement() -> None:
    (example,) = examples("presence")
    client = json.loads(example.body["clients"])
    payload = {"origin": example.body["origin"], "kind": example.body["kind"], "interval": 0.0,
               "clients": [client]}  # fmt: skip
    announcement = read_announcement(payload)
    assert announcement is not None and announcement.kind is Kind.JOIN
    (entry,) = announcement.clients
    assert all(entry.wants(p) for p in example.body["present"].split())
    assert not any(entry.wants(p) for p in example.body["absent"].split())
