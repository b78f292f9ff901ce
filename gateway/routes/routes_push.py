"""``/v1/admin/push``: push subscriptions declared over HTTP (PROTOCOL.md 9.14,
:mod:`gateway.events.push`).

- ``GET /v1/admin/push``: ``{"push": [...]}``, each one's declaration (secret hidden), status,
  position, pending, delivered, retried, dead_lettered, lag_seconds;
- ``PUT /v1/admin/push/{name}``: declare or change one (JSON body: ``pattern``, ``url``,
  ``secret``, ``max_attempts``, ``dead_letter``, ...): 201 new, 200 changed; 409
  ``not_journaled`` when the bus keeps none of its events;
- ``DELETE /v1/admin/push/{name}``: remove one and its position: 204; 404 unknown.

The caller needs what ``/v1/admin`` needs (a key for every group and type, with authentication
on); the gateway needs a ``push_dir`` (else 409 ``conflict``).
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bus.errors import ConfigError, DecodeError
from bus.push import NAME, PushSpec
from gateway.routes.errors import ErrorCode, error_body
from gateway.routes.routes_admin import _admitted
from gateway.routes.routes_request import read_body

__all__ = ["push_delete", "push_list", "push_put"]


async def push_list(request: Request) -> Response:
    """``GET /v1/admin/push``."""
    gateway = _admitted(request)
    runners = gateway.push.runners if gateway.push is not None else {}
    return JSONResponse({"push": [runner.describe() for runner in runners.values()]})


def _name(request: Request) -> str:
    name = request.path_params["name"]
    if not NAME.fullmatch(name):
        raise DecodeError(f"push name {name[:64]!r}: letters, digits, _ and -, 1..64")
    return str(name)


def _conflict(text: str) -> Response:
    return JSONResponse(error_body(ErrorCode.CONFLICT, text), status_code=409)


async def push_put(request: Request) -> Response:
    """``PUT /v1/admin/push/{name}``."""
    gateway = _admitted(request)
    name = _name(request)
    body = await read_body(request, gateway.settings.max_body)
    try:
        data = json.loads(body or b"{}")
        if not isinstance(data, dict):
            raise DecodeError("the body must be a JSON object: pattern, url, ...")
        spec = PushSpec.from_json(data, name=name)
    except (ValueError, ConfigError) as exc:
        raise DecodeError(str(exc)) from exc
    if gateway.push is None:
        return _conflict("this gateway runs no push subscriptions")
    try:
        new = await gateway.push.put(spec)
    except ConfigError as exc:
        return _conflict(str(exc))
    return JSONResponse(spec.to_json(), status_code=201 if new else 200)


async def push_delete(request: Request) -> Response:
    """``DELETE /v1/admin/push/{name}``."""
    gateway = _admitted(request)
    name = _name(request)
    if gateway.push is None:
        return _conflict("this gateway runs no push subscriptions")
    try:
        gone = await gateway.push.delete(name)
    except ConfigError as exc:
        return _conflict(str(exc))
    if not gone:
        return JSONResponse(error_body(ErrorCode.NOT_FOUND, f"no push {name!r}"), status_code=404)
    return Response(status_code=204)
