"""The Object System router's state of one connection, sans-I/O.

:class:`PeerState` is what the router keeps and changes per connection (its routing id, its
subscription, whether it is a server link, the keepalive ping it owes an answer to);
:class:`PeerInfo` is the read-only view of it the router gives drivers and tests.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["PeerInfo", "PeerState"]


@dataclass(frozen=True)
class PeerInfo:
    """A read-only view of one connection, for drivers, tests and ``routing/neighbors``."""

    conn: Hashable
    routing_id: str
    subscribed: bool
    server: bool
    extra_ids: tuple[str, ...]
    answers_pings: bool = False
    #: a link of ours whose ``role: server`` subscription the other server refused: its words
    refused: str | None = None


@dataclass(slots=True)
class PeerState:
    """One connection as the router sees it (mutable; the router's own; slots: a gateway holds
    one per WebSocket client, tens of thousands)."""

    conn: Hashable
    routing_id: str
    subscribed: bool = False
    server: bool = False
    linked: bool = False  # we opened this link and sent our subscription
    trusted: bool = False  # may subscribe with role: server (a link we opened, a server peer)
    echo: bool = False
    rules: tuple[str, ...] = ()
    types: tuple[str, ...] | None = None
    extra_ids: tuple[str, ...] = ()
    ping_id: str | None = None  # our keepalive ping waiting for its pong
    answers_pings: bool = False
    refused: str | None = None  # our role: server subscription refused (a link of ours)

    def has_any(self, ids: tuple[str, ...]) -> bool:
        """Whether this connection holds one of the routing ids ``ids`` (``to``)."""
        return any(i == self.routing_id or i in self.extra_ids for i in ids)

    def info(self) -> PeerInfo:
        """The read-only view of this connection."""
        return PeerInfo(
            self.conn,
            self.routing_id,
            self.subscribed,
            self.server,
            self.extra_ids,
            self.answers_pings,
            self.refused,
        )
