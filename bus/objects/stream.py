"""An Object System connection's way out: the :class:`Peer` protocol and its TCP stream form.

:class:`~bus.objects.tcp.ObjectServer` writes what its router routes to a :class:`Peer`: a TCP
connection (:class:`StreamPeer`), the WebSocket endpoint of ``gateway/websocket/ws.py``, the bus
bridge.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Protocol

from bus.objects.codec import BusinessObject

__all__ = ["Peer", "StreamPeer", "enable_tcp_keepalive"]

log = logging.getLogger("bus.objects.tcp")  # the driver's logger, as before the split


class Peer(Protocol):
    """One connection's way out. Both calls return at once (no awaiting in the router's path)."""

    def send(self, data: bytes, obj: BusinessObject) -> None:
        """Queue the wire bytes ``data`` of ``obj`` for the peer."""

    def close(self, reason: str) -> None:
        """Close after what was already queued; the transport then calls ``detach``."""


class StreamPeer:
    """A TCP connection: writes go to the transport's buffer, a slow reader is cut off.

    Everything routed to it in one loop iteration leaves in one write (a burst of objects from
    one sender costs one system call per receiver, not one per object). The first bytes queued
    are reported to ``on_queued``, which must see that :meth:`flush` is called soon (the server
    calls it at the end of the loop's callback, or sooner during a long batch); without it the
    peer schedules its own flush.
    """

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        max_write_buffer: int,
        on_queued: Callable[[StreamPeer], None] | None = None,
    ) -> None:
        self._writer = writer
        self._max = max_write_buffer
        self._out: list[bytes] = []
        self._on_queued = on_queued
        self.closing = False

    def send(self, data: bytes, obj: BusinessObject) -> None:
        if self.closing:
            return
        if not self._out:
            if self._on_queued is not None:
                self._on_queued(self)
            else:
                asyncio.get_running_loop().call_soon(self.flush)
        self._out.append(data)

    def flush(self) -> None:
        """Write what is queued now; never raises.

        A peer whose connection is already gone (reset by the client, its transport closed
        before the read loop saw it) drops what was queued for it: uvloop raises
        ``RuntimeError`` on a write to a closed transport, the standard loop logs a warning for
        each, and either would have cost the peers flushed after it, or the sender whose read
        routed the objects, their connection (issue 30 item 1).
        """
        out, self._out = self._out, []
        if self.closing or not out:
            return
        transport = self._writer.transport
        if transport.is_closing():
            self.closing = True  # the read loop sees the loss and detaches the connection
            return
        try:
            self._writer.write(out[0] if len(out) == 1 else b"".join(out))
        except (RuntimeError, OSError) as exc:  # closed under us all the same
            log.debug("object peer gone while writing: %s", exc)
            self.closing = True
            transport.abort()
            return
        if transport.get_write_buffer_size() > self._max:
            log.warning("object peer too slow: %d bytes unsent", self._max)
            transport.abort()
            self.closing = True

    def close(self, reason: str) -> None:
        if not self.closing:
            self.flush()  # what was routed to it before the close goes first
            self.closing = True
            self._writer.close()

    def abort(self) -> None:
        self.flush()  # what was routed to it already is given its chance, as close() does
        self.closing = True
        self._writer.transport.abort()


def enable_tcp_keepalive(writer: asyncio.StreamWriter, interval: float) -> None:
    """TCP keepalive on ``writer``'s socket, idle ``interval`` seconds, so the kernel notices a
    vanished host."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = max(1, int(interval))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", max(1, idle // 3))):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    if hasattr(socket, "TCP_KEEPCNT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
