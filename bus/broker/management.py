"""Management commands of the central post office (seed 001; ``docs/PROTOCOL.md`` 5.6).

Only connections whose post office is in ``BrokerConfig.managers`` may call them; the server
checks that before :func:`handle` runs and answers others with NAK 403.

- ``manage.status``: counters, connections, groups and subscriptions (:func:`status`);
- ``manage.add`` ``{name, secret, manager?}``: add or replace a post office;
- ``manage.delete`` ``{name}``: delete a post office and close its connections;
- ``manage.write``: write the running configuration to its file;
- ``manage.monitor``: process and host figures from psutil (:func:`monitor`);
- ``manage.connections``: every link, who and where from, what it holds (:func:`connections`);
- ``manage.disconnect`` ``{link}``: close one link (close reason SERVER_CLOSING);
- ``manage.drain`` ``{group}``: stop routing new requests to a group's consumers (they stay
  connected and answer what they have; new requests get NAK 503 until a consumer joins again);
- ``manage.journal`` ``{limit?, group?}``: the newest journal records, header fields only
  (:func:`journal_tail`).

``manage.status`` also says how the journal is doing (``journal``: directory, records appended
and skipped, fsyncs, errors, the current segment).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Final, Protocol

import psutil

from bus.broker.config import BrokerConfig
from bus.broker.routing import Router
from bus.errors import ConfigError
from bus.frame.enums import CloseReason
from bus.frame.frame import U32
from bus.message.message import Message

__all__ = [
    "CENTRAL",
    "COMMANDS",
    "COUNTERS",
    "connections",
    "handle",
    "journal_health",
    "journal_tail",
    "monitor",
    "status",
]


class Link(Protocol):
    """What the commands read of one link (:class:`bus.broker.server.Broker`'s links)."""

    transport: Any
    registered: bool
    local: bool  # opened inside the broker's process (peer: "in-process")
    peer: str
    queued: int
    closing: bool
    opened: float
    messages_in: int
    messages_out: int
    bytes_in: int
    bytes_out: int


class Broker(Protocol):
    """What the management commands need of the broker (:class:`bus.broker.server.Broker`).

    A protocol, so this module does not import the server that dispatches to it.
    """

    config: BrokerConfig
    started: float
    router: Router
    stats: dict[str, int]
    journal: Any

    @property
    def links(self) -> Mapping[int, Link]: ...

    @property
    def link_count(self) -> int: ...

    def queued_bytes(self) -> int: ...

    def replace_config(self, config: BrokerConfig) -> None: ...

    def links_of(self, office: str) -> list[int]: ...

    def close_link(self, number: int, reason: CloseReason, detail: str) -> None: ...

    def notify(self, number: int, cmd: str, payload: dict[str, Any]) -> None: ...


#: The broker's own post office name (MOP's reserved ``central``), the SRC of what it sends.
CENTRAL: Final = "central"
COMMANDS: Final = frozenset(
    {
        "manage.status",
        "manage.add",
        "manage.delete",
        "manage.write",
        "manage.monitor",
        "manage.connections",
        "manage.disconnect",
        "manage.drain",
        "manage.journal",
    }
)
#: Most journal records ``manage.journal`` returns.
MAX_JOURNAL_RECORDS: Final = 500
#: Header fields of each record ``manage.journal`` returns.
JOURNAL_FIELDS: Final = ("TYP", "GRP", "CMD", "MID", "RID", "SRC", "RCD", "MSG")
#: Counters in ``manage.status`` (snake_case here, camelCase on the wire).
COUNTERS: Final = (
    "routed",
    "dropped",
    "no_responders",
    "failed_requests",
    "slow_consumers",
    "refused_auth",
    "refused_connections",
    "refused_system",
    "journal_errors",
    "duplicates",
    "replayed",
    "bytes_in",
    "bytes_out",
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def status(broker: Broker) -> dict[str, Any]:
    """The broker's status as a plain dict (the ``manage.status`` ACK payload).

    Args:
        broker: the running broker.

    Returns:
        ``name``, ``uptimeS``, ``connections``, ``offices`` (name -> connections), ``groups``
        (name -> consumers), ``subscriptions``, ``queuedBytes``, the limits and every counter.
    """
    config = broker.config
    result: dict[str, Any] = {
        "name": CENTRAL,
        "uptimeS": round(time.time() - broker.started, 3),
        "connections": broker.link_count,
        "offices": broker.router.offices(),
        "groups": broker.router.groups(),
        "subscriptions": broker.router.subscription_count(),
        "queuedBytes": broker.queued_bytes(),
        "maxMessageSize": config.max_message_size,
        "pingIntervalMS": config.ping_interval_ms,
        "maxConnections": config.max_connections,
        "maxSubscriptions": config.max_subscriptions,
        "maxQueueBytes": config.max_queue_bytes,
    }
    for name in COUNTERS:
        result[_camel(name)] = broker.stats[name]
    result["journal"] = journal_health(broker)
    return result


def journal_health(broker: Broker) -> dict[str, Any] | None:
    """The journal's figures (``None`` when the broker keeps none)."""
    journal = broker.journal
    if journal is None:
        return None
    segment = getattr(journal, "segment_path", None)
    return {
        "directory": str(getattr(journal, "directory", "")),
        "segment": str(segment) if segment is not None else None,
        "appended": getattr(journal, "appended", 0),
        "skipped": getattr(journal, "skipped", 0),
        "fsyncs": getattr(journal, "fsyncs", 0),
        "errors": broker.stats["journal_errors"],
    }


def connections(broker: Broker) -> list[dict[str, Any]]:
    """Every link of the broker: ``link`` (its number), ``office`` (``None`` before it has
    authenticated), ``peer`` (``host:port``), ``ready``, ``inbox``, ``patterns`` (its
    subscriptions), ``groups`` (consumed, the inbox left out), ``queuedBytes`` (output waiting
    in user space), ``closing``, ``connectedS`` (its age) and what it moved: ``messagesIn``,
    ``messagesOut``, ``bytesIn``, ``bytesOut``."""
    now = time.time()
    result = []
    for number, link in sorted(broker.links.items()):
        peer = link.transport.get_extra_info("peername") if link.transport is not None else None
        held = broker.router.holdings(number)
        office, patterns, groups = held if held is not None else (None, set(), set())
        inbox = next((g for g in groups if g.startswith("_INBOX.")), None)
        result.append(
            {
                "link": number,
                "office": office,
                "peer": link.peer if link.local else _address(peer),
                "ready": link.registered,
                "inbox": inbox,
                "patterns": sorted(patterns),
                "groups": sorted(g for g in groups if g != inbox),
                "queuedBytes": link.queued,
                "closing": link.closing,
                "connectedS": round(now - link.opened, 3),
                "messagesIn": link.messages_in,
                "messagesOut": link.messages_out,
                "bytesIn": link.bytes_in,
                "bytesOut": link.bytes_out,
            }
        )
    return result


def _address(peer: Any) -> str | None:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return None if peer is None else str(peer)


def journal_tail(broker: Broker, limit: int, group: str | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` records of the journal (of one group), newest first.

    Only the newest segments are read (as many as it takes, newest first), so asking costs the
    size of the records asked for, not of the journal. Each record: ``ts`` (epoch seconds),
    ``size`` (bytes) and the header fields of :data:`JOURNAL_FIELDS` it has.

    Raises:
        ConfigError: the broker keeps no journal.
    """
    from bus.journal import header_fields, list_segments, read_segment

    journal = broker.journal
    if journal is None:
        raise ConfigError("this broker keeps no journal (busgate broker --journal DIR)")
    journal.flush()
    found: list[dict[str, Any]] = []
    for segment in reversed(list_segments(journal.directory)):
        batch = []
        for record in read_segment(segment, torn=[]):
            fields = header_fields(record.raw, JOURNAL_FIELDS)
            if group is not None and fields.get("GRP") != group:
                continue
            batch.append({"ts": round(record.ts, 6), "size": len(record.raw), **fields})
        found.extend(reversed(batch))
        if len(found) >= limit:
            break
    return found[:limit]


def monitor() -> dict[str, Any]:
    """Process and host figures (MOP's JVM and OS monitors), read with psutil.

    Returns:
        ``process`` (pid, cpuPercent, rssBytes, threads, openFiles) and ``host`` (cpus,
        load1/5/15, memoryTotalBytes, memoryAvailableBytes, bootTime).
    """
    process = psutil.Process(os.getpid())
    with process.oneshot():
        memory = process.memory_info()
        proc = {
            "pid": process.pid,
            "cpuPercent": process.cpu_percent(interval=None),
            "rssBytes": memory.rss,
            "threads": process.num_threads(),
            "openFiles": process.num_fds() if hasattr(process, "num_fds") else 0,
        }
    load1, load5, load15 = os.getloadavg()
    host_memory = psutil.virtual_memory()
    host = {
        "cpus": psutil.cpu_count() or 0,
        "load1": load1,
        "load5": load5,
        "load15": load15,
        "memoryTotalBytes": host_memory.total,
        "memoryAvailableBytes": host_memory.available,
        "bootTime": psutil.boot_time(),
    }
    return {"process": proc, "host": host}


def handle(broker: Broker, message: Message, cmd: str) -> Message:
    """Run one management command for an authorized manager.

    Args:
        broker: the running broker.
        message: the ``manage.*`` request.
        cmd: its command.

    Returns:
        The ACK or NAK to send back.

    Raises:
        ConfigError: a missing or bad argument (the server answers NAK 400).
    """
    args = message.payload
    if cmd == "manage.status":
        return message.ack(status(broker))
    if cmd == "manage.monitor":
        try:
            return message.ack(monitor())
        except (psutil.Error, OSError) as exc:
            return message.nak(f"monitor unavailable: {exc}", 500)
    if cmd == "manage.write":
        path = broker.config.write()
        return message.ack({"file": str(path)})
    if cmd == "manage.connections":
        return message.ack({"connections": connections(broker)})
    if cmd == "manage.disconnect":
        number = args.get("link")
        if not isinstance(number, int) or isinstance(number, bool):
            raise ConfigError("manage.disconnect needs the 'link' number (manage.connections)")
        if number not in broker.links:
            return message.nak(f"no link {number}", 404)
        broker.close_link(number, CloseReason.SERVER_CLOSING, "disconnected by a manager")
        return message.ack({"link": number})
    if cmd == "manage.drain":
        group = args.get("group")
        if not isinstance(group, str) or not group or group.startswith("_INBOX."):
            raise ConfigError("manage.drain needs a 'group' (not an inbox)")
        consumers = broker.router.consumers(group)
        for number in list(consumers):
            broker.router.leave(number, group)
            broker.notify(number, "drained", {"group": group})  # the service hears of it
        return message.ack({"group": group, "drained": U32(len(consumers))})
    if cmd == "manage.journal":
        limit = args.get("limit", 50)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError("manage.journal: 'limit' must be a positive integer")
        wanted = args.get("group")
        records = journal_tail(
            broker, min(limit, MAX_JOURNAL_RECORDS), wanted if isinstance(wanted, str) else None
        )
        return message.ack({"records": records})
    name = args.get("name")
    if not isinstance(name, str) or not name or "." in name:
        raise ConfigError("manage.add/manage.delete need a post office 'name' without dots")
    if cmd == "manage.add":
        secret = args.get("secret")
        if not isinstance(secret, str) or not secret:
            raise ConfigError("manage.add needs a non-empty 'secret'")
        manager = bool(args.get("manager", False))
        broker.replace_config(broker.config.with_office(name, secret, manager))
        return message.ack({"name": name, "offices": U32(len(broker.config.offices))})
    # manage.delete
    if name not in broker.config.offices:
        return message.nak(f"no post office {name!r}", 404)
    broker.replace_config(broker.config.without_office(name))
    for number in broker.links_of(name):
        broker.close_link(number, CloseReason.AUTHORIZATION_FAILURE, "post office deleted")
    return message.ack({"name": name, "offices": U32(len(broker.config.offices))})
