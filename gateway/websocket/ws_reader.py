"""A WebSocket server's frame reader, sans-I/O (RFC 6455 section 5; PROTOCOL.md 6.8).

Bytes from the client in, events out: :class:`Message` (a whole text or binary message, its
fragments joined), :class:`Ping`, :class:`Pong` and :class:`Close`. A frame that has not fully
arrived consumes nothing: its bytes wait for the rest. No extension is negotiated on this path
(permessage-deflate is declined), so a reserved bit set is a protocol error.

Errors close the connection with the code the RFC names (7.4.1):

- :class:`WebSocketError` with ``code`` 1002: an unmasked client frame (5.1), a reserved bit or
  opcode, a fragmented or oversized control frame (5.5), a continuation with no message begun,
  a new data frame inside a fragmented message (5.4), a malformed close payload (5.5.1);
- :class:`WebSocketError` with ``code`` 1007: a text message or close reason not UTF-8 (8.1);
- :class:`bus.errors.LimitError` (close 1009): a message larger than ``max_size``, refused from
  its frame header, before its payload is buffered.

The writer side is :func:`gateway.websocket.ws_frames.server_frame` and :func:`close_frame`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from websockets.speedups import apply_mask

from bus.errors import LimitError, ProtocolError

__all__ = [
    "DEFAULT_MAX_SIZE",
    "Close",
    "Event",
    "FrameReader",
    "Message",
    "Ping",
    "Pong",
    "WebSocketError",
    "close_frame",
    "control_frame",
]

#: The largest message accepted by default (uvicorn's ``ws_max_size``, 16 MiB).
DEFAULT_MAX_SIZE: Final = 16 * 1024 * 1024

PROTOCOL_ERROR: Final = 1002
INVALID_DATA: Final = 1007
_NO_CODE: Final = 1005  # a close frame without a code (7.1.5)

_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class WebSocketError(ProtocolError):
    """The client broke RFC 6455; the connection closes with ``code`` (1002 or 1007)."""

    def __init__(self, reason: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True, slots=True)
class Message:
    """A whole data message: ``str`` for a text message, ``bytes`` for a binary one."""

    data: str | bytes


@dataclass(frozen=True, slots=True)
class Ping:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """The client's close frame: its code (1005 when it gave none) and reason."""

    code: int
    reason: str


Event = Message | Ping | Pong | Close


def _valid_close_code(code: int) -> bool:
    # RFC 6455 7.4.1/7.4.2 and the IANA registry: 1004-1006 and 1015 never go on the wire
    return 1000 <= code <= 1014 and code not in (1004, 1005, 1006) or 3000 <= code <= 4999


