"""``/v1/admin/...``: who is on the bus, how the broker and its journal are, and a manager's
actions (docs/PROTOCOL.md 9.8), what Centrifugo's admin UI and nats-top show.

Each endpoint is a management command (bus/broker/management.py) sent over the gateway's own
bus connection, so two credentials are needed:

- the HTTP caller's: with authentication on, a key (or token) that may reach every group and
  every type (``groups *``, ``types *``); anyone else gets 403;
- the gateway's on the bus: its post office (``--bus-name``) must be one of the broker's
  managers (``busgate run`` connects its gateway as the manager it creates). If not, 403 says so.

| endpoint                                   | management command    |
|--------------------------------------------|-----------------------|
| ``GET /v1/admin/status``                   | ``manage.status`` (with journal health) |
| ``GET /v1/admin/connections``              | ``manage.connections`` |
| ``POST /v1/admin/connections/{link}/disconnect`` | ``manage.disconnect`` |
| ``POST /v1/admin/groups/{group}/drain``    | ``manage.drain``      |
| ``GET /v1/admin/journal?limit=&group=``    | ``manage.journal``    |
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bus.discovery.names import check_group
from bus.errors import DecodeError, DisconnectedError, NakError, RefusedError
from bus.masking import mask_url
from gateway.state import Gateway, gateway_of

__all__ = [
    "admin_connections",
    "admin_disconnect",
    "admin_drain",
    "admin_journal",
    "admin_status",
]

#: Seconds the broker gets to answer a management command.
MANAGE_TIMEOUT = 5.0


def _admitted(request: Request) -> Gateway:
    gateway = gateway_of(request)
    principal = gateway.admit(request)
    everything = "*" in principal.groups and "*" in principal.types
    if gateway.settings.auth_enabled and not everything:
        raise RefusedError(
            f"{principal.name!r} may not manage the bus: that needs a key for every group and "
            "type (groups * and types *)"
        )
    return gateway


async def _manage(gateway: Gateway, cmd: str, args: dict[str, Any] | None = None) -> Any:
    client = gateway.bridge.client
    if client is None or not gateway.bridge.connected:
        where = mask_url(gateway.settings.bus_url)
        raise DisconnectedError(f"not connected to the bus at {where}")
    try:
        reply = await client.manage(cmd, args or {}, timeout=MANAGE_TIMEOUT)
    except RefusedError as exc:
        who = gateway.settings.bus_name or "anonymous"
        raise RefusedError(
            f"the gateway's bus connection ({who}) is not one of the broker's managers: "
            f"start the gateway with --bus-name/--bus-secret of a manager office ({exc.reason})"
        ) from exc
    except NakError as exc:
        if exc.rcd == 400:
            raise DecodeError(exc.msg) from exc
        raise
    return reply.payload.to_dict() if reply.payload is not None else {}


async def admin_status(request: Request) -> Response:
    """``GET /v1/admin/status``: the broker's counters, limits and journal health."""
    return JSONResponse(await _manage(_admitted(request), "manage.status"))


async def admin_connections(request: Request) -> Response:
    """``GET /v1/admin/connections``: every link of the broker."""
    body = await _manage(_admitted(request), "manage.connections")
    links = _as_list(body.get("connections"))
    for link in links:
        # The frame mapping writes an empty list as {} (PROTOCOL.md 1.6): lists stay lists here.
        for name in ("patterns", "groups"):
            link[name] = _as_list(link.get(name))
    return JSONResponse({"connections": links})


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


async def admin_disconnect(request: Request) -> Response:
    """``POST /v1/admin/connections/{link}/disconnect``."""
    gateway = _admitted(request)
    text = request.path_params["link"]
    if not text.isdigit():
        raise DecodeError(f"link must be a number (GET /v1/admin/connections), not {text[:20]!r}")
    return JSONResponse(await _manage(gateway, "manage.disconnect", {"link": int(text)}))


async def admin_drain(request: Request) -> Response:
    """``POST /v1/admin/groups/{group}/drain``."""
    gateway = _admitted(request)
    group = request.path_params["group"]
    try:
        check_group(group)
    except ValueError as exc:
        raise DecodeError(str(exc)) from exc
    return JSONResponse(await _manage(gateway, "manage.drain", {"group": group}))


async def admin_journal(request: Request) -> Response:
    """``GET /v1/admin/journal?limit=50&group=demo``: the newest journal records."""
    gateway = _admitted(request)
    args: dict[str, Any] = {}
    limit = request.query_params.get("limit")
    if limit is not None:
        if not limit.isdigit() or int(limit) < 1:
            raise DecodeError(f"limit must be a positive integer, not {limit[:20]!r}")
        args["limit"] = int(limit)
    group = request.query_params.get("group")
    if group:
        args["group"] = group
    body = await _manage(gateway, "manage.journal", args)
    return JSONResponse({"records": _as_list(body.get("records"))})
