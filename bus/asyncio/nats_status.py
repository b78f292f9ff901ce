"""``manage.status`` on NATS: what one link's NATS connection knows (``docs/PROTOCOL.md``
section 10, "Control commands").

There is no central post office on NATS, so :class:`bus.asyncio.nats.NatsTransport` answers
``manage.status`` itself with :func:`link_status`: the server it is on, its version and cluster,
JetStream and the stream (with its replicas), this link's counters and subscriptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client as NatsClient

__all__ = ["LinkFacts", "link_status"]


@dataclass(frozen=True)
class LinkFacts:
    """What the transport adds to what the NATS connection knows."""

    name: str
    inbox: str
    prefix: str
    max_payload: int
    stream: str  # "" without JetStream
    stream_replicas: int | None = None  # once the stream is there
    patterns: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)


def link_status(nc: NatsClient, facts: LinkFacts) -> dict[str, Any]:
    """What this link knows of the bus on NATS: the server it is on, its own subscriptions.

    The whole server (every connection, subscription, route) is nats-server's monitoring
    port's business (``-m 8222``: ``/varz``, ``/connz``, ``/subsz``), not the bus's.
    """
    server = dict(nc._server_info)  # the INFO the server sent on connect
    url = nc.connected_url
    answer: dict[str, Any] = {
        "transport": "nats",
        "server": f"nats://{url.netloc}" if url is not None else "",
        "serverId": str(server.get("server_id", "")),
        "serverName": str(server.get("server_name", "")),
        "version": str(server.get("version", "")),
        "cluster": str(server.get("cluster", "")),
        "jetstream": bool(server.get("jetstream", False)),
        "stream": facts.stream,
        "maxPayload": facts.max_payload,
        "prefix": facts.prefix,
        "name": facts.name,
        "inbox": facts.inbox,
        "note": (
            "no central post office on NATS: this is what this link's NATS connection "
            "knows; for the whole server use nats-server's monitoring port "
            "(-m 8222: /varz, /connz, /subsz)"
        ),
    }
    answer.update({_camel(key): int(value) for key, value in nc.stats.items()})
    if facts.stream_replicas is not None:
        answer["streamReplicas"] = facts.stream_replicas
    if facts.patterns:
        answer["patterns"] = facts.patterns
    if facts.groups:
        answer["groups"] = facts.groups
    return answer


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
