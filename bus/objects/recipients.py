"""Who receives a routed Object System object, sans-I/O (docs/PROTOCOL.md section 6).

:class:`Recipients` applies each connection's subscription to an object's facts, in connection
order: server links get everything not yet on its ``route`` (one copy per server, however many
links lead there), clients what their receive mode, rules, ``types`` and ``to`` let through.

A stream of content objects from one client asks the same question again and again: the answer
depends on the sender, the content type and ``to`` (and the connections' state), so for a
content object that simple (no ``natures``, ``to`` one id or none) it is worked out once and
remembered until a connection comes, goes or subscribes (:meth:`Recipients.changed`).
So is the answer for any other object (:meth:`Recipients.of`), by its sender, its facts and its
``route``: a stream of events that a server link brings (the bus's events, through the bridge,
to a gateway's WebSocket clients) asks it once, not once per object per connection.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Final

from bus.objects.peers import PeerState
from bus.objects.subscription import Facts, passes_types, rules_pass

__all__ = ["DEFAULT_REMEMBERED", "Recipients"]

#: Distinct (sender, content type, ``to``) answers remembered before all are forgotten.
DEFAULT_REMEMBERED: Final = 1024

_Key = tuple[Hashable, str | None, str | None]
_RoutedKey = tuple[Hashable, Facts, tuple[str, ...]]


class Recipients:
    """The recipients of objects routed among ``peers`` (the router's own, in order).

    Args:
        peers: the router's connections; any change of one, or of the dict, must be followed
            by :meth:`changed`.
        remembered: how many answers are kept, of each kind (default 1024; 0: none, every
            answer is worked out).
    """

    def __init__(
        self, peers: Mapping[Hashable, PeerState], remembered: int = DEFAULT_REMEMBERED
    ) -> None:
        self._peers = peers
        self._remembered = max(0, remembered)
        self._known: dict[_Key, list[PeerState]] = {}
        self._routed: dict[_RoutedKey, list[PeerState]] = {}

    def changed(self) -> None:
        """A connection came, went or changed its subscription: forget what was worked out."""
        self._known.clear()
        self._routed.clear()

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
        targets: list[PeerState] = []
        servers: set[str] = set()
        for peer in self._peers.values():
            if not _should_deliver(peer, facts, route, sender):
                continue
            if peer.server:
                if peer.routing_id in servers:
                    continue  # a second link to the same server: one copy is enough
                servers.add(peer.routing_id)
            targets.append(peer)
        return targets

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
        return peer.routing_id not in route
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
