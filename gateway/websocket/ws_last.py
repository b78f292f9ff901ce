"""The last value of each bus type for ``/ws`` clients (PROTOCOL.md 6.8, 5.15).

A WebSocket client that subscribes with ``"last": true`` in its ``routing/subscribe`` gets,
after the subscription's reply, the last journaled event of each bus type its ``bus/...`` types
match, as the content objects the bridge makes of events (7.2), each with ``seq`` (its journal
sequence number) and ``last: true``, oldest first; then live objects as usual. An event of a
type that already reached the client live since it subscribed is not sent (it would be older),
and types the caller may not subscribe to are left out. When the bus keeps none of them, the
client gets ``{"event": "routing/last/error", "message": ...}`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any, Final

from bus.errors import BusError
from bus.objects.bridge import event_to_object
from bus.objects.codec import BusinessObject, encode_object
from gateway.access.auth import allowed
from gateway.events.presence import ws_patterns

__all__ = ["MAX_TYPES", "send_last_values"]

log = logging.getLogger("busgate.gateway.ws")

#: Types whose last value one subscription gets at most.
MAX_TYPES: Final = 1000


async def send_last_values(
    app: Any, server: Any, conn: Hashable, peer: Any, principal: Any
) -> None:
    """Send ``peer`` the last event of each bus type of its subscription (see the module doc);
    ``peer.watching`` (the types that reached it live meanwhile) is cleared at the end."""
    try:
        gateway = getattr(getattr(app, "state", None), "gateway", None)
        client = getattr(getattr(gateway, "bridge", None), "client", None)
        patterns = ws_patterns(server.router.content_types(conn))
        types = getattr(principal, "types", ("*",))
        patterns = tuple(p for p in patterns if allowed(types, p))
        if client is None or not patterns:
            return
        events: dict[int, Any] = {}
        for pattern in patterns:
            try:
                page = await client.history(pattern, last=True, limit=MAX_TYPES)
            except BusError as exc:
                _error(peer, f"no last values of bus/{pattern}: {exc}")
                continue
            for event in page.events:
                events[event.seq] = event
        for seq in sorted(events):
            message = events[seq].message
            if message.grp in (peer.watching or ()):
                continue  # a newer one reached it live
            obj = event_to_object(message)
            obj.metadata.update(seq=seq, last=True)
            peer.send(encode_object(obj), obj)
    finally:
        peer.watching = None


def _error(peer: Any, text: str) -> None:
    obj = BusinessObject({"event": "routing/last/error", "message": text})
    log.info("/ws: %s", text)
    peer.send(encode_object(obj), obj)
