"""MOP framing and messages, sans-I/O (seed 001; docs/PROTOCOL.md section 11).

A MOP post office and its central post office exchange JSON messages over TCP, each framed as::

    [[[ <MOP-Base64 of the UTF-8 length> ] <UTF-8 JSON> ]]
    [[[Bk]{"-={([env])}=-":{"from":"test1.po","to":"central.po","type":"manage.pong", ...}}]]

The length is the number of UTF-8 bytes of the JSON, written as MOP's Base64 of its minimal
big-endian bytes (:func:`bus.link.auth.b64_encode_int`): 2 to 4 characters, so at most 2**24 - 1.
A message is one JSON object holding the **envelope** (``-={([env])}=-`` in the original's code,
``!@#$-env`` in the seed's text: both are read, the first is written) and the content fields.

:class:`MopDeframer` finds frames in a byte stream the way the original's ``MessageDeframer``
does: it scans for ``[[[``, reads the length, and skips whatever is not a frame (garbage, a frame
larger than ``max_message_size``, a frame whose ``]]`` is not where its length says) by looking
for the next ``[[[``. Unlike the original it never loops forever on a bad close and it reports
every skip (:class:`FrameSkipped`), so the driver can log it. A partial frame consumes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from bus.errors import DecodeError, EncodeError
from bus.link.auth import MOP_ALPHABET, b64_decode_int, b64_encode_int

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ENVELOPE_KEY",
    "MAX_FRAME_LENGTH",
    "NEED_DATA",
    "SEED_ENVELOPE_KEY",
    "FrameReceived",
    "FrameSkipped",
    "MopDeframer",
    "MopMessage",
    "decode_message",
    "encode_frame",
    "encode_message",
]

#: The envelope key MOP's Java code uses (``Message.ENVELOPE_NAME``); the one we write.
ENVELOPE_KEY: Final = "-={([env])}=-"
#: The envelope key of the seed's text; read as well.
SEED_ENVELOPE_KEY: Final = "!@#$-env"
#: Largest length 4 MOP-Base64 characters hold (the original reads at most 4).
MAX_FRAME_LENGTH: Final = 2**24 - 1
#: Default largest JSON body accepted (MOP's own default is 5000 bytes; ours is the broker's).
DEFAULT_MAX_MESSAGE_SIZE: Final = 1024 * 1024

_OPEN: Final = b"[[["
_CLOSE: Final = b"]]"
_LENGTH_CHARS: Final = frozenset(MOP_ALPHABET.encode("ascii"))


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by :meth:`MopDeframer.next_event` when a whole frame has not arrived yet.
NEED_DATA: Final = _NeedData()


@dataclass(frozen=True)
class FrameReceived:
    """One frame's JSON bytes."""

    data: bytes


@dataclass(frozen=True)
class FrameSkipped:
    """Bytes that were not a usable frame were skipped (``reason`` says why)."""

    reason: str
    size: int


@dataclass(frozen=True)
class MopMessage:
    """A MOP message: the envelope attributes and the content fields.

    Attributes:
        sender: ``from``, ``<post office>.<mailbox>`` (required).
        id: ``id``, ``<MOP-Base64 counter>.<post office>`` (required).
        to: ``to`` for direct mail (``None``: a published message).
        type: ``type``: ``major.minor`` of a publication, or a direct message's type
            (``manage.ping``, ...).
        reply: ``reply``: the id of the message this one answers.
        expect: ``expect``: a reply is wanted.
        secure: ``secure``: fields the sender encrypted (not supported; see PROTOCOL.md 11).
        fields: every other attribute of the JSON object (the content).
    """

    sender: str
    id: str
    to: str | None = None
    type: str | None = None
    reply: str | None = None
    expect: bool = False
    secure: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def post_office(self) -> str:
        """The post office part of ``from`` (``test1`` of ``test1.po``)."""
        return self.sender.partition(".")[0]

    @property
    def to_post_office(self) -> str | None:
        """The post office part of ``to``, or ``None`` for a publication."""
        return None if self.to is None else self.to.partition(".")[0]


def encode_message(message: MopMessage) -> bytes:
    """The UTF-8 JSON of a message: the envelope (``-={([env])}=-``) first, then the fields.

    Raises:
        EncodeError: a field JSON cannot hold.
    """
    envelope: dict[str, Any] = {"from": message.sender}
    if message.to is not None:
        envelope["to"] = message.to
    if message.type is not None:
        envelope["type"] = message.type
    envelope["id"] = message.id
    if message.reply is not None:
        envelope["reply"] = message.reply
    if message.expect:
        envelope["expect"] = True
    if message.secure is not None:
        envelope["secure"] = message.secure
    body = {ENVELOPE_KEY: envelope, **message.fields}
    try:
        return orjson.dumps(body)
    except TypeError as exc:
        raise EncodeError(f"MOP message fields are not JSON: {exc}") from exc


