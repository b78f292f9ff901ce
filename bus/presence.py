"""Presence: who subscribes to which types, across every gateway and the bus (PROTOCOL.md 5.16).

Sans-I/O: announcements in and out as plain data, changes out as :class:`Change`; time is an
argument. Each *origin* (a gateway process, or ``central``: the broker for its own links) says
who its subscribers are on the system type :data:`PRESENCE_TYPE` (``TYP=HBT``):

- ``snapshot``: every client it has now (when it connects, and in answer to a ``probe``), which
  replaces what was known of that origin;
- ``join`` / ``leave``: clients came (or changed their patterns) / went;
- ``alive``: every ``interval`` seconds, how many clients it has (``count``), and nothing else: a
  follower that does not know the origin, or holds another count for it, missed something and
  asks for the snapshots again (:meth:`PresenceBoard.missing`); so an origin of 100,000 clients
  does not send them all every few seconds;
- ``probe``: a new origin asks the others for their snapshots;
- ``bye``: the origin stops (its clients are gone).

A :class:`PresenceBoard` keeps every origin's clients, forgets an origin that said nothing for
:data:`EXPIRY` of its intervals, and answers "who subscribes to types matching this pattern"
(:func:`bus.discovery.topics.overlaps`: a client of ``sensor.*`` is present for ``sensor.temp`` and
for
``*.temp``). Every change it makes is returned as a :class:`Change` (before, after), from which
a stream with ``?presence=1`` tells its client of joins and leaves.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bus.discovery.topics import check_pattern, overlaps
from bus.errors import ConfigError

__all__ = [
    "CENTRAL",
    "DEFAULT_INTERVAL",
    "EXPIRY",
    "PRESENCE_TYPE",
    "Announcement",
    "Change",
    "Kind",
    "Present",
    "PresenceBoard",
    "announcement_payload",
    "read_announcement",
]

#: The system type presence travels on (``TYP=HBT``, as heartbeats).
PRESENCE_TYPE: Final = "OAM.PRESENCE"
#: The origin name of the broker's own links (bus clients).
CENTRAL: Final = "central"
#: Seconds between an origin's snapshots unless it says otherwise.
DEFAULT_INTERVAL: Final = 5.0
#: Intervals without a word after which an origin and its clients are forgotten.
EXPIRY: Final = 3.0
#: Clients one announcement may list at most (a bigger origin is cut, and logged by its driver).
MAX_CLIENTS: Final = 10_000
#: Transports a client may be on.
TRANSPORTS: Final = frozenset({"sse", "ws", "bus"})


class Kind(enum.StrEnum):
    """What an announcement says."""

    SNAPSHOT = "snapshot"
    JOIN = "join"
    LEAVE = "leave"
    PROBE = "probe"
    BYE = "bye"
    ALIVE = "alive"


@dataclass(frozen=True)
class Present:
    """One subscriber.

    Attributes:
        id: unique on the bus (``sse-<origin>-<n>``, ``ws-<routing id>``, a bus link's inbox).
        transport: ``sse``, ``ws`` or ``bus``.
        caller: who it is (an API key's name, ``jwt:<sub>``, a post office; ``""``: unknown).
        since: when it subscribed, epoch seconds.
        patterns: its subscription patterns.
    """

    id: str
    transport: str
    caller: str
    since: float
    patterns: tuple[str, ...]

    def wants(self, pattern: str) -> bool:
        """Whether it subscribes to some type matching ``pattern``."""
        return any(overlaps(mine, pattern) for mine in self.patterns)

    def to_json(self) -> dict[str, Any]:
        """As ``GET /v1/presence`` lists it: ``{id, transport, caller, since}``."""
        return {"id": self.id, "transport": self.transport, "caller": self.caller,
                "since": self.since}  # fmt: skip


@dataclass(frozen=True)
class Change:
    """A client as it was and as it is now (``None``: absent)."""

    before: Present | None
    after: Present | None


@dataclass(frozen=True)
class Announcement:
    """One message on :data:`PRESENCE_TYPE`."""

    origin: str
    kind: Kind
    clients: tuple[Present, ...] = ()
    interval: float = DEFAULT_INTERVAL
    count: int | None = None  # ``alive``: how many clients the origin has


def announcement_payload(announcement: Announcement) -> dict[str, Any]:
    """The payload of an announcement (a plain dict: the message's PLD)."""
    payload: dict[str, Any] = {
        "origin": announcement.origin,
        "kind": announcement.kind.value,
        "interval": float(announcement.interval),
        "clients": [
            {**client.to_json(), "patterns": list(client.patterns)}
            for client in announcement.clients[:MAX_CLIENTS]
        ],
    }
    if announcement.count is not None:
        payload["count"] = announcement.count
    return payload


def read_announcement(data: object) -> Announcement | None:
    """An announcement from a payload's data; ``None`` for anything malformed (ignored)."""
    if not isinstance(data, Mapping):
        return None
    origin, kind, interval = data.get("origin"), data.get("kind"), data.get("interval")
    if not isinstance(origin, str) or not origin or not isinstance(kind, str):
        return None
    if kind not in Kind.__members__.values():
        return None
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        interval = DEFAULT_INTERVAL
    if not math.isfinite(interval) or interval < 0:
        return None
    raw = data.get("clients")
    clients = []
    for item in raw if isinstance(raw, list) else []:  # an empty list travels as {}
        client = _client(item)
        if client is not None:
            clients.append(client)
    count = data.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        count = None
    return Announcement(origin, Kind(kind), tuple(clients[:MAX_CLIENTS]), float(interval), count)


def _client(item: object) -> Present | None:
    if not isinstance(item, Mapping):
        return None
    id_, transport, caller = item.get("id"), item.get("transport"), item.get("caller", "")
    since, patterns = item.get("since"), item.get("patterns")
    if not isinstance(id_, str) or not id_ or transport not in TRANSPORTS:
        return None
    if isinstance(since, bool) or not isinstance(since, int | float):
        return None
    kept = []
    for pattern in patterns if isinstance(patterns, list) else []:
        if not isinstance(pattern, str):
            continue
        try:
            check_pattern(pattern)
        except ConfigError:
            continue
        kept.append(pattern)
    caller = caller if isinstance(caller, str) else ""
    return Present(id_, str(transport), caller, float(since), tuple(kept))


@dataclass
class _Origin:
    clients: dict[str, Present] = field(default_factory=dict)
    seen: float = 0.0
    interval: float = DEFAULT_INTERVAL


class PresenceBoard:
    """Every origin's subscribers, as announced.

    Args:
        own: this process's origin name (its own announcements coming back are ignored).
        expiry: intervals of silence after which an origin is forgotten (``central`` with
            interval 0 never is: it is fed by the broker's answers and deltas).
    """

    def __init__(self, own: str, expiry: float = EXPIRY) -> None:
        self.own = own
        self.expiry = expiry
        self.local: dict[str, Present] = {}
        self._origins: dict[str, _Origin] = {}
        self._asked: dict[str, tuple[int, int]] = {}  # origin -> (its count, ours) asked for

    # -- this process's own clients ----------------------------------------------------------

    def join(self, client: Present) -> list[Change]:
        """One of our clients subscribed (or changed its patterns)."""
        before = self.local.get(client.id)
        if before == client:
            return []
        self.local[client.id] = client
        return [Change(before, client)]

    def leave(self, client_id: str) -> list[Change]:
        """One of our clients went."""
        before = self.local.pop(client_id, None)
        return [] if before is None else [Change(before, None)]

    def snapshot(self, interval: float) -> Announcement:
        """Our clients, as a snapshot to announce."""
        return Announcement(self.own, Kind.SNAPSHOT, tuple(self.local.values()), interval)

    def alive(self, interval: float) -> Announcement:
        """That we are here, with how many clients: what is said every ``interval``."""
        return Announcement(self.own, Kind.ALIVE, (), interval, len(self.local))

    # -- the others ----------------------------------------------------------------------------

    def receive(self, announcement: Announcement, now: float) -> list[Change]:
        """Take another origin's announcement; returns what changed (``probe``: nothing)."""
        if announcement.origin == self.own or announcement.kind is Kind.PROBE:
            return []
        origin = self._origins.get(announcement.origin)
        if origin is None:
            if announcement.kind in (Kind.LEAVE, Kind.BYE, Kind.ALIVE):
                return []  # ``alive`` from a stranger: its clients come with its snapshot
            origin = self._origins[announcement.origin] = _Origin()
        origin.seen, origin.interval = now, announcement.interval
        clients = origin.clients
        changes: list[Change] = []
        if announcement.kind is Kind.SNAPSHOT:
            fresh = {client.id: client for client in announcement.clients}
            for gone in [cid for cid in clients if cid not in fresh]:
                changes.append(Change(clients.pop(gone), None))
            for cid, client in fresh.items():
                if clients.get(cid) != client:
                    changes.append(Change(clients.get(cid), client))
                    clients[cid] = client
        elif announcement.kind is Kind.JOIN:
            for client in announcement.clients:
                if clients.get(client.id) != client:
                    changes.append(Change(clients.get(client.id), client))
                    clients[client.id] = client
        elif announcement.kind is Kind.LEAVE:
            for client in announcement.clients:
                if client.id in clients:
                    changes.append(Change(clients.pop(client.id), None))
        elif announcement.kind is Kind.ALIVE:
            pass  # it was heard: ``seen`` is all that changes
        else:  # BYE
            changes = [Change(client, None) for client in clients.values()]
            del self._origins[announcement.origin]
        return changes

    def missing(self, announcement: Announcement) -> bool:
        """Whether an ``alive`` says this board lacks some of the origin's clients (it does not
        know the origin, or holds another count for it): then ask for snapshots (a probe)."""
        if announcement.kind is not Kind.ALIVE or announcement.origin == self.own:
            return False
        name, count = announcement.origin, announcement.count
        origin = self._origins.get(name)
        held = 0 if origin is None else len(origin.clients)
        if count is None or count == held:
            self._asked.pop(name, None)
            return False
        if self._asked.get(name) == (count, held):
            return False  # asked already, and the snapshot could not mend it (MAX_CLIENTS)
        self._asked[name] = (count, held)
        return True

    def forget(self, origin: str) -> list[Change]:
        """Drop an origin (the link to the bus was lost and it will be asked again)."""
        self._asked.pop(origin, None)
        gone = self._origins.pop(origin, None)
        return [] if gone is None else [Change(c, None) for c in gone.clients.values()]

    def expire(self, now: float) -> list[Change]:
        """Forget the origins silent for ``expiry`` of their intervals."""
        changes: list[Change] = []
        for name, origin in list(self._origins.items()):
            if origin.interval > 0 and now - origin.seen > self.expiry * origin.interval:
                changes += self.forget(name)
        return changes

    @property
    def origins(self) -> list[str]:
        """The other origins known now."""
        return sorted(self._origins)

    def clients(self, pattern: str | None = None) -> list[Present]:
        """Every known subscriber (ours and the others'), of types matching ``pattern`` when
        given, the longest present first."""
        found: Iterable[Present] = [
            *self.local.values(),
            *(client for origin in self._origins.values() for client in origin.clients.values()),
        ]
        if pattern is not None:
            found = [client for client in found if client.wants(pattern)]
        return sorted(found, key=lambda client: (client.since, client.id))
