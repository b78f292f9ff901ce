"""DtronixMessageQueue wire frames (seed 002): sans-I/O decoder and pure encoders.

A frame is one type byte, then for the frame types that carry data a ``u16`` length
(little-endian, as the original's ``BitConverter`` writes it) and that many bytes::

    Empty 01 | More 02 len data | Last 03 len data | EmptyLast 04 | Command 05 len data | Ping 06

A message is zero or more More/Empty frames closed by a Last or EmptyLast frame; the decoder joins
the data of its frames. Ping and Command frames stand alone and may arrive between the frames of a
message without disturbing it. See ``docs/PROTOCOL.md`` section 3 for every rule and examples.

The decoder does no I/O: feed it bytes with :meth:`WireDecoder.receive_data`, then call
:meth:`WireDecoder.next_event` until it returns :data:`NEED_DATA`. A partially received frame
never consumes bytes, so the result is the same however the input is chunked.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, TypeAlias, cast

from bus.errors import ConfigError, EncodeError, ProtocolError
from bus.frame.enums import CloseReason, CommandKind, FrameType
from bus.frame.frame import pure_python_requested

_scan: Callable[..., tuple[list[bytes | None], int]] | None
try:  # the optional C accelerator of the data path; the code below is the reference
    if pure_python_requested():
        raise ImportError("BUSGATE_PURE_PYTHON")
    from bus.native._hotpath import scan as _scan
except ImportError:  # pragma: no cover - no C compiler at install time
    _scan = None

__all__ = [
    "DEFAULT_MAX_FRAME",
    "DEFAULT_MAX_MESSAGE",
    "NEED_DATA",
    "CommandReceived",
    "DisconnectReceived",
    "MessageReceived",
    "NeedData",
    "PingReceived",
    "WireDecoder",
    "WireEvent",
    "accelerated",
    "encode_command",
    "encode_disconnect",
    "encode_message",
    "encode_ping",
    "use_accelerator",
]

#: Largest data length of one frame: 16 KiB minus the 3 header bytes (v1.1 ``MaxFrameSize``).
DEFAULT_MAX_FRAME: Final = 16381
#: Largest message (the joined data of its frames) a decoder accepts by default: 16 MiB.
DEFAULT_MAX_MESSAGE: Final = 16 * 1024 * 1024

_MAX_U16: Final = 0xFFFF
_HEADER: Final = struct.Struct("<BH")  # type byte, u16 little-endian length (seed 002)
_HEADER_SIZE: Final = _HEADER.size
_LAST_HEADER: Final = _HEADER.pack
_LAST: Final = int(FrameType.LAST)
# Compact the receive buffer once this many consumed bytes sit at its front (and they are at
# least half of it), so large inputs fed in small chunks cost O(n) in total, never O(n^2).
_COMPACT_AT: Final = 64 * 1024


class NeedData(Enum):
    """Type of the :data:`NEED_DATA` sentinel."""

    NEED_DATA = "NEED_DATA"


#: Returned by :meth:`WireDecoder.next_event` when no complete event is buffered.
NEED_DATA: Final = NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A whole message: the joined data of its More/Empty frames and its Last/EmptyLast frame."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PingReceived:
    """A Ping frame (``06``)."""


@dataclass(frozen=True, slots=True)
class DisconnectReceived:
    """A Disconnect command (``05 02 00 00 <reason>``): the peer is closing the link."""

    reason: CloseReason


@dataclass(frozen=True, slots=True)
class CommandReceived:
    """A Command frame other than Disconnect: its kind byte and the bytes after it."""

    kind: CommandKind
    data: bytes


WireEvent: TypeAlias = MessageReceived | PingReceived | DisconnectReceived | CommandReceived

_PING: Final = PingReceived()
_SINGLE_BYTE: Final = frozenset({FrameType.EMPTY, FrameType.EMPTY_LAST, FrameType.PING})
_WITH_LENGTH: Final = frozenset({FrameType.MORE, FrameType.LAST, FrameType.COMMAND})


def _check_max_frame(max_frame: int) -> None:
    if not 1 <= max_frame <= _MAX_U16:
        raise ConfigError(f"max_frame must be 1..{_MAX_U16}, got {max_frame}")


class WireDecoder:
    """Sans-I/O decoder of wire frames into events.

    Args:
        max_frame: largest data length of one frame; a longer length is a protocol error.
            Default :data:`DEFAULT_MAX_FRAME` (16381), at most 65535.
        max_message: largest total data of one message; the decoder refuses a frame that would
            take a message past it as soon as that frame's header arrives, so it never buffers
            more than ``max_message + max_frame + 3`` bytes of a message.
            Default :data:`DEFAULT_MAX_MESSAGE` (16 MiB).

    Raises:
        ConfigError: a limit is out of range.

    After a :class:`~bus.errors.ProtocolError` the decoder is dead: every later call to
    :meth:`next_event` raises the same error again.
    """

    def __init__(
        self, max_frame: int = DEFAULT_MAX_FRAME, max_message: int = DEFAULT_MAX_MESSAGE
    ) -> None:
        _check_max_frame(max_frame)
        if max_message < 0:
            raise ConfigError(f"max_message must be >= 0, got {max_message}")
        self.max_frame = max_frame
        self.max_message = max_message
        self._buffer = bytearray()
        self._offset = 0  # bytes of _buffer already consumed
        self._parts: list[bytes] = []  # data of the message being assembled
        self._message_size = 0
        self._in_message = False
        self._error: ProtocolError | None = None
        # Messages the accelerator found, in order (bytes; None is a Ping), not yet returned.
        self._ready: deque[bytes | None] = deque()

    @property
    def buffered(self) -> int:
        """Bytes received but not yet turned into frames (a partial frame, trailing input)."""
        return len(self._buffer) - self._offset

    @property
    def idle(self) -> bool:
        """True when no partial frame or partial message is pending (a clean place to close)."""
        return self.buffered == 0 and not self._in_message and not self._ready

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer received bytes; nothing is parsed until :meth:`next_event`.

        Args:
            data: bytes read from the peer, in any chunking.
        """
        if self._offset >= _COMPACT_AT and self._offset * 2 >= len(self._buffer):
            del self._buffer[: self._offset]
            self._offset = 0
        self._buffer += data

    def next_event(self) -> WireEvent | Literal[NeedData.NEED_DATA]:
        """Return the next complete event, or :data:`NEED_DATA` if none is buffered yet.

        Returns:
            A :data:`WireEvent`, or :data:`NEED_DATA`.

        Raises:
            ProtocolError: a bad frame type, length, command or an oversized message; its
                ``close_reason`` is the one to send in the Disconnect before closing.
        """
        if self._error is not None:
            raise self._error
        ready = self._ready
        if not ready and not self._in_message and _scan is not None and _use_scan:
            # The usual input, one-frame messages and Pings, is cut up by the accelerator in one
            # call; it stops before anything else, which the reference code below reads.
            items, self._offset = _scan(
                self._buffer, self._offset, self.max_frame, self.max_message
            )
            ready.extend(items)
        if ready:
            data = ready.popleft()
            return _PING if data is None else MessageReceived(data)
        try:
            while True:
                event = self._next_frame()
                if event is not None:
                    return event
        except ProtocolError as exc:
            self._error = exc
            raise

    def next_messages(self) -> list[bytes]:
        """The bodies of the messages buffered next, in order: what :meth:`next_event` would
        return one by one as :class:`MessageReceived`, without an event object each.

        Only the one-frame messages the accelerator cut up are taken; it stops before
        anything else (a Ping, a Command, a message of several frames, a partial frame, bad
        input), which :meth:`next_event` returns or raises. So it is empty without the
        accelerator, and whenever :meth:`next_event` has something else first.
        """
        if self._error is not None or _scan is None or not _use_scan:
            return []
        ready = self._ready
        if not ready:
            if self._in_message:
                return []
            items, self._offset = _scan(
                self._buffer, self._offset, self.max_frame, self.max_message
            )
            if None not in items:  # no Ping among them: the usual case
                return cast("list[bytes]", items)
            ready.extend(items)
        bodies = []
        while ready and ready[0] is not None:
            bodies.append(cast(bytes, ready.popleft()))
        return bodies

    def events(self) -> Iterator[WireEvent]:
        """Yield every complete buffered event, stopping at :data:`NEED_DATA`.

        Raises:
            ProtocolError: as :meth:`next_event`.
        """
        while (event := self.next_event()) is not NEED_DATA:
            yield event

    def _next_frame(self) -> WireEvent | Literal[NeedData.NEED_DATA] | None:
        """Consume one whole frame; its event, ``None`` for a frame with no event, or NEED_DATA."""
        buffer, start = self._buffer, self._offset
        available = len(buffer) - start
        if available < 1:
            return NEED_DATA
        frame_type = self._frame_type(buffer[start])
        if frame_type in _SINGLE_BYTE:
            self._offset = start + 1
            return self._single_byte_frame(frame_type)
        if available < _HEADER_SIZE:
            return NEED_DATA
        _, length = _HEADER.unpack_from(buffer, start)
        self._check_length(frame_type, length)
        end = start + _HEADER_SIZE + length
        if len(buffer) < end:
            return NEED_DATA
        data = bytes(buffer[start + _HEADER_SIZE : end])
        self._offset = end
        if frame_type is FrameType.COMMAND:
            return _command(data)
        return self._message_frame(frame_type, data)

    def _frame_type(self, byte: int) -> FrameType:
        # Unset (0) never travels; 7 (Padding, added after v1.1) is not part of our protocol.
        if byte not in _SINGLE_BYTE and byte not in _WITH_LENGTH:
            raise ProtocolError(_bad_type(byte, bytes(self._buffer[self._offset :][:80])))
        return FrameType(byte)

    def _check_length(self, frame_type: FrameType, length: int) -> None:
        # The original rejects a zero length: empty data travels as Empty/EmptyLast.
        if length == 0:
            raise ProtocolError(f"{frame_type.name} frame with length 0")
        if length > self.max_frame:
            raise ProtocolError(f"{frame_type.name} frame length {length} > {self.max_frame}")
        if frame_type is not FrameType.COMMAND and self._message_size + length > self.max_message:
            raise ProtocolError(
                f"message size {self._message_size + length} > max_message {self.max_message}"
            )

    def _single_byte_frame(self, frame_type: FrameType) -> WireEvent | None:
        if frame_type is FrameType.PING:
            return _PING
        if frame_type is FrameType.EMPTY:
            self._in_message = True  # contributes no data
            return None
        return self._finish_message()  # EMPTY_LAST

    def _message_frame(self, frame_type: FrameType, data: bytes) -> MessageReceived | None:
        self._parts.append(data)
        self._message_size += len(data)
        if frame_type is FrameType.MORE:
            self._in_message = True
            return None
        return self._finish_message()  # LAST

    def _finish_message(self) -> MessageReceived:
        parts = self._parts
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._parts = []
        self._message_size = 0
        self._in_message = False
        return MessageReceived(data)


