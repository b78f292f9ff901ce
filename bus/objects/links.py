"""Outbound Object System links to other servers (asyncio): :class:`Link` and the loop that
keeps one up.

A link that is down is logged as a WARNING when it goes down (or its first attempt fails) and
again every :data:`LINK_DOWN_REPEAT` seconds while it stays down; its return is logged as INFO
(by :class:`~bus.objects.tcp.ObjectServer`, which sees the other server subscribe).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Final

from bus.errors import ConnectError
from bus.link.tls import tls_failure

__all__ = ["LINK_DOWN_REPEAT", "LINK_REFUSED_HINT", "Link", "keep_linked"]

log = logging.getLogger("bus.objects.tcp")  # the driver's logger, as before the split

#: Seconds between two WARNINGs about the same link while it stays down.
LINK_DOWN_REPEAT: Final = 60.0
#: What lets a server link in, said where a refused link is logged and answered.
LINK_REFUSED_HINT: Final = (
    "the other server must allow this server's address (busgate broker "
    "--objects-server-peer ADDRESS, BUSGATE_OBJECTS_SERVER_PEERS) or both must hold the same "
    "BUSGATE_OBJECTS_LINK_SECRET"
)

#: Serves one connection of a link until it is lost.
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Link:
    """An outbound link to another server, reconnected until :meth:`ObjectServer.stop`.

    Attributes:
        host, port: where the other server listens.
        tls: the client context when the link speaks TLS (None: plain TCP).
        connected: set while the link is up and the other server has subscribed to us.
        settled: set once the first attempt has an outcome (linked, refused or lost).
        refused: what the other server said when it refused our ``role: server`` (it allows
            neither our address nor our link secret), while it does; None otherwise.
    """

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.connected = asyncio.Event()
        self.settled = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.up_since: float | None = None  # monotonic time the link came up, while it is up
        self.refused: str | None = None

    async def wait(self, timeout: float = 5.0) -> None:
        """Wait until the link is up.

        Raises:
            ConnectError: not linked within ``timeout`` seconds.
        """
        try:
            await asyncio.wait_for(self.connected.wait(), timeout)
        except TimeoutError as exc:
            raise ConnectError(f"no link to {self.host}:{self.port} within {timeout:g} s") from exc


async def keep_linked(
    link: Link,
    serve: Serve,
    stopping: Callable[[], bool],
    *,
    retry_delay: float,
    tls_handshake_timeout: float,
) -> None:
    """Open ``link`` and ``serve`` it; when it is lost or cannot be opened, log and retry every
    ``retry_delay`` seconds until ``stopping()``."""
    warned = -LINK_DOWN_REPEAT  # monotonic time of the last WARNING about this link
    while not stopping():
        error: str
        try:
            reader, writer = await asyncio.open_connection(
                link.host,
                link.port,
                ssl=link.tls,
                ssl_handshake_timeout=tls_handshake_timeout if link.tls else None,
            )
        except ssl.SSLError as exc:
            error = tls_failure(exc)
        except OSError as exc:
            error = str(exc) or type(exc).__name__
        else:
            await serve(reader, writer)
            error = "the link was lost"
            if link.up_since is not None:
                warned = -LINK_DOWN_REPEAT  # a fresh outage: say so at once
        if link.up_since is not None:
            link.up_since = None
        link.connected.clear()
        link.settled.set()
        if stopping():
            return
        now = time.monotonic()
        if now - warned >= LINK_DOWN_REPEAT:
            warned = now
            log.warning(
                "Object System link to %s:%d is down (%s); retrying every %g s",
                link.host,
                link.port,
                error,
                retry_delay,
            )
        await asyncio.sleep(retry_delay)
