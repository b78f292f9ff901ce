"""Who receives a routed Object System object, sans-I/O (docs/PROTOCOL.md section 6).

:class:`Recipients` applies each connection's subscription to an object's facts, in connection
order: server links get everything not yet on its ``route`` (one copy per server, however many
links lead there), clients what their receive mode, rules, ``types`` and ``to`` let through.

The connections are indexed by what can let an object through, so an answer looks only at
those that may take it, not at every connection: by each positive rule (``*``; a content type,
an ``@`` event or a ``#`` nature, exact or a prefix with ``*``), by the routing ids they hold
(for ``to``), and the server links apart. A client subscribed to ``bus/sensor.*`` is never
looked at for the notice of another client's arrival, so a network of 100,000 such clients
does not walk 100,000 subscriptions per arrival. The index is told of each change of a
connection (:meth:`Recipients.changed` with the connection).

A stream of content objects from one client asks the same question again and again: the answer
depends on the sender, the content type and ``to`` (and the connections' state), so for a
content object that simple (no ``natures``, ``to`` one id or none) it is worked out once and
remembered until a connection comes, goes or subscribes. So is the answer for any other object
(:meth:`Recipients.of`), by its sender, its facts and its ``route``: a stream of events that a
server link brings (the bus's events, through the bridge, to a gateway's WebSocket clients)
asks it once, not once per object per connection.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping
from typing import Any, Final

from bus.objects.peers import PeerState
from bus.objects.subscription import Facts, passes_types, rules_pass

__all__ = ["DEFAULT_REMEMBERED", "Recipients"]

#: Distinct (sender, content type, ``to``) answers remembered before all are forgotten.
DEFAULT_REMEMBERED: Final = 1024

_Key = tuple[Hashable, str | None, str | None]
_RoutedKey = tuple[Hashable, Facts, tuple[str, ...]]
_Bucket = dict[Hashable, PeerState]
_Table = dict[str, _Bucket]


class _Index:
    """The subscribed connections by what may let an object through to them (sans-I/O).

    A connection is a candidate for an object when one of its positive rules matches it (its
    negative rules, ``types``, ``to`` and echo are checked on the candidates), or, for an
    object with ``to``, when it holds one of those ids; server links are candidates always.
    """

    def __init__(self) -> None:
        self.servers: _Bucket = {}
        self.anything: _Bucket = {}  # a positive "*" rule
        self.types: _Table = {}
        self.type_prefixes: _Table = {}
        self.events: _Table = {}
        self.event_prefixes: _Table = {}
        self.natures: _Table = {}
        self.nature_prefixes: _Table = {}
        self.holders: _Table = {}  # routing id or extra id -> the connections holding it
        self._where: dict[Hashable, list[tuple[_Table | None, str, _Bucket]]] = {}

    def add(self, peer: PeerState) -> None:
        """Index a subscribed connection (its current subscription)."""
        places: list[tuple[_Table | None, str, _Bucket]] = []
        conn = peer.conn

        def put(table: _Table | None, key: str, bucket: _Bucket | None = None) -> None:
            if bucket is None:
                assert table is not None
                bucket = table.setdefault(key, {})
            bucket[conn] = peer
            places.append((table, key, bucket))

        for held in (peer.routing_id, *peer.extra_ids):
            put(self.holders, held)
        if peer.server:
            put(None, "", self.servers)
        else:
            for rule in peer.rules:
                if rule.startswith("!"):
                    continue  # a negative rule lets nothing through by itself
                if rule == "*":
                    put(None, "", self.anything)
                elif rule.startswith("@"):
                    put(*_pattern(rule[1:], self.events, self.event_prefixes))
                elif rule.startswith("#"):
                    put(*_pattern(rule[1:], self.natures, self.nature_prefixes))
                else:
                    put(*_pattern(rule, self.types, self.type_prefixes))
        self._where[conn] = places

    def remove(self, conn: Hashable) -> None:
        """Take a connection out (unknown ones are ignored)."""
        for table, key, bucket in self._where.pop(conn, ()):
            bucket.pop(conn, None)
            if not bucket and table is not None and table.get(key) is bucket:
                del table[key]

    def candidates(self, facts: Facts) -> dict[Hashable, PeerState]:
        """Every connection that may take an object with these facts (a superset)."""
        found: dict[Hashable, PeerState] = dict(self.servers)
        if facts.to is not None:
            for held in facts.to:
                if type(held) is str and (bucket := self.holders.get(held)) is not None:
                    found.update(bucket)
            return found
        if facts.announcement:
            return found  # only server links take announcements
        found.update(self.anything)
        if facts.event is not None:
            _gather(found, facts.event, self.events, self.event_prefixes)
        for nature in facts.natures:
            _gather(found, nature, self.natures, self.nature_prefixes)
        if facts.base_type is not None:
            _gather(found, facts.base_type, self.types, self.type_prefixes)
        return found


def _pattern(body: str, exact: _Table, prefixes: _Table) -> tuple[_Table, str]:
    """Where a rule's pattern goes: its prefix when it ends with ``*``, else the exact text."""
    return (prefixes, body[:-1]) if body.endswith("*") else (exact, body)


