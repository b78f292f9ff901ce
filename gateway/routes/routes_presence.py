"""``GET /v1/presence/{pattern}``: who subscribes to types matching a pattern, on every gateway
and the bus (PROTOCOL.md 9.11, :mod:`gateway.events.presence`).

The answer is ``{"count": N, "clients": [{"id", "transport", "caller", "since"}, ...]}``,
the longest present first: SSE and ``/ws`` clients of every gateway of the bus (each announces
its own over the bus, so two gateways agree) and, on the broker, its bus links (not on NATS,
which has no broker). With authentication on, it needs the presence permission (an API key
with ``:presence``, a token with the claim ``presence: true``) and the pattern among the
caller's types.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bus.discovery.topics import check_pattern
from bus.errors import ConfigError, DecodeError
from gateway.state import gateway_of

__all__ = ["presence_endpoint"]


async def presence_endpoint(request: Request) -> Response:
    """Handle ``GET /v1/presence/{pattern}``."""
    gateway = gateway_of(request)
    pattern = request.path_params["pattern"]
    try:
        check_pattern(pattern)
    except ConfigError as exc:
        raise DecodeError(str(exc)) from exc
    principal = gateway.admit(request)
    principal.check_presence()
    principal.check_type(pattern)
    gateway.bridge.check_connected()
    clients = gateway.bridge.presence.clients(pattern)
    listed = [client.to_json() for client in clients]
    return JSONResponse({"count": len(listed), "clients": listed})
