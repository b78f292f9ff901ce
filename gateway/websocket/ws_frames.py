"""WebSocket frames written whole: the fast lane of the gateway's ``/ws`` fan-out.

Through ASGI every object to every WebSocket client goes through Starlette's ``send``, uvicorn's
``send`` and the websockets library's frame serializer, one call chain and one socket write per
object per client. A server's frames are not masked (RFC 6455 5.1), so without an extension the
frame of an object is the same bytes for every client: :func:`server_frame` builds it once per
object, and a client's sender writes what queued up for it in one write.

:class:`FrameWritingProtocol` is uvicorn's websockets (sans-I/O) protocol that offers this to the
app as the ASGI extension :data:`EXTENSION`: a :class:`FrameWriter` in
``scope["extensions"]``. It is usable only once the handshake is done with no extension
negotiated (the gateway declines permessage-deflate unless ``ws_compression``); otherwise, or
under another server, the app sends through ASGI as before. Only whole data frames go this
way: the protocol object still writes its own control frames (ping, close) between them.

Its keepalive pings come from the loop's one timer wheel (:mod:`gateway.events.keepalives`), as an
SSE stream's keepalives do: uvicorn arms two timers per connection per ping (the ping, then
its pong's deadline) and builds each ping frame through the websockets library, which at
20,000 idle connections was most of the gateway's idle CPU. Here a ping is the four bytes of a
prebuilt frame plus its payload, written when the wheel finds it due, and a missing pong is
found the same way (up to a slot of the wheel late). The interval, the timeout and what
follows a timeout are uvicorn's (``ws_ping_interval``, ``ws_ping_timeout``).

What waits for one client is an :class:`Outbox`: routing appends to it once per object per
client, so it is a bounded deque and one waiting sender, not an ``asyncio.Queue`` (whose
``put_nowait`` is half a dozen Python calls, and the second largest cost of a fan-out after
routing itself).
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections import deque
from typing import Any, Final, Generic, TypeVar

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from gateway.events.keepalives import keepalives

__all__ = [
    "EXTENSION",
    "FrameCache",
    "FrameWriter",
    "FrameWritingProtocol",
    "Outbox",
    "drop_later",
    "server_frame",
]

#: The key of the :class:`FrameWriter` in an ASGI scope's ``extensions``.
EXTENSION: Final = "busgate.websocket.frames"

_TEXT: Final = 0x81  # FIN, opcode 1
_BINARY: Final = 0x82  # FIN, opcode 2
_PING_HEAD: Final = b"\x89\x04"  # FIN, opcode 9; an unmasked payload of 4 bytes


def server_frame(payload: bytes, *, text: bool) -> bytes:
    """One unfragmented, unmasked data frame (RFC 6455 5.2) carrying ``payload``.

    ``text`` frames must carry UTF-8 (the caller's promise: JSON metadata is).
    """
    first = _TEXT if text else _BINARY
    size = len(payload)
    if size < 126:
        head = bytes((first, size))
    elif size < 65536:
        head = struct.pack("!BBH", first, 126, size)
    else:
        head = struct.pack("!BBQ", first, 127, size)
    return head + payload


class FrameCache:
    """The frame of the last object framed: routing hands the same bytes to every client in a
    row, so each object is framed once however many clients get it."""

    __slots__ = ("_data", "_frame")

    def __init__(self) -> None:
        self._data = b""
        self._frame = b""

    def frame(self, data: bytes, *, text: bool) -> bytes:
        """The frame of an encoded object: as text, its metadata without the NUL; else all."""
        if data is not self._data:
            self._frame = server_frame(data[:-1] if text else data, text=text)
            self._data = data
        return self._frame


_T = TypeVar("_T")


class Outbox(Generic[_T]):
    """What waits to be sent to one client, in order: at most ``limit`` items, taken by one
    sender (:meth:`get`), which a :meth:`put` wakes.

    Args:
        limit: items it holds at most; :meth:`put` refuses more (the client is too slow).
    """

    __slots__ = ("items", "limit", "_waiter")

    def __init__(self, limit: int) -> None:
        self.items: deque[_T] = deque()
        self.limit = limit
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: _T) -> bool:
        """Append ``item``; False (nothing appended) when the outbox holds ``limit`` already."""
        if len(self.items) >= self.limit:
            return False
        self.items.append(item)
        self._wake()
        return True

    def put_last(self, item: _T) -> None:
        """Append ``item`` even to a full outbox, the oldest item dropped to make room (a
        close marker must reach the sender)."""
        if len(self.items) >= self.limit:
            self.items.popleft()
        self.items.append(item)
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> _T:
        """The oldest item, once there is one (the rest stay in :attr:`items`)."""
        while not self.items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self.items.popleft()


class FrameWriter:
    """Writes whole server frames to one WebSocket connection, behind uvicorn's protocol."""

    def __init__(self, protocol: WebSocketsSansIOProtocol) -> None:
        self._protocol = protocol

    def usable(self) -> bool:
        """Whether frames may be written now: handshake done, no extension negotiated (a
        compressed connection needs its own frames), not closing, not gone."""
        p = self._protocol
        return (
            p.handshake_complete
            and not p.close_sent
            and not p.disconnected
            and not p.conn.extensions
            and not p.transport.is_closing()
        )

    async def write(self, frames: bytes) -> bool:
        """Write ``frames`` once the transport takes more (its flow control, as uvicorn's own
        ``send`` waits); False if the connection closed meanwhile (nothing written)."""
        p = self._protocol
        if not p.writable.is_set():
            await p.writable.wait()
        if not self.usable():
            return False
        p.transport.write(frames)
        return True

    def drop_within(self, seconds: float) -> None:
        """Drop the TCP connection in ``seconds`` unless it is gone by then (see
        :func:`drop_later`): for a client cut off as too slow, whatever frames it is sent."""
        drop_later(self._protocol, seconds)


def drop_later(protocol: WebSocketsSansIOProtocol, seconds: float) -> None:
    """Abort ``protocol``'s transport in ``seconds`` unless the connection is lost by then.

    A client that reads nothing never takes its close frame, and a transport that is closed
    (rather than aborted) keeps the socket, and what it holds, until its buffer is written:
    such a client kept its TCP connection for good (issue 30 item 6). Aborting a connection
    that is already lost would report the loss twice on the standard loop, hence the check.
    """

    def drop() -> None:
        if not protocol.disconnected:
            protocol.transport.abort()

    protocol.loop.call_later(seconds, drop)


class _Pinger:
    """One connection's keepalive ping in the loop's wheel (:mod:`gateway.events.keepalives`)."""

    __slots__ = ("done", "next_ping", "protocol")

    def __init__(self, protocol: FrameWritingProtocol, next_ping: float) -> None:
        self.protocol = protocol
        self.next_ping = next_ping
        self.done = False

    def keepalive_due(self, now: float) -> float | None:
        p = self.protocol
        if self.done or p.close_sent or p.transport.is_closing():
            return None
        timeout = p.ping_timeout
        if p.pending_ping_payload is not None and timeout is not None:
            deadline = p.ping_sent_at + timeout
            if now < deadline:
                return deadline
            p.keepalive_timeout()  # no pong in time: uvicorn's close, then the drop
            return None
        if now < self.next_ping:
            return self.next_ping
        payload = struct.pack("!I", random.getrandbits(32))  # names this ping's pong
        p.pending_ping_payload = payload
        p.ping_sent_at = now
        p.transport.write(_PING_HEAD + payload)
        self.next_ping = now + (p.ping_interval or 0.0)
        return self.next_ping if timeout is None else min(now + timeout, self.next_ping)


class FrameWritingProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets protocol with a :class:`FrameWriter` in each connection's scope,
    its keepalive pings from the loop's one timer wheel, and a connection whose ping went
    unanswered dropped within the close timeout (uvicorn only closes its transport, which
    waits for a client that reads nothing)."""

    _pinger: _Pinger | None = None

    def start_keepalive(self) -> None:
        interval = self.ping_interval
        if interval is None or interval <= 0:
            return
        pinger = self._pinger = _Pinger(self, self.loop.time() + interval)
        keepalives(interval).add(pinger, pinger.next_ping)

    def stop_keepalive(self) -> None:
        if self._pinger is not None:
            self._pinger.done = True  # the wheel forgets it when it comes round
            self._pinger = None
        super().stop_keepalive()

    def handle_pong(self, event: Any) -> None:
        pinger = self._pinger
        if pinger is None:
            super().handle_pong(event)
            return
        if self.pending_ping_payload is None or bytes(event.data) != self.pending_ping_payload:
            return  # unsolicited or stale
        self.last_ping_rtt = self.loop.time() - self.ping_sent_at
        self.pending_ping_payload = None
        # the next ping as uvicorn times it: an interval after this one was sent

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()
        drop_later(self, self.close_timeout)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope: Any = getattr(self, "scope", None)  # absent when the handshake was refused
        if scope is not None:
            scope["extensions"][EXTENSION] = FrameWriter(self)
