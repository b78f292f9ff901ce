"""The old import paths of the gateway's modules that moved into its packages (issue 36).

``import gateway.hub`` or ``from gateway.settings import GatewaySettings`` still works, as the
same module now at ``gateway.events.hub`` or ``gateway.process.settings``, with a
:class:`DeprecationWarning` that names the new path (:mod:`bus.moved` answers them;
``gateway/__init__.py`` registers this table there).
"""

from __future__ import annotations

#: The gateway's old dotted names -> their new ones.
GATEWAY_MOVED: dict[str, str] = {
    f"gateway.{name}": f"gateway.{package}.{name}"
    for package, names in {
        "access": ["auth", "tokens", "jwks"],
        "events": ["hub", "keepalives", "wheel", "presence", "push", "push_http"],
        "routes": [
            "routes_admin", "routes_events", "routes_history", "routes_info", "routes_mail",
            "routes_presence", "routes_push", "routes_request", "typed", "reports", "sdk",
            "idempotency", "idempotency_cache", "negotiate", "payload", "errors",
        ],
        "process": [
            "server", "cli", "workers", "settings", "cycle", "http_protocol", "resources",
            "metrics", "metrics_requests",
        ],
        "websocket": ["ws", "ws_frames", "ws_last"],
    }.items()
    for name in names
}  # fmt: skip