_use_scan = True


def accelerated() -> bool:
    """True when frames are cut by the C accelerator."""
    return _use_scan and _scan is not None


def use_accelerator(enabled: bool = True) -> bool:
    """Cut frames with the C accelerator (when built) or with the reference code (tests run both).

    Returns:
        Whether the accelerator is now in use.
    """
    global _use_scan
    _use_scan = bool(enabled) and _scan is not None
    return _use_scan


def _command(data: bytes) -> DisconnectReceived | CommandReceived:
    """Decode a Command frame's data (seed 002: byte 0 is the command kind)."""
    kind = data[0]
    if kind == CommandKind.DISCONNECT:
        if len(data) != 2:
            raise ProtocolError(f"Disconnect command of {len(data)} bytes, expected 2")
        # A reason we do not know still means the peer is leaving: report it as UNKNOWN.
        reason = data[1]
        known = reason in CloseReason._value2member_map_
        return DisconnectReceived(CloseReason(reason) if known else CloseReason.UNKNOWN)
    if kind in (CommandKind.MQ_COMMAND, CommandKind.RPC_COMMAND):
        return CommandReceived(CommandKind(kind), data[1:])
    raise ProtocolError(f"bad command kind byte 0x{kind:02x}")


def _frame(frame_type: FrameType, data: bytes | memoryview) -> bytes:
    return _HEADER.pack(frame_type, len(data)) + data


