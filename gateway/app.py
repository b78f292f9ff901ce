"""The gateway application: ``create_app(settings) -> Starlette``.

Routes (docs/PROTOCOL.md section 9, ``gateway/openapi/openapi.json``)::

    POST /v1/request/{group}   GET /v1/services   GET /healthz   GET /openapi.json
    POST /v1/{group}/{cmd}     (typed: a live service's command, gateway/routes/typed.py)
    POST /v1/publish/{type}    GET /v1/stats      GET /readyz    GET /docs
    GET  /v1/subscribe         WS  /ws            GET /metrics   GET /  (web console)
    GET  /v1/history/{type}    (journaled events, gateway/routes/routes_history.py)
    GET  /v1/presence/{pattern} (who subscribes, gateway/routes/routes_presence.py)
    POST /v1/mail/{office}/{mailbox} (direct mail, e.g. to a MOP mailbox,
    gateway/routes/routes_mail.py)
    GET  /v1/reports           GET /reports/  (the report page, when ``report_dir`` is set)
    GET  /v1/typescript        GET /sdk/busgate.js  (the JavaScript client, gateway/routes/sdk.py)
    GET  /v1/admin/status|connections|journal, POST .../disconnect, .../drain  (managers)
    GET  /v1/admin/push, PUT|DELETE /v1/admin/push/{name}  (push subscriptions)

The lifespan starts the bus bridge (which connects in the background, so the gateway answers
``/healthz`` and a 503 ``/readyz`` while the bus is away) and, on shutdown, waits up to
``shutdown_grace`` seconds for in-flight requests before closing the bus client.

Routing edges (docs/PROTOCOL.md 9.1): the console's mount at ``/`` never answers a path an API
route knows, so a wrong method there is that route's 405 with its own ``Allow`` (``GET
/v1/request/demo`` is 405 ``Allow: POST``, not the console's 404); a path under ``/v1/`` that no
route knows is a JSON 404; one trailing slash on a ``/v1/`` path is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bus.errors import BusError, NakError
from bus.message.message import Message as BusMessage
from gateway.access.auth import CredentialsFromQuery
from gateway.access.jwks import JwksMiddleware, JwksRefresher
from gateway.bridge import Bridge, Connector, render_response
from gateway.events.sse_lean import LeanSse
from gateway.events.sse_resume import ResumingStream
from gateway.process.cycle import DIRECT_CYCLE, SERVER_CYCLE, direct_cycle
from gateway.process.metrics import Metrics
from gateway.process.settings import GatewaySettings
from gateway.routes.errors import ErrorCode, code_for_status, error_body, http_error
from gateway.routes.reports import (
    ReportAccess,
    report_refresher,
    report_routes,
    reports_endpoint,
)
from gateway.routes.request_direct import DirectRequests
from gateway.routes.routes_admin import (
    admin_connections,
    admin_disconnect,
    admin_drain,
    admin_journal,
    admin_status,
)
from gateway.routes.routes_events import publish_endpoint, subscribe_endpoint
from gateway.routes.routes_history import history_endpoint
from gateway.routes.routes_info import (
    SWAGGER_DIR,
    docs_endpoint,
    healthz_endpoint,
    load_docs_page,
    load_openapi,
    metrics_endpoint,
    openapi_endpoint,
    readyz_endpoint,
    services_endpoint,
    stats_endpoint,
)
from gateway.routes.routes_mail import mail_endpoint
from gateway.routes.routes_presence import presence_endpoint
from gateway.routes.routes_push import push_delete, push_list, push_put
from gateway.routes.routes_request import request_app
from gateway.routes.sdk import sdk_routes, typescript_endpoint
from gateway.routes.typed import TypedRoute
from gateway.state import Gateway

__all__ = ["create_app"]

log = logging.getLogger("busgate.gateway")

AUTH_OFF_WARNING = (
    "AUTHENTICATION IS OFF: anyone who can reach http://{host}:{port} may call every service "
    "and publish on every type. Configure API keys or a JWT secret before exposing the gateway."
)


async def _bus_error(request: Request, exc: Exception) -> Response:
    response = None
    headers: dict[str, str] = {}
    if isinstance(exc, NakError) and isinstance(exc.response, BusMessage):
        response = json.loads(render_response(exc.response))
        headers["X-Busgate-Mid"] = exc.response.rid or ""  # the request's MID, as for an ACK
    trace = request.scope.get("busgate.trace")
    if trace is not None:  # a request's trace, answered as for an ACK (PROTOCOL.md 5.11)
        headers["traceparent"] = trace
    error = http_error(exc, response)
    headers.update(error.headers)
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


#: The order methods are listed in an ``Allow`` header (Starlette keeps them in a set).
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    body = error_body(code_for_status(exc.status_code), str(exc.detail))
    headers = dict(exc.headers or {})
    if "Allow" in headers:  # "GET, HEAD" every time, not in a set's order of the day
        methods = {m.strip() for m in headers["Allow"].split(",")}
        order = {name: index for index, name in enumerate(_METHOD_ORDER)}
        headers["Allow"] = ", ".join(sorted(methods, key=lambda m: (order.get(m, 99), m)))
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body(ErrorCode.INTERNAL, "internal error"), status_code=500)


async def _route_error(request: Request, exc: Exception) -> Response:
    """What the app's handlers answer for an error a route raised."""
    if isinstance(exc, BusError):
        return await _bus_error(request, exc)
    if isinstance(exc, HTTPException):
        return await _http_error(request, exc)
    return await _unexpected(request, exc)