def encode_frame(message: MopMessage) -> bytes:
    """A message framed for the wire: ``[[[`` + length + ``]`` + JSON + ``]]``.

    Raises:
        EncodeError: the fields are not JSON, or the JSON is longer than 2**24 - 1 bytes.
    """
    body = encode_message(message)
    if len(body) > MAX_FRAME_LENGTH:
        raise EncodeError(f"MOP message of {len(body)} bytes is longer than a frame can say")
    return b"[[[" + b64_encode_int(len(body)).encode("ascii") + b"]" + body + _CLOSE


def _text(envelope: Mapping[str, Any], name: str, required: bool = False) -> str | None:
    value = envelope.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise DecodeError(f"MOP envelope {name!r} must be {'non-empty ' if required else ''}text")
    return value


def decode_message(data: bytes) -> MopMessage:
    """Read one frame's JSON as a message.

    Raises:
        DecodeError: not UTF-8 JSON, not an object, no envelope, or an envelope without
            ``from`` and ``id`` (the original's ``Message`` refuses the same).
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"MOP message is not UTF-8 JSON ({exc.msg})", exc.pos) from exc
    if not isinstance(value, dict):
        raise DecodeError("MOP message is not a JSON object")
    key = ENVELOPE_KEY if ENVELOPE_KEY in value else SEED_ENVELOPE_KEY
    envelope = value.pop(key, None)
    if not isinstance(envelope, dict):
        raise DecodeError(
            f"MOP message has no envelope ({ENVELOPE_KEY!r} or {SEED_ENVELOPE_KEY!r})"
        )
    expect = envelope.get("expect", False)
    if not isinstance(expect, bool):
        raise DecodeError("MOP envelope 'expect' must be true or false")
    sender = _text(envelope, "from", required=True)
    message_id = _text(envelope, "id", required=True)
    assert sender is not None and message_id is not None
    return MopMessage(
        sender=sender,
        id=message_id,
        to=_text(envelope, "to") or None,
        type=_text(envelope, "type") or None,
        reply=_text(envelope, "reply") or None,
        expect=expect,
        secure=_text(envelope, "secure"),
        fields=value,
    )


class MopDeframer:
    """Splits a MOP byte stream into frames (see the module docstring).

    Args:
        max_message_size: largest JSON body accepted; a longer frame is skipped whole.
    """

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.max_message_size = min(max_message_size, MAX_FRAME_LENGTH)
        self._buffer = bytearray()
        self._skip = 0  # bytes of a too-large frame still to be thrown away as they arrive

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned or skipped."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        """Append bytes received from the peer."""
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buffer += data

    def next_event(self) -> FrameReceived | FrameSkipped | _NeedData:
        """The next frame, a report of skipped bytes, or :data:`NEED_DATA`."""
        start = self._buffer.find(_OPEN)
        if start < 0:
            keep = 2 if self._buffer.endswith(b"[[") else 1 if self._buffer.endswith(b"[") else 0
            return self._drop(len(self._buffer) - keep, "bytes outside a frame")
        if start > 0:
            return self._drop(start, "bytes outside a frame")
        return self._frame()

    def _drop(self, count: int, reason: str) -> FrameSkipped | _NeedData:
        if count <= 0:
            return NEED_DATA
        del self._buffer[:count]
        return FrameSkipped(reason, count)

    def _frame(self) -> FrameReceived | FrameSkipped | _NeedData:
        # The buffer starts with "[[[".
        at = 3
        while at < len(self._buffer) and self._buffer[at] in _LENGTH_CHARS and at < 3 + 4:
            at += 1
        if at == len(self._buffer):
            return NEED_DATA
        chars = bytes(self._buffer[3:at]).decode("ascii")
        if self._buffer[at] != ord("]") or len(chars) < 2:
            return self._drop(1, "a frame opening without a length")  # rescan after one "["
        try:
            length = b64_decode_int(chars)
        except DecodeError:
            return self._drop(1, "a frame opening with a bad length")
        body = at + 1
        if length > self.max_message_size:
            return self._too_large(body, length)
        end = body + length
        if len(self._buffer) < end + 2:
            return NEED_DATA
        if self._buffer[end : end + 2] != _CLOSE:
            return self._drop(1, "a frame without ']]' where its length ends")
        data = bytes(self._buffer[body:end])
        del self._buffer[: end + 2]
        return FrameReceived(data)

    def _too_large(self, body: int, length: int) -> FrameSkipped:
        total = body + length + 2
        reason = f"a frame of {length} bytes, more than max_message_size {self.max_message_size}"
        present = min(total, len(self._buffer))
        del self._buffer[:present]
        self._skip = total - present
        return FrameSkipped(reason, total)
