"""The HTTP/WebSocket gateway of busgate (starlette on uvicorn).

``app`` puts every route in one list; ``state`` is what the routes share; ``bridge`` is the
gateway's side of the bus (``micro``: NATS micro services). The rest is grouped by what it holds:
``routes/`` (the HTTP API, PROTOCOL.md section 9), ``events/`` (SSE, keepalives, presence, push),
``websocket/`` (``/ws``, 6.8), ``access/`` (who may call, 9.7) and ``process/`` (settings,
``busgate gateway``, workers, uvicorn). Old module paths (``gateway.hub``) still import, with a
DeprecationWarning (:mod:`gateway.moved`).
"""

from typing import TYPE_CHECKING

from bus.moved import moved_attribute, register
from gateway.moved import GATEWAY_MOVED

register(GATEWAY_MOVED)

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """``gateway.hub`` and the other moved modules by their old names (:mod:`bus.moved`)."""
        return moved_attribute(__name__, name)