def _ws_routes(metrics: Metrics) -> list[BaseRoute]:
    """The Object System WebSocket from ``gateway/websocket/ws.py``, when that module exists."""
    if importlib.util.find_spec("gateway.websocket.ws") is None:
        return []
    make = getattr(importlib.import_module("gateway.websocket.ws"), "create_route", None)
    if not callable(make):
        return []
    route = make()
    if isinstance(route, WebSocketRoute):
        route.app = _count_sockets(route.app, metrics)
    return [route]


def _check_objects_link(settings: GatewaySettings) -> asyncio.Task[bool] | None:
    """Try /ws's Object System link in the background; a WARNING says when it is missing."""
    if importlib.util.find_spec("gateway.websocket.ws") is None:
        return None
    check = getattr(importlib.import_module("gateway.websocket.ws"), "check_link", None)
    if check is None:
        return None
    task: asyncio.Task[bool] = asyncio.create_task(check(settings), name="ws-link-check")
    return task


def _count_sockets(app: ASGIApp, metrics: Metrics) -> ASGIApp:
    """Wrap a WebSocket app so the ``open_sockets`` gauge counts its accepted sockets."""

    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        accepted = False

        async def send_counting(message: Message) -> None:
            nonlocal accepted
            if message["type"] == "websocket.accept" and not accepted:
                accepted = True
                metrics.socket_opened()
            await send(message)

        try:
            await app(scope, receive, send_counting)
        finally:
            if accepted:
                metrics.socket_closed()

    return counted


class _ConsoleMount(Mount):
    """The console at ``/``, out of the way of the API: it does not match a path that an API
    route matches (with any method) nor anything under ``/v1/``."""

    def __init__(self, api: list[BaseRoute], app: ASGIApp) -> None:
        super().__init__("/", app=app, name="console")
        self.api = api

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            path = scope["path"]
            if path.startswith("/v1/"):
                return Match.NONE, {}
            for route in self.api:
                if route.matches(scope)[0] is not Match.NONE:
                    return Match.NONE, {}
        return super().matches(scope)


def _static_routes(web_dir: str, api: list[BaseRoute]) -> list[BaseRoute]:
    path = Path(web_dir) if web_dir else None
    if path is None or not (path / "index.html").is_file():
        return []
    return [_ConsoleMount(api, StaticFiles(directory=path, html=True))]


def _docs_assets() -> list[BaseRoute]:
    """The vendored API explorer's script and style, under ``/docs/assets/``."""
    if not SWAGGER_DIR.is_dir():
        return []
    return [Mount("/docs/assets", StaticFiles(directory=SWAGGER_DIR), name="docs-assets")]


def _routes(settings: GatewaySettings, metrics: Metrics) -> list[BaseRoute]:
    api = _api_routes(settings, metrics)
    return [*api, *_static_routes(settings.web_dir, api)]


def _api_routes(settings: GatewaySettings, metrics: Metrics) -> list[BaseRoute]:
    routes = _fixed_routes(settings, metrics)
    typed = TypedRoute("/v1/{group:str}/{cmd:str}", request_app, reserved_groups(routes))
    return [*routes, typed]


def reserved_groups(routes: list[BaseRoute]) -> set[str]:
    """The first segments of the gateway's own ``/v1/`` paths: no typed route has them."""
    return {
        route.path.split("/")[2]
        for route in routes
        if isinstance(route, Route) and route.path.startswith("/v1/")
    }