def encode_message(
    data: bytes | bytearray | memoryview, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """Encode one message as More frames closed by a Last frame, or one EmptyLast if empty.

    Args:
        data: the message bytes.
        max_frame: largest data length per frame (the peer's decoder limit). Default 16381.

    Returns:
        The frames' bytes: ``04`` for an empty message, else ``02 len data`` for every full
        chunk but the last and ``03 len data`` for the last chunk.

    Raises:
        ConfigError: ``max_frame`` is not within 1..65535.
    """
    size = len(data)
    if 0 < size <= max_frame <= _MAX_U16 and type(data) is bytes:  # one Last frame: the usual
        return _LAST_HEADER(_LAST, size) + data
    _check_max_frame(max_frame)
    if size == 0:
        return bytes([FrameType.EMPTY_LAST])
    if size <= max_frame:
        return _frame(FrameType.LAST, bytes(data))
    view = memoryview(data).cast("B")
    last_start = ((size - 1) // max_frame) * max_frame
    parts = [
        _frame(FrameType.MORE, view[at : at + max_frame]) for at in range(0, last_start, max_frame)
    ]
    parts.append(_frame(FrameType.LAST, view[last_start:]))
    return b"".join(parts)


def encode_ping() -> bytes:
    """Encode a Ping frame.

    Returns:
        ``06``.
    """
    return bytes([FrameType.PING])


def encode_disconnect(reason: CloseReason) -> bytes:
    """Encode a Disconnect command with its close reason.

    Args:
        reason: why the link is closing.

    Returns:
        ``05 02 00 00 <reason>``.
    """
    return _frame(FrameType.COMMAND, bytes([CommandKind.DISCONNECT, CloseReason(reason)]))


def encode_command(
    kind: CommandKind,
    data: bytes | bytearray | memoryview = b"",
    max_frame: int = DEFAULT_MAX_FRAME,
) -> bytes:
    """Encode a Command frame of kind MQ_COMMAND or RPC_COMMAND.

    Args:
        kind: the command kind byte; use :func:`encode_disconnect` for a Disconnect.
        data: the bytes after the kind byte; with it they must fit in one frame.
        max_frame: largest data length of the frame. Default 16381.

    Returns:
        ``05 len <kind> data``.

    Raises:
        EncodeError: ``kind`` is DISCONNECT or not a command kind, or the data is too long.
        ConfigError: ``max_frame`` is not within 1..65535.
    """
    _check_max_frame(max_frame)
    if kind not in (CommandKind.MQ_COMMAND, CommandKind.RPC_COMMAND):
        raise EncodeError(f"command kind {kind!r} not allowed here; use encode_disconnect")
    if 1 + len(data) > max_frame:
        raise EncodeError(
            f"command data of {len(data)} bytes does not fit a {max_frame}-byte frame"
        )
    return _frame(FrameType.COMMAND, bytes([kind]) + data)


def _bad_type(byte: int, head: bytes) -> str:
    """Why a frame type byte is refused; an HTTP server's answer is named as such."""
    if head.startswith(b"HTTP/"):
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        return (
            f"the peer speaks HTTP, not the bus protocol (it answered {status!r}): "
            "this is an HTTP port (a gateway's?), not a broker's"
        )
    return f"bad frame type byte 0x{byte:02x}"