def _gather(found: dict[Hashable, PeerState], value: str, exact: _Table, prefixes: _Table) -> None:
    bucket = exact.get(value)
    if bucket is not None:
        found.update(bucket)
    for prefix, bucket in prefixes.items():  # distinct prefixes: few, whatever the clients
        if value.startswith(prefix):
            found.update(bucket)


class Recipients:
    """The recipients of objects routed among ``peers`` (the router's own, in order).

    Args:
        peers: the router's connections; any change of one, or of the dict, must be followed
            by :meth:`changed` (with the connection, so only it is indexed again).
        remembered: how many answers are kept, of each kind (default 1024; 0: none, every
            answer is worked out).
        indexed: look only at the connections the index names (default); ``False`` walks every
            connection for every answer (the reference the tests compare it with).
    """

    def __init__(
        self,
        peers: Mapping[Hashable, PeerState],
        remembered: int = DEFAULT_REMEMBERED,
        *,
        indexed: bool = True,
    ) -> None:
        self._peers = peers
        self._remembered = max(0, remembered)
        self._indexed = indexed
        self._known: dict[_Key, list[PeerState]] = {}
        self._routed: dict[_RoutedKey, list[PeerState]] = {}
        self._index = _Index()
        self._order: dict[Hashable, int] = {}  # connection order, as ``peers`` holds them
        self._numbers = itertools.count()
        self._stale = True  # the index is built from ``peers`` at the next answer

    def changed(self, peer: PeerState | None = None) -> None:
        """A connection came, went or changed its subscription: forget what was worked out.

        With ``peer``, only that connection is indexed again (taken out if it is no longer in
        ``peers``); without, the whole index is built again at the next answer.
        """
        self._known.clear()
        self._routed.clear()
        if peer is None:
            self._stale = True
        elif not self._stale:
            self._reindex(peer)

    def _reindex(self, peer: PeerState) -> None:
        conn = peer.conn
        self._index.remove(conn)
        if self._peers.get(conn) is not peer:
            self._order.pop(conn, None)
            return
        if conn not in self._order:
            self._order[conn] = next(self._numbers)
        if peer.subscribed:
            self._index.add(peer)

    def _rebuild(self) -> None:
        self._index = _Index()
        self._order = {}
        for peer in self._peers.values():
            self._order[peer.conn] = next(self._numbers)
            if peer.subscribed:
                self._index.add(peer)
        self._stale = False

    def of(self, facts: Facts, route: list[str], sender: PeerState | None) -> list[PeerState]:
        """The connections an object with these ``facts`` and this ``route`` goes to, in order
        (remembered by sender, facts and route until :meth:`changed`).

        ``sender``: the connection it came from (``None``: this server's own object).
        """
        try:
            key = (None if sender is None else sender.conn, facts, tuple(route))
            targets = self._routed.get(key)
        except TypeError:  # a ``to`` holding something unhashable (answered as no recipient)
            return self._work_out(facts, route, sender)
        if targets is None:
            targets = self._remember(self._routed, key, self._work_out(facts, route, sender))
        return targets

    def _work_out(
        self, facts: Facts, route: list[str], sender: PeerState | None
    ) -> list[PeerState]:
        if self._indexed:
            if self._stale:
                self._rebuild()
            found = self._index.candidates(facts)
            order = self._order
            chosen = [p for p in found.values() if _should_deliver(p, facts, route, sender)]
            peers: Any = sorted(chosen, key=lambda peer: order[peer.conn])
        else:
            peers = self._peers.values()
        targets: list[PeerState] = []
        servers: set[str] = set()
        for peer in peers:
            if not self._indexed and not _should_deliver(peer, facts, route, sender):
                continue
            if peer.server:
                if peer.routing_id in servers:
                    continue  # a second link to the same server: one copy is enough
                servers.add(peer.routing_id)
            targets.append(peer)
        return targets

    def twin(self, peer: PeerState) -> PeerState | None:
        """Another subscribed connection with ``peer``'s routing id (a second link to a
        server), the first in connection order."""
        if not self._indexed:
            for other in self._peers.values():
                if other is not peer and other.subscribed and other.routing_id == peer.routing_id:
                    return other
            return None
        if self._stale:
            self._rebuild()
        holders = self._index.holders.get(peer.routing_id, {})
        others = [
            other
            for other in holders.values()
            if other is not peer and other.subscribed and other.routing_id == peer.routing_id
        ]
        return min(others, key=lambda other: self._order[other.conn], default=None)

    def of_content(self, sender: PeerState, metadata: dict[str, Any]) -> list[PeerState]:
        """:meth:`of` for a content object from the client ``sender``, given the metadata the
        router built (``route``: [the sender's id, this server's id]); remembered when the
        object is that simple."""
        key = _content_key(sender.conn, metadata)
        if key is not None:
            targets = self._known.get(key)
            if targets is not None:
                return targets
        targets = self._work_out(Facts.of_metadata(metadata), metadata["route"], sender)
        return targets if key is None else self._remember(self._known, key, targets)

    def _remember(
        self, table: dict[Any, list[PeerState]], key: Any, targets: list[PeerState]
    ) -> list[PeerState]:
        """Keep an answer (the table emptied first when full; nothing kept with remembered=0)."""
        if self._remembered:
            if len(table) >= self._remembered:
                table.clear()
            table[key] = targets
        return targets


def _should_deliver(
    peer: PeerState, facts: Facts, route: list[str], sender: PeerState | None
) -> bool:
    if not peer.subscribed:
        return False
    if peer.server:
        # the route rule, and never back to the server it came from (over any of its links):
        # that server had it first (a notice it made about its client would only return to be
        # dropped as a copy, 6.6: two objects each way per client that joins)
        return peer.routing_id not in route and (
            sender is None or not sender.server or peer.routing_id != sender.routing_id
        )
    if not peer.echo and (peer is sender or (route and peer.routing_id == route[0])):
        return False
    if facts.announcement:
        return False
    if facts.to is not None and not peer.has_any(facts.to):
        return False
    return rules_pass(facts, peer.rules) and passes_types(facts, peer.types)


def _content_key(conn: Hashable, metadata: dict[str, Any]) -> _Key | None:
    """What the recipients of a client's content object depend on besides the connections'
    state, when it is this simple: its sender, content type (a string or none) and ``to`` (one
    routing id or none), no ``natures``. ``None``: not that simple."""
    content_type, to = metadata.get("type"), metadata.get("to")
    if "natures" in metadata or not (content_type is None or type(content_type) is str):
        return None
    if to is None or type(to) is str:
        return (conn, content_type, to)
    return None