def _fixed_routes(settings: GatewaySettings, metrics: Metrics) -> list[BaseRoute]:
    return [
        Route("/v1/request/{group:str}", request_app, methods=["POST"]),
        Route("/v1/publish/{type:str}", publish_endpoint, methods=["POST"]),
        Route("/v1/mail/{office:str}/{mailbox:str}", mail_endpoint, methods=["POST"]),
        Route("/v1/subscribe", subscribe_endpoint, methods=["GET"]),
        Route("/v1/history/{type:str}", history_endpoint, methods=["GET"]),
        Route("/v1/presence/{pattern:str}", presence_endpoint, methods=["GET"]),
        Route("/v1/services", services_endpoint, methods=["GET"]),
        Route("/v1/stats", stats_endpoint, methods=["GET"]),
        Route("/v1/reports", reports_endpoint, methods=["GET"]),
        Route("/v1/typescript", typescript_endpoint, methods=["GET"]),
        Route("/v1/admin/status", admin_status, methods=["GET"]),
        Route("/v1/admin/connections", admin_connections, methods=["GET"]),
        Route("/v1/admin/connections/{link:str}/disconnect", admin_disconnect, methods=["POST"]),
        Route("/v1/admin/groups/{group:str}/drain", admin_drain, methods=["POST"]),
        Route("/v1/admin/journal", admin_journal, methods=["GET"]),
        Route("/v1/admin/push", push_list, methods=["GET"]),
        Route("/v1/admin/push/{name:str}", push_put, methods=["PUT"]),
        Route("/v1/admin/push/{name:str}", push_delete, methods=["DELETE"]),
        Route("/healthz", healthz_endpoint, methods=["GET"]),
        Route("/readyz", readyz_endpoint, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/openapi.json", openapi_endpoint, methods=["GET"]),
        Route("/docs", docs_endpoint, methods=["GET"]),
        *_docs_assets(),
        *sdk_routes(),
        *_ws_routes(metrics),
        *report_routes(settings.report_dir),
    ]


def _middleware(settings: GatewaySettings, jwks: JwksRefresher | None) -> list[Middleware]:
    first = [Middleware(CredentialsFromQuery)]
    if jwks is not None:  # after CredentialsFromQuery, which moves ?key= into a header
        first.append(Middleware(JwksMiddleware, refresher=jwks))
    if not settings.cors_origins:
        return first
    return [*first, Middleware(CORSMiddleware, **_cors_options(settings))]


def _cors_options(settings: GatewaySettings) -> dict[str, Any]:
    """The CORS middleware's options (its SSE streams answered in the protocol get the same
    headers, from the same code: gateway.events.sse_lean)."""
    return {
        "allow_origins": list(settings.cors_origins),
        "allow_methods": ["GET", "POST"],
        "allow_headers": [
            "Authorization",
            "Content-Type",
            "Last-Event-ID",
            "X-API-Key",
            "X-Busgate-Timeout",
        ],
        "expose_headers": ["Retry-After", "X-Busgate-Mid"],
    }


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    """What the lean streams' copy of the CORS middleware wraps: it only completes heads."""
    raise RuntimeError("not an app")  # pragma: no cover


class _GatewayApp(Starlette):
    """Starlette, keeping the server's own per-request object in the scope (for SSE).

    ``POST /v1/request/{group}`` goes straight to :data:`request_app` when no middleware would
    act on it (no CORS, no JWKS refresh, no credentials in the query string): every request
    through the gateway takes this way, and Starlette's stack of middleware, router and
    exception wrappers is a tenth of its cost. Errors are answered by the same handlers.
    """

    fast_requests = False  # set by create_app when the middleware allows it
    #: ``GET /v1/subscribe`` answered in the gateway's HTTP protocol (gateway.events.sse_lean),
    #: set by create_app when no middleware but CORS acts on requests
    lean_sse: LeanSse | None = None
    direct_requests: DirectRequests | None = None  # the same, under the gateway's protocol
    reserved: frozenset[str] = frozenset()  # the typed route's reserved groups (create_app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if (
                self.fast_requests
                and scope["method"] == "POST"
                and b"key" not in scope["query_string"]
                and (params := self._request_params(path)) is not None
            ):
                scope["path_params"] = params
                scope["app"] = self
                cycle = scope[SERVER_CYCLE] = getattr(send, "__self__", None)  # streamed answers
                scope[DIRECT_CYCLE] = direct_cycle(cycle)  # no middleware: the answer goes there
                try:
                    await _answer_request(scope, receive, send)
                finally:
                    _forget_cycle(scope)
                return
            # uvicorn's send is a bound method of its response cycle: see routes_events.
            scope[SERVER_CYCLE] = getattr(send, "__self__", None)
            if len(path) > 4 and path[-1] == "/" and path.startswith("/v1/"):
                scope["path"] = path[:-1]  # /v1/request/demo/ is /v1/request/demo
            try:
                await super().__call__(scope, receive, send)
            finally:
                _forget_cycle(scope)
            return
        await super().__call__(scope, receive, send)

    def _request_params(self, path: str) -> dict[str, str] | None:
        """The path parameters of ``POST /v1/request/{group}`` or of the typed route
        ``POST /v1/{group}/{cmd}`` (a group not reserved), else None (Starlette routes it)."""
        if path.startswith(_REQUEST_PREFIX):
            group = path[len(_REQUEST_PREFIX) :]
            return {"group": group} if group and "/" not in group else None
        if not path.startswith("/v1/"):
            return None
        group, slash, cmd = path[4:].partition("/")
        if not (group and cmd and slash) or "/" in cmd or group in self.reserved:
            return None
        return {"group": group, "cmd": cmd}


