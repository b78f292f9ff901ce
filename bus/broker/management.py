"""Management commands of the central post office (seed 001; ``docs/PROTOCOL.md`` 5.6).

Only connections whose post office is in ``BrokerConfig.managers`` may call them; the server
checks that before :func:`handle` runs and answers others with NAK 403.

- ``manage.status``: counters, connections, groups and subscriptions (:func:`status`);
- ``manage.add`` ``{name, secret, manager?}``: add or replace a post office;
- ``manage.delete`` ``{name}``: delete a post office and close its connections;
- ``manage.write``: write the running configuration to its file;
- ``manage.monitor``: process and host figures from psutil (:func:`monitor`).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Final

import psutil

from bus.enums import CloseReason
from bus.errors import ConfigError
from bus.frame import U32
from bus.message import Message

if TYPE_CHECKING:  # pragma: no cover
    from bus.broker.server import Broker

__all__ = ["CENTRAL", "COMMANDS", "COUNTERS", "handle", "monitor", "status"]

#: The broker's own post office name (MOP's reserved ``central``), the SRC of what it sends.
CENTRAL: Final = "central"
COMMANDS: Final = frozenset(
    {"manage.status", "manage.add", "manage.delete", "manage.write", "manage.monitor"}
)
#: Counters in ``manage.status`` (snake_case here, camelCase on the wire).
COUNTERS: Final = (
    "routed",
    "dropped",
    "no_responders",
    "failed_requests",
    "slow_consumers",
    "refused_auth",
    "refused_connections",
    "journal_errors",
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
    return result


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
