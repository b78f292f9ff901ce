"""The live services as JSON: one shape for ``GET /v1/services`` and ``busgate services --json``.

``{"services": [...], "stale": bool, "as_of": float | null}``, each service::

    {"group": "demo", "instances": 2, "status": "Running", "last_seen": 1763935801.2,
     "commands": ["count", "echo"], "load": {"in_flight", "queued", "handled", "failed"},
     "schemas": {"echo": {"args": {...}, "answer": {...}, "summary": "..."}},
     "silent": 1,
     "instance_list": [{"id", "office", "host", "status", "last_seen", "interval",
                        "silent"}, ...]}

Times are wall-clock epoch seconds. An instance is ``silent`` when its last heartbeat is older
than :data:`SILENT_AFTER` of its own intervals: it may have died, but the directory keeps it
until three intervals have passed (:mod:`bus.discovery.services`); ``silent`` on the service counts
them.
``stale`` is true while the lister has lost the bus: the list is as it was at ``as_of``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from bus.discovery.services import InstanceInfo, ServiceInfo

__all__ = ["SILENT_AFTER", "instance_entry", "listing", "service_entries"]

#: Intervals without a heartbeat after which an instance is shown as silent.
SILENT_AFTER: Final = 1.5


def instance_entry(info: InstanceInfo, now: float) -> dict[str, Any]:
    """One instance as JSON (see the module docstring)."""
    heartbeat = info.heartbeat
    return {
        "id": heartbeat.instance_id,
        "office": info.office,
        "host": heartbeat.host,
        "status": str(heartbeat.status),
        "last_seen": round(info.last_seen, 3),
        "interval": heartbeat.interval,
        "silent": now - info.last_seen > SILENT_AFTER * heartbeat.interval,
    }


def service_entries(
    services: Iterable[ServiceInfo], instances: Iterable[InstanceInfo], now: float
) -> list[dict[str, Any]]:
    """Each service with its instances, as JSON (see the module docstring).

    Args:
        services: the directory's ``services()``.
        instances: the directory's ``instances()``.
        now: the wall-clock time, epoch seconds.
    """
    by_group: dict[str, list[dict[str, Any]]] = {}
    for info in instances:
        by_group.setdefault(info.group, []).append(instance_entry(info, now))
    entries = []
    for service in services:
        members = by_group.get(service.group, [])
        entries.append(
            {
                "group": service.group,
                "instances": service.instances,
                "status": service.status,
                "last_seen": round(service.last_seen, 3),
                "commands": list(service.commands),
                "schemas": {name: schema.to_json() for name, schema in service.schemas.items()},
                "load": {
                    "in_flight": service.load.in_flight,
                    "queued": service.load.queued,
                    "handled": service.load.handled,
                    "failed": service.load.failed,
                },
                "silent": sum(1 for member in members if member["silent"]),
                "instance_list": members,
            }
        )
    return entries


def listing(
    entries: list[dict[str, Any]], *, stale: bool = False, as_of: float | None = None
) -> dict[str, Any]:
    """The whole document: ``{"services": entries, "stale": stale, "as_of": as_of}``."""
    return {"services": entries, "stale": stale, "as_of": as_of}