_REQUEST_PREFIX: Final = "/v1/request/"


def _forget_cycle(scope: Scope) -> None:
    """Take the server's cycle out of the scope it holds: left there, the two hold each other,
    and every request became garbage for the cyclic collector (its full collections stopped the
    gateway for tens of milliseconds, and cost a tenth of its CPU under load)."""
    scope.pop(SERVER_CYCLE, None)
    scope.pop(DIRECT_CYCLE, None)


async def _answer_request(scope: Scope, receive: Receive, send: Send) -> None:
    """:data:`request_app` with the app's error handlers, as its route would run it."""
    started = False

    async def sending(message: Message) -> None:
        nonlocal started
        started = True
        await send(message)

    try:
        await request_app(scope, receive, sending)
    except ClientDisconnect:
        return  # the caller left before its body arrived: nobody to answer
    except Exception as exc:
        if started:
            raise  # an answer is on its way: uvicorn ends the response, as after any route
        await _answer_error(scope, receive, send, exc)


async def _answer_error(scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
    """The answer of the app's handler for ``exc``, raised before a response started."""
    handler = _bus_error if isinstance(exc, BusError) else _unexpected
    if isinstance(exc, HTTPException):
        handler = _http_error
    response = await handler(Request(scope, receive), exc)
    await response(scope, receive, send)


def create_app(settings: GatewaySettings, *, connector: Connector | None = None) -> Starlette:
    """Build the gateway application.

    Args:
        settings: the settings to run with.
        connector: makes the bus client (default ``bus.asyncio.connect`` to ``settings.bus_url``).

    Returns:
        The Starlette app; ``app.state.gateway`` is its :class:`gateway.state.Gateway`.
    """
    gateway = Gateway(settings, Bridge(settings, connector), Metrics())
    authenticator = gateway.authenticator
    assert authenticator is not None
    bridge = gateway.bridge
    gateway.metrics.follow(
        lambda: (bridge.connected, bridge.reconnects), lambda: authenticator.refused
    )
    keyset = authenticator.tokens.keyset
    jwks = None
    if keyset is not None and settings.jwt_jwks:
        jwks = JwksRefresher(keyset, settings.jwt_jwks)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not settings.auth_enabled:
            log.warning(AUTH_OFF_WARNING.format(host=settings.host, port=settings.port))
        if jwks is not None:
            await jwks.start()
        await gateway.bridge.start()
        if gateway.push is not None:
            await gateway.push.start()
        link_check = _check_objects_link(settings)
        try:
            yield
        finally:
            if link_check is not None:
                link_check.cancel()
            if gateway.push is not None:
                await gateway.push.stop()
            await gateway.bridge.stop(settings.shutdown_grace)
            if jwks is not None:
                await jwks.stop()

    handlers: dict[Any, Any] = {
        BusError: _bus_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    app = _GatewayApp(
        routes=_routes(settings, gateway.metrics),
        middleware=_middleware(settings, jwks),
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    # No middleware acts on a request: it may skip Starlette's stack (see _GatewayApp).
    app.fast_requests = not settings.cors_origins and jwks is None
    if jwks is None:  # CORS adds headers to a stream's head: the lean streams add the same
        cors = None
        if settings.cors_origins:
            cors = CORSMiddleware(_no_app, **_cors_options(settings))
        app.lean_sse = LeanSse(gateway, _route_error, resuming=ResumingStream, cors=cors)
    app.state.gateway = gateway
    for route in app.routes:  # presence reads the /ws clients' subscriptions (9.11)
        if isinstance(route, WebSocketRoute):
            gateway.bridge.presence.ws = route.endpoint
    app.state.report_access = ReportAccess(settings)
    app.state.report_refresher = report_refresher(settings)
    app.state.jwks = jwks
    app.state.openapi = load_openapi()
    app.state.openapi_variants = {}
    app.state.reserved_groups = reserved_groups(app.routes)
    app.reserved = frozenset(app.state.reserved_groups)
    if app.fast_requests:  # answered from the gateway's HTTP protocol's callbacks
        app.direct_requests = DirectRequests(app, app.reserved, _answer_request, _answer_error)
    app.state.docs_page = load_docs_page()
    return app
