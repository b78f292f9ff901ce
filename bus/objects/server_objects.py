"""The objects an Object System server writes itself, sans-I/O: pure functions that build their
metadata (docs/PROTOCOL.md section 6).

The router decides when to send them and to whom; these functions only say what they hold:
error objects, ``pong`` and keepalive ``ping``, the answer to a ``routing/subscribe`` and the
notices of a connection's arrival and departure, a server link's own subscription, neighbor
lists, and the answers of the service registry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from bus.errors import BusError, LimitError
from bus.message.ids import new_id
from bus.objects.codec import BusinessObject
from bus.objects.peers import PeerState

__all__ = [
    "NOTIFY_EVENTS",
    "announcement",
    "decode_error",
    "disconnect_notice",
    "discovery_reply",
    "error_reply",
    "keepalive_ping",
    "neighbors",
    "pong",
    "server_subscription",
    "shared_registration",
    "subscribe_notices",
    "subscribe_reply",
]

#: The seed's name for the notice of a new subscription, and Objectoplex's (both are sent).
NOTIFY_EVENTS: Final = ("routing/subscribe/notify", "routing/subscribe/notification")


def error_reply(obj: BusinessObject, text: str, code: str = "refused") -> dict[str, Any]:
    """The ``error`` object answering ``obj`` (``in-reply-to`` its id, if it has one)."""
    error: dict[str, Any] = {"event": "error", "error": text, "code": code}
    if obj.id is not None:
        error["in-reply-to"] = obj.id
    return error


def decode_error(error: BusError) -> dict[str, Any]:
    """The ``error`` object for input the codec refused (code ``limit`` or ``malformed``)."""
    reply: dict[str, Any] = {"event": "error", "error": str(error)}
    reply["code"] = "limit" if isinstance(error, LimitError) else "malformed"
    return reply


def pong(obj: BusinessObject, routing_id: str) -> dict[str, Any]:
    """The ``pong`` a server answers the ``ping`` ``obj`` with, straight back to the sender."""
    answer = {"event": "pong", "routing-id": routing_id}
    if obj.id is not None:
        answer["in-reply-to"] = obj.id
    return answer


def keepalive_ping(ping_id: str, routing_id: str) -> dict[str, Any]:
    """This server's keepalive ``ping`` (``ping_id`` is what its ``pong`` answers)."""
    return {"event": "ping", "id": ping_id, "routing-id": routing_id}


def subscribe_reply(peer: PeerState, obj: BusinessObject) -> dict[str, Any]:
    """``routing/subscribe/reply`` to ``peer``'s subscription ``obj``."""
    reply: dict[str, Any] = {
        "event": "routing/subscribe/reply",
        "routing-id": peer.routing_id,
        "routing-ids": list(peer.extra_ids),
    }
    if obj.id is not None:
        reply["in-reply-to"] = obj.id
    if peer.server:
        reply["role"] = "server"
    return reply


def subscribe_notices(peer: PeerState) -> list[dict[str, Any]]:
    """``routing/subscribe/notify`` and ``.../notification`` about ``peer``'s subscription."""
    notices = []
    for event in NOTIFY_EVENTS:
        notice: dict[str, Any] = {
            "event": event,
            "routing-id": peer.routing_id,
            "routing-ids": list(peer.extra_ids),
        }
        if peer.server:
            notice["role"] = "server"
        notices.append(notice)
    return notices


def disconnect_notice(peer: PeerState) -> dict[str, Any]:
    """``routing/disconnect`` about ``peer``."""
    notice: dict[str, Any] = {"event": "routing/disconnect", "routing-id": peer.routing_id}
    if peer.extra_ids:
        notice["routing-ids"] = list(peer.extra_ids)
    return notice


def server_subscription(routing_id: str, name: str, link_secret: str | None) -> dict[str, Any]:
    """Our ``role: server`` subscription to a linked server."""
    # No receive-mode: Objectoplex would take it for a legacy client's subscription. The
    # rule list, and types for the servers that read them (Objectoplex logged KeyError).
    metadata = {
        "event": "routing/subscribe",
        "role": "server",
        "routing-id": routing_id,
        "subscriptions": ["*"],
        "types": "all",
        "name": name,
        "id": new_id(),
    }
    if link_secret is not None:
        metadata["link-secret"] = link_secret
    return metadata


def neighbors(peers: Iterable[PeerState]) -> list[dict[str, str]]:
    """The subscribed connections, as ``routing/neighbors`` and announcements list them."""
    return [
        {"routing-id": p.routing_id, "role": "server" if p.server else "client"}
        for p in peers
        if p.subscribed
    ]


def announcement(node: str, peers: Iterable[PeerState]) -> dict[str, Any]:
    """``routing/announcement/neighbors`` of server ``node``."""
    return {"event": "routing/announcement/neighbors", "node": node, "neighbors": neighbors(peers)}


def shared_registration(name: str, routing_id: str, via: str) -> dict[str, Any]:
    """``services/register`` of ``routing_id``'s service ``name``, passed on by server ``via``."""
    return {"event": "services/register", "name": name, "route": [routing_id, via], "id": new_id()}


def discovery_reply(wanted: str | None, found: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``services/discovery/reply`` listing ``found`` (name, routing id) pairs."""
    services = [{"name": svc, "routing-id": rid} for svc, rid in found]
    reply: dict[str, Any] = {"event": "services/discovery/reply", "services": services}
    if wanted is not None:
        reply["name"] = wanted
    return reply
