"""The read-only endpoints: services, stats, health, readiness, metrics and the API document."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from bus.discovery.directory_json import service_entries
from bus.masking import mask_url
from gateway.access.auth import Principal, allowed
from gateway.process.resources import docs_page, openapi_document, package_path
from gateway.routes.errors import ErrorCode, error_body
from gateway.routes.typed import live_paths
from gateway.state import gateway_of

__all__ = [
    "DOCS_PATH",
    "OPENAPI_PATH",
    "SWAGGER_DIR",
    "docs_endpoint",
    "healthz_endpoint",
    "load_docs_page",
    "load_openapi",
    "metrics_endpoint",
    "openapi_endpoint",
    "readyz_endpoint",
    "services_endpoint",
    "stats_endpoint",
]

#: The OpenAPI document the gateway serves (package data, checked by the tests).
OPENAPI_PATH = package_path("openapi", "openapi.json")
#: The ``/docs`` page: the vendored Swagger UI on ``/openapi.json`` (no CDN, works offline).
DOCS_PATH = package_path("openapi", "docs.html")
#: Swagger UI's files (swagger-ui-dist from npm, Apache-2.0), served at ``/docs/assets/``.
SWAGGER_DIR = package_path("web", "vendor", "swagger-ui")
#: Distinct ``servers`` variants of the document kept (one per address the gateway is reached at).
_SERVED_VARIANTS = 16


def load_openapi(path: Path | None = None) -> bytes:
    """The OpenAPI document's bytes (checked to be JSON); by default the installed one.

    Raises:
        ConfigError: the install lacks it (:mod:`gateway.process.resources`).
    """
    data = (path or openapi_document()).read_bytes()
    json.loads(data)
    return data


async def services_endpoint(request: Request) -> Response:
    """``GET /v1/services``: live services and instance counts from OAM heartbeats.

    While the bus is away the last known list is kept, marked ``"stale": true`` with
    ``as_of`` the time the link was lost (see :meth:`gateway.bridge.Bridge.services`). Each
    service carries its instances and how many fell silent (:mod:`bus.discovery.directory_json`, the
    shape ``busgate services --json`` prints too).
    """
    gateway = gateway_of(request)
    gateway.admit(request)
    body = gateway.bridge.services()
    directory = gateway.bridge.directory
    if directory is not None:
        as_of = body.get("as_of")
        now = as_of if body.get("stale") and isinstance(as_of, float) else time.time()
        body["services"] = service_entries(directory.services(), directory.instances(), now)
    body["services"] += gateway.bridge.micro.listing()  # NATS micro services (10.3)
    return JSONResponse(body)


async def stats_endpoint(request: Request) -> Response:
    """``GET /v1/stats``: the recent window of requests by group (wall-clock times, epoch s);
    with ``?history=1`` also per-minute history
    (:meth:`gateway.process.metrics.Metrics.history`)."""
    gateway = gateway_of(request)
    gateway.admit(request)
    now, wall = gateway.monotonic(), time.time()
    body = gateway.metrics.stats(now, wall)
    if request.query_params.get("history") not in (None, "", "0", "false"):
        body["history"] = gateway.metrics.history(now, wall)
    return JSONResponse(body)


async def healthz_endpoint(request: Request) -> Response:
    """``GET /healthz``: the process answers."""
    return JSONResponse({"status": "ok"})


async def readyz_endpoint(request: Request) -> Response:
    """``GET /readyz``: 200 while connected to the bus and not shutting down, else 503; with
    ``--workers N``, how many of the workers are (:mod:`gateway.process.readiness`)."""
    gateway = gateway_of(request)
    bridge = gateway.bridge
    if gateway.closing:
        return JSONResponse(error_body(ErrorCode.NOT_READY, "shutting down"), status_code=503)
    if bridge.connected:
        bus = mask_url(bridge.settings.bus_url)  # /readyz is public: never the bus password
        body: dict[str, object] = {"status": "ready", "bus": bus, "reconnects": bridge.reconnects}
        if gateway.workers is not None:  # --workers N: the others may not be ready yet
            ready, count = gateway.workers()
            body["workers"] = {"ready": ready, "count": count}
        return JSONResponse(body)
    message = f"not connected to the bus at {mask_url(bridge.settings.bus_url)}"
    if bridge.last_error:
        message += f": {bridge.last_error}"
    return JSONResponse(error_body(ErrorCode.NOT_READY, message), status_code=503)


async def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics``: the Prometheus exposition (OpenMetrics when the scraper asks for it)."""
    gateway = gateway_of(request)
    body, content_type = gateway.metrics.render(request.headers.get("accept", ""))
    return Response(body, headers={"Content-Type": content_type})


async def openapi_endpoint(request: Request) -> Response:
    """``GET /openapi.json``, its ``servers`` the address this request reached the gateway at
    (so the explorer at ``/docs`` tries calls against this gateway, whatever its port), with a
    path per live service command and its schemas (:func:`gateway.routes.typed.live_paths`).

    With auth on (PROTOCOL.md 9.2) the live commands are listed only to a caller with the
    credentials ``/v1/services`` takes, and only for the groups that caller may reach; without
    credentials the document holds the gateway's own routes and nothing of the services on the
    bus, and wrong credentials are a 401 (counted like any other wrong secret).
    """
    gateway = gateway_of(request)
    base = f"{request.url.scheme}://{request.url.netloc}"
    document = _static_document(request, base)
    directory = gateway.bridge.directory
    live = (
        {}
        if directory is None
        else live_paths(directory.services(), request.app.state.reserved_groups)
    )
    if gateway.settings.auth_enabled and live:
        if _has_credentials(request):
            principal = gateway.admit(request)
            live = {path: item for path, item in live.items() if _may_reach(principal, item)}
        else:
            live = {}
    if live:
        parsed = json.loads(document)
        parsed["paths"].update(live)
        document = json.dumps(parsed, ensure_ascii=False, indent=2).encode()
    return Response(document, media_type="application/json")


def _has_credentials(request: Request) -> bool:
    headers = request.headers
    return "x-api-key" in headers or "authorization" in headers or "key" in request.query_params


def _may_reach(principal: Principal, path_item: dict[str, Any]) -> bool:
    group = path_item["post"]["tags"][0]
    return isinstance(group, str) and allowed(principal.groups, group)


def _static_document(request: Request, base: str) -> bytes:
    variants: dict[str, bytes] = request.app.state.openapi_variants
    document = variants.get(base)
    if document is None:
        parsed = json.loads(request.app.state.openapi)
        parsed["servers"] = [{"url": base, "description": "this gateway"}]
        if gateway_of(request).settings.auth_enabled:  # no call without credentials: not `{}`
            parsed["security"] = [need for need in parsed["security"] if need]
        document = json.dumps(parsed, ensure_ascii=False, indent=2).encode()
        if len(variants) >= _SERVED_VARIANTS:
            variants.pop(next(iter(variants)))
        variants[base] = document
    return document


def load_docs_page() -> bytes:
    """The ``/docs`` page's bytes.

    Raises:
        ConfigError: the install lacks it (:mod:`gateway.process.resources`).
    """
    return docs_page().read_bytes()


async def docs_endpoint(request: Request) -> Response:
    """``GET /docs``: the API explorer (Swagger UI) on ``/openapi.json``: parameters, schemas,
    and calls tried against this gateway (its scripts are served from ``/docs/assets/``)."""
    page: bytes = request.app.state.docs_page
    return HTMLResponse(page)
