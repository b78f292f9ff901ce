"""The broker's side of presence (PROTOCOL.md 5.16), mixed into its driver.

The broker is the origin ``central`` for its own links: each link with subscriptions (other
than relays and the system's types) is one ``bus`` client, its id the link's inbox, its caller
the post office. When one subscribes, unsubscribes or goes, the broker tells the subscribers
of :data:`bus.presence.PRESENCE_TYPE` (``join``/``leave``, ``TYP=HBT``, not journaled);
``manage.presence`` (any link) answers with all of them as a ``snapshot``, which a gateway
asks for when it connects. A subscription made with ``relay: true`` (a gateway's, forwarding
to clients that are counted on their own) is left out.
"""

from __future__ import annotations

from typing import Any

from bus.broker.link import Link
from bus.broker.routing import INBOX_PREFIX, Router
from bus.discovery.names import RESERVED_PREFIXES
from bus.message.message import Message, MessageType, encode_message
from bus.presence import (
    CENTRAL,
    PRESENCE_TYPE,
    Announcement,
    Kind,
    Present,
    announcement_payload,
)

__all__ = ["PresenceLinks"]


class PresenceLinks:
    """Presence of :class:`bus.broker.server.Broker`'s links."""

    router: Router
    _links: dict[int, Link]
    #: (link, pattern) of the subscriptions made as relays
    _relays: set[tuple[int, str]]
    #: link -> its presence entry
    _present: dict[int, Present]

    def _deliver(self, numbers: list[int], raw: bytes) -> None:
        raise NotImplementedError  # the broker's

    def _flush_dirty(self) -> None:
        raise NotImplementedError  # the broker's

    def _presence_changed(self, link: Link, pattern: str, relay: bool) -> None:
        """A link subscribed to or unsubscribed from ``pattern`` (``relay``: as a relay)."""
        key = (link.number, pattern)
        if relay:
            self._relays.add(key)
        else:
            self._relays.discard(key)
        held = self.router.holdings(link.number)
        if held is None:
            return
        office, patterns, groups = held
        mine = sorted(
            p
            for p in patterns
            if (link.number, p) not in self._relays and not p.startswith(RESERVED_PREFIXES)
        )
        before = self._present.get(link.number)
        if not mine:
            if before is not None:
                del self._present[link.number]
                self._announce(Kind.LEAVE, before)
            return
        inbox = next((g for g in groups if g.startswith(INBOX_PREFIX)), f"link-{link.number}")
        entry = Present(inbox, "bus", office, before.since if before else link.opened, tuple(mine))
        if entry != before:
            self._present[link.number] = entry
            self._announce(Kind.JOIN, entry)

    def _presence_gone(self, number: int) -> None:
        """A link is gone: its client leaves, unless a newer link of the same client (the same
        inbox: a reconnection) is there already."""
        self._relays = {key for key in self._relays if key[0] != number}
        before = self._present.pop(number, None)
        if before is None:
            return
        successor = next((p for p in self._present.values() if p.id == before.id), None)
        self._announce(Kind.JOIN if successor else Kind.LEAVE, successor or before)
        self._flush_dirty()

    def _presence_snapshot(self, message: Message) -> Message:
        """``manage.presence``: every bus client as a snapshot."""
        snapshot = Announcement(CENTRAL, Kind.SNAPSHOT, tuple(self._present.values()), 0.0)
        return message.ack(announcement_payload(snapshot))

    def _announce(self, kind: Kind, client: Present) -> None:
        # Only to those who asked for the system's types (OAM.PRESENCE, OAM.*, OAM.>): a
        # subscriber of everything (">") is not told of every subscription on the broker.
        numbers = [
            number
            for number in self.router.subscribers(PRESENCE_TYPE)
            if (held := self.router.holdings(number)) is not None
            and any(pattern.startswith("OAM") for pattern in held[1])
        ]
        if not numbers:
            return
        payload: dict[str, Any] = announcement_payload(Announcement(CENTRAL, kind, (client,), 0.0))
        notice = Message.event(PRESENCE_TYPE, payload)
        notice.frame["TYP"] = MessageType.HBT.value
        notice.src = CENTRAL
        self._deliver(numbers, encode_message(notice))