class FrameReader:
    """Reads a client's frames. After a :class:`Close` it reads nothing more.

    Args:
        max_size: the largest message in bytes (a larger one raises :class:`LimitError`).
    """

    __slots__ = ("max_size", "_buffer", "_parts", "_size", "_text", "_closed")

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.max_size = max_size
        self._buffer = b""
        self._parts: list[bytes] | None = None  # a fragmented message's frames so far
        self._size = 0
        self._text = False
        self._closed = False

    def lone_pong(self, data: bytes) -> bool:
        """True when ``data`` is one whole masked pong frame and nothing else, with no earlier
        bytes waiting: it is consumed (a keepalive's answer needs no event). False: ``data`` is
        for :meth:`feed` (which also refuses a malformed pong).
        """
        if self._buffer or self._closed or len(data) < 6 or data[0] != 0x80 | _PONG:
            return False
        second = data[1]
        return bool(second & 0x80) and (second & 0x7F) < 126 and len(data) == 6 + (second & 0x7F)

    def feed(self, data: bytes) -> list[Event]:
        """The events that ``data`` completes (those before an error are lost with it).

        Raises:
            WebSocketError: a protocol violation (``.code`` 1002 or 1007).
            LimitError: a message larger than ``max_size``.
        """
        if self._closed:
            return []
        buf = self._buffer + data if self._buffer else data
        events: list[Event] = []
        pos, end = 0, len(buf)
        while end - pos >= 2:
            first, second = buf[pos], buf[pos + 1]
            if first & 0x70:
                raise WebSocketError("a reserved bit is set (no extension was negotiated)")
            if not second & 0x80:
                raise WebSocketError("a client frame must be masked (RFC 6455 5.1)")
            opcode, fin = first & 0x0F, first & 0x80
            size, head = second & 0x7F, 2
            if size == 126:
                if end - pos < 4:
                    break
                (size,) = struct.unpack_from("!H", buf, pos + 2)
                head = 4
            elif size == 127:
                if end - pos < 10:
                    break
                (size,) = struct.unpack_from("!Q", buf, pos + 2)
                if size >> 63:
                    raise WebSocketError("a frame length has its top bit set")
                head = 10
            self._check_frame(opcode, fin, size)
            stop = pos + head + 4 + size
            if stop > end:
                break
            mask = buf[pos + head : pos + head + 4]
            payload = apply_mask(buf[pos + head + 4 : stop], mask) if size else b""
            pos = stop
            event = self._frame(opcode, fin, payload)
            if event is not None:
                events.append(event)
                if isinstance(event, Close):
                    self._closed = True
                    break
        self._buffer = buf[pos:] if pos < end and not self._closed else b""
        return events

    def _check_frame(self, opcode: int, fin: int, size: int) -> None:
        """What the header alone says is wrong: before any of the payload is kept."""
        if opcode >= 0x8:
            if opcode > _PONG:
                raise WebSocketError(f"reserved opcode {opcode:#x}")
            if not fin:
                raise WebSocketError("a control frame must not be fragmented (RFC 6455 5.5)")
            if size > 125:
                raise WebSocketError("a control frame carries at most 125 bytes (RFC 6455 5.5)")
            return
        if opcode > _BINARY:
            raise WebSocketError(f"reserved opcode {opcode:#x}")
        if opcode == _CONTINUATION:
            if self._parts is None:
                raise WebSocketError("a continuation frame with no message begun")
        elif self._parts is not None:
            raise WebSocketError("a new message inside a fragmented one (RFC 6455 5.4)")
        total = size + (self._size if opcode == _CONTINUATION else 0)
        if total > self.max_size:
            raise LimitError("max_message_size", total, self.max_size)

    def _frame(self, opcode: int, fin: int, payload: bytes) -> Event | None:
        if opcode == _PING:
            return Ping(payload)
        if opcode == _PONG:
            return Pong(payload)
        if opcode == _CLOSE:
            return _close(payload)
        if opcode != _CONTINUATION:
            if fin:
                return self._message(payload, opcode == _TEXT)
            self._parts, self._size, self._text = [payload], len(payload), opcode == _TEXT
            return None
        parts = self._parts
        assert parts is not None  # checked from the header
        parts.append(payload)
        self._size += len(payload)
        if not fin:
            return None
        self._parts, self._size = None, 0
        return self._message(b"".join(parts), self._text)

    @staticmethod
    def _message(payload: bytes, text: bool) -> Message:
        if not text:
            return Message(payload)
        try:
            return Message(payload.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise WebSocketError("a text message is not UTF-8", INVALID_DATA) from exc


def _close(payload: bytes) -> Close:
    if not payload:
        return Close(_NO_CODE, "")
    if len(payload) == 1:
        raise WebSocketError("a close frame's payload of one byte (RFC 6455 5.5.1)")
    (code,) = struct.unpack_from("!H", payload)
    if not _valid_close_code(code):
        raise WebSocketError(f"close code {code} is not one a peer may send")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebSocketError("a close reason is not UTF-8", INVALID_DATA) from exc
    return Close(code, reason)


def control_frame(opcode: int, payload: bytes = b"") -> bytes:
    """An unmasked control frame (ping 0x9, pong 0xA, close 0x8) of at most 125 bytes."""
    return bytes((0x80 | opcode, len(payload))) + payload


def close_frame(code: int, reason: str = "") -> bytes:
    """The server's close frame with ``code`` (none for 1005) and ``reason`` (cut to fit)."""
    if code == _NO_CODE:
        return control_frame(_CLOSE)
    data = reason.encode("utf-8")[:123].decode("utf-8", "ignore").encode("utf-8")
    return control_frame(_CLOSE, struct.pack("!H", code) + data)
