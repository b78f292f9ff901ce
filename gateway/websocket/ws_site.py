"""What the lean ``/ws`` connections to one endpoint share (PROTOCOL.md 6.8; issue 35 goal 1).

:func:`site_of` finds, once per uvicorn ``Config``, the app's ``/ws`` route
(an :class:`~gateway.websocket.ws.ObjectsEndpoint`) when the lean path may take it (``ws_lean``
on, no JWKS refresher); the :class:`Site` it returns holds the endpoint, the app, the server's
WebSocket settings, the clients' keepalive pings (:mod:`gateway.websocket.ws_pings`), the
gateway's admission, and the connections with frames to write at the
end of this loop iteration (one ``call_soon`` for all of them). The connections themselves are
:class:`gateway.websocket.lean.LeanWebSocket`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Protocol

from starlette.requests import HTTPConnection
from starlette.routing import WebSocketRoute

from gateway.access.auth import ANONYMOUS, move_query_credential
from gateway.websocket.ws import ObjectsEndpoint
from gateway.websocket.ws_pings import Pings

__all__ = ["Flushable", "Site", "site_of"]

log = logging.getLogger("busgate.gateway.ws")


class Flushable(Protocol):
    """A connection with frames queued (:class:`gateway.websocket.lean.LeanWebSocket`)."""

    def flush(self) -> None:
        """Give the transport what is queued."""
        ...  # pragma: no cover


class Site:
    """What the connections to one endpoint share: the endpoint, the app, the server's
    settings, and the connections with frames to write at the end of this loop iteration."""

    def __init__(self, endpoint: ObjectsEndpoint, app: Any, config: Any, path: str) -> None:
        self.endpoint = endpoint
        self.app = app
        self.path = path.encode()
        self.gateway = getattr(getattr(app, "state", None), "gateway", None)
        settings = getattr(self.gateway, "settings", None)
        self.trusted = bool(getattr(settings, "ws_allow_server_role", False))
        self.metrics = getattr(self.gateway, "metrics", None)
        self.compression = bool(config.ws_per_message_deflate)
        self.max_size: int = config.ws_max_size
        interval: float | None = config.ws_ping_interval
        #: the clients' keepalive pings (None: no pings, ``ws_ping_interval`` 0)
        self.pings = Pings(interval, config.ws_ping_timeout) if interval else None
        self.dirty: list[Flushable] = []
        self.releasing: set[asyncio.Task[Any]] = set()

    def mark(self, ws: Flushable) -> None:
        """``ws`` has frames to write: at the end of this loop iteration, with the others'."""
        if not self.dirty:
            asyncio.get_running_loop().call_soon(self.flush)
        self.dirty.append(ws)

    def flush(self) -> None:
        dirty, self.dirty = self.dirty, []
        for ws in dirty:
            try:
                ws.flush()
            except Exception:  # one connection's bug must not cost the others their frames
                log.exception("WebSocket flush failed")

    def admit(self, http: Any, query: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
        """The caller's principal (the gateway's admission; anonymous without a gateway).

        Raises:
            BusError: refused (credentials, rate).
        """
        admit = getattr(self.gateway, "admit", None)
        if admit is None or getattr(self.gateway, "open", False):
            return ANONYMOUS  # no credentials asked and no rate kept: nothing to look at
        scope: dict[str, Any] = {
            "type": "websocket",
            "path": self.path.decode(),
            "query_string": query,
            "headers": headers,
            "client": http.client,
            "server": http.server,
            "app": self.app,
        }
        if query:
            move_query_credential(scope)
        return admit(HTTPConnection(scope))

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Hold ``task`` (a join or release in progress) until it is done."""
        self.releasing.add(task)
        task.add_done_callback(self.releasing.discard)

    def release(self) -> None:
        """A client left the endpoint's server (which stops with its last client)."""
        endpoint = self.endpoint
        if endpoint._clients > 1 and not endpoint._lock.locked():
            endpoint._clients -= 1
            return
        self.keep(asyncio.get_running_loop().create_task(endpoint._release()))


_SITES: weakref.WeakKeyDictionary[Any, Site | None] = weakref.WeakKeyDictionary()


def site_of(config: Any) -> Site | None:
    """The ``/ws`` endpoint of the app uvicorn's ``config`` serves, when the lean path may
    take it (None: it may not, or the app has none)."""
    try:
        return _SITES[config]
    except KeyError:
        pass
    site = None
    app = config.app
    state = getattr(app, "state", None)
    settings = getattr(getattr(state, "gateway", None), "settings", None)
    lean = getattr(settings, "ws_lean", True) and getattr(state, "jwks", None) is None
    for route in getattr(app, "routes", ()) if lean and not isinstance(app, str) else ():
        if isinstance(route, WebSocketRoute) and isinstance(route.endpoint, ObjectsEndpoint):
            site = Site(route.endpoint, app, config, route.path)
            break
    _SITES[config] = site
    return site
