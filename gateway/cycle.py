"""What a streamed response can learn and do about its connection under uvicorn.

ASGI gives an app no way to see a server shutting down or to drop a connection whose client
reads nothing. uvicorn's ``send`` is a bound method of its per-request cycle, which the app
keeps in the scope (:data:`SERVER_CYCLE`, set in :mod:`gateway.app`); the streams use it for
both. Under another server there is no cycle, and these fall back to doing nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from starlette.types import Scope

__all__ = ["SERVER_CYCLE", "SLOW_CUT_S", "cut", "server_closing"]

log = logging.getLogger("busgate.gateway")

#: Where the app keeps the server's per-request object.
SERVER_CYCLE: Final = "busgate.server_cycle"
#: Seconds a stream whose client reads nothing is given past its own end (an SSE client marked
#: too slow, an NDJSON answer past its timeout) before its connection is cut: a write to a
#: client that does not read waits forever, holding the response and what it holds.
SLOW_CUT_S: Final = 5.0


def server_closing(scope: Scope) -> Callable[[], bool]:
    """A test for "the server is shutting down", from the server's own per-request object.

    uvicorn marks every response in progress ``keep_alive = False`` when it starts a graceful
    shutdown, then waits for them to end; an SSE stream never ends on its own, so it watches
    that mark (whatever hosts the app: ``busgate gateway``, ``busgate run`` or a test). A
    connection that was not keep-alive from the start, or another server, gives no signal.
    """
    cycle = scope.get(SERVER_CYCLE)
    if getattr(cycle, "keep_alive", None) is not True:
        return lambda: False
    return lambda: getattr(cycle, "keep_alive", True) is False


def cut(scope: Scope, why: str) -> bool:
    """Drop the request's connection at once (no more bytes are written to it).

    Returns:
        Whether there was a connection to drop (False under a server without the cycle).
    """
    transport = getattr(scope.get(SERVER_CYCLE), "transport", None)
    if transport is None:
        return False
    log.warning("%s: connection cut", why)
    transport.abort()
    return True
