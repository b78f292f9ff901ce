"""The Object System's registry of named services, sans-I/O (``services/register``,
``services/unregister``, ``services/discovery``; docs/PROTOCOL.md section 6).

Each service name maps the routing ids that registered it to the connection they are reached
by: ``None`` for a client of this server, the server link for one learnt from another server.
The router keeps it up to date as clients and links come and go.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["ServiceRegistry"]


class ServiceRegistry:
    """Named services: name -> routing id -> the link it is reached by (``None``: local)."""

    def __init__(self) -> None:
        self._services: dict[str, dict[str, Hashable | None]] = {}

    def listing(self, name: str | None = None) -> list[tuple[str, str]]:
        """Known services as (name, routing id), sorted; only ``name``'s when given."""
        return sorted(
            (svc, rid)
            for svc, holders in self._services.items()
            if name is None or svc == name
            for rid in holders
        )

    def via(self, name: str, routing_id: str) -> Hashable | None:
        """The link by which ``routing_id``'s service ``name`` was learnt (``None``: local)."""
        return self._services.get(name, {}).get(routing_id)

    def register(self, name: str, routing_id: str, via: Hashable | None) -> None:
        """``routing_id`` offers ``name``, reached over link ``via`` (``None``: our client)."""
        self._services.setdefault(name, {})[routing_id] = via

    def unregister(self, name: str, routing_id: str) -> None:
        """``routing_id`` no longer offers ``name``."""
        holders = self._services.get(name)
        if holders is not None:
            holders.pop(routing_id, None)
            if not holders:
                del self._services[name]

    def forget(self, routing_id: str) -> None:
        """``routing_id`` is gone (or took another id): it offers nothing any more."""
        for name in list(self._services):
            self._services[name].pop(routing_id, None)
            if not self._services[name]:
                del self._services[name]

    def move_via(self, conn: Hashable, other: Hashable) -> None:
        """Link ``conn`` is gone but ``other`` reaches the same server: learnt services move."""
        for holders in self._services.values():
            for rid, via in holders.items():
                if via == conn:
                    holders[rid] = other

    def forget_via(self, conn: Hashable) -> None:
        """Link ``conn`` is gone: the services learnt over it are too."""
        for name in list(self._services):
            holders = self._services[name]
            for rid in [rid for rid, via in holders.items() if via == conn]:
                del holders[rid]
            if not holders:
                del self._services[name]
