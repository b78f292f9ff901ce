"""Object System framing, sans-I/O (seed 003; docs/PROTOCOL.md section 6.1).

An object on the wire is UTF-8 JSON metadata, one NUL byte, then exactly ``size`` payload bytes::

    {"event":"ping","id":"1"}\\x00
    {"size":5,"type":"text/plain"}\\x00hello

:class:`ObjectDecoder` takes bytes as they arrive and gives whole objects; a partial object never
consumes bytes. :func:`encode_object` gives the bytes of one object. :func:`decode_object` and
:func:`decode_metadata` read one complete object (a WebSocket binary or text message).

Limits (constructor parameters, documented defaults):

- ``max_metadata`` = :data:`DEFAULT_MAX_METADATA` (8192 bytes of JSON before the NUL). Objectoplex
  capped metadata at 2048 bytes; ours is larger because ``route`` grows by a 36-character id per
  server on linked networks and discovery replies list services.
- ``max_payload`` = :data:`DEFAULT_MAX_PAYLOAD` (8 MiB).

Exceeding a limit raises :class:`~bus.errors.LimitError`; malformed input raises
:class:`~bus.errors.DecodeError`. Both are fatal for the stream: the caller answers with an error
object and closes (see ``router.Router.reject``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

import orjson

from bus.errors import DecodeError, EncodeError, LimitError

__all__ = [
    "DEFAULT_MAX_METADATA",
    "DEFAULT_MAX_PAYLOAD",
    "NEED_DATA",
    "BusinessObject",
    "NeedData",
    "ObjectDecoder",
    "decode_metadata",
    "decode_object",
    "encode_metadata",
    "encode_object",
]

DEFAULT_MAX_METADATA: Final = 8192
DEFAULT_MAX_PAYLOAD: Final = 8 * 1024 * 1024
_NUL: Final = b"\x00"


class NeedData:
    """Sentinel type: more bytes are needed before the next object is complete."""

    _instance: NeedData | None = None

    def __new__(cls) -> NeedData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


class BusinessObject(NamedTuple):
    """One Object System object: JSON metadata and an optional payload.

    The name is the original's (Objectoplex ``system.BusinessObject``). The metadata mapping is
    owned by the object: build a new object with :meth:`with_metadata` rather than mutating it.
    A named tuple: one or two are made per routed object, in a third of a frozen dataclass's
    time.

    Attributes:
        metadata: the JSON object (``event``, ``type``, ``id``, ``route``, ``to``, ...).
        payload: the payload bytes (empty when there is none).
    """

    metadata: dict[str, Any]
    payload: bytes = b""

    @property
    def event(self) -> str | None:
        """The ``event`` attribute when it is a string; an object without one is content."""
        value = self.metadata.get("event")
        return value if isinstance(value, str) else None

    @property
    def type(self) -> str | None:
        """The content type (``type``), e.g. ``text/plain; charset=UTF-8``."""
        value = self.metadata.get("type")
        return value if isinstance(value, str) else None

    @property
    def id(self) -> str | None:
        """The object id (``id``) as a string, when present."""
        value = self.metadata.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
        return None

    @property
    def route(self) -> list[str]:
        """The routing ids this object passed through (``route``); ``[]`` if absent or invalid."""
        value = self.metadata.get("route")
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return list(value)
        return []

    def with_metadata(self, **changes: Any) -> BusinessObject:
        """A copy with metadata keys replaced (``None`` removes a key).

        Keyword names use ``_`` where the attribute has ``-`` (``in_reply_to`` -> ``in-reply-to``).
        """
        metadata = dict(self.metadata)
        for key, value in changes.items():
            name = key.replace("_", "-")
            if value is None:
                metadata.pop(name, None)
            else:
                metadata[name] = value
        return BusinessObject(metadata, self.payload)


#: ``BusinessObject((metadata, payload))`` without the named tuple's ``__new__``, a Python
#: function: a third of the time, for the objects made per routed object.
new_object: Final[Callable[[tuple[dict[str, Any], bytes]], BusinessObject]] = functools.partial(
    tuple.__new__, BusinessObject
)


def encode_metadata(metadata: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON of a metadata mapping (no NUL).

    Raises:
        EncodeError: a value JSON cannot hold (non-string key, integer beyond 64 bits, ...).
    """
    try:
        return orjson.dumps(metadata)
    except TypeError as exc:
        raise EncodeError(f"metadata is not JSON: {exc}") from exc


def encode_object(obj: BusinessObject) -> bytes:
    """The wire bytes of ``obj``: metadata, NUL, payload.

    ``size`` is written as the payload length when there is a payload and removed when there
    is none, so the framing always holds whatever ``size`` the caller left in the metadata.

    Raises:
        EncodeError: the metadata is not JSON.
    """
    metadata, payload = obj.metadata, obj.payload
    if metadata.get("size") != (len(payload) if payload else None):  # else: as it is (no copy)
        metadata = dict(metadata)
        if payload:
            metadata["size"] = len(payload)
        else:
            metadata.pop("size", None)
    return encode_metadata(metadata) + _NUL + payload


def _parse_metadata(raw: bytes, offset: int = 0) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"metadata is not UTF-8 JSON ({exc.msg})", offset + exc.pos) from exc
    if not isinstance(value, dict):
        raise DecodeError("metadata is not a JSON object", offset)
    return value


def _payload_size(metadata: Mapping[str, Any], max_payload: int) -> int:
    size = metadata.get("size", 0)
    if size is None:
        return 0
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise DecodeError(f"size must be a non-negative integer, not {size!r}")
    if size > max_payload:
        raise LimitError("max_payload_size", size, max_payload)
    return size


class ObjectDecoder:
    """Splits a byte stream into objects.

    Feed bytes with :meth:`receive_data`, then call :meth:`next_event` until it returns
    :data:`NEED_DATA`. After an exception the stream is broken; stop using the decoder.

    Args:
        max_metadata: most bytes of JSON metadata before the NUL (default 8192).
        max_payload: largest ``size`` accepted (default 8 MiB).
    """

    def __init__(
        self,
        max_metadata: int = DEFAULT_MAX_METADATA,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self.max_metadata = max_metadata
        self.max_payload = max_payload
        # bytes, not a bytearray: slicing out metadata and payload is one copy, not two
        self._buffer = b""
        self._offset = 0  # bytes at the front already returned as objects
        self._scanned = 0  # where the search for the current metadata's NUL goes on
        self._more: list[bytes] = []  # received, not yet joined to the buffer
        self._more_size = 0
        self._wanted = 0  # buffer + received bytes that may complete the object being read

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as an object."""
        return len(self._buffer) - self._offset + self._more_size

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer (copied unless they are ``bytes``: a caller may
        reuse its buffer)."""
        if data:
            self._more.append(bytes(data))  # the same object when it is bytes already
            self._more_size += len(data)

    def _join(self) -> None:
        """Join the received bytes to what is left of the buffer, once they may complete the
        object being read: a large payload arriving in many reads is copied once, and the
        objects already returned are dropped in bulk (a burst costs O(n) in memory moves)."""
        if not self._more or len(self._buffer) + self._more_size < self._wanted:
            return
        more, offset = self._more, self._offset
        received = more[0] if len(more) == 1 else b"".join(more)
        self._buffer = self._buffer[offset:] + received if offset < len(self._buffer) else received
        self._scanned = max(self._scanned - offset, 0)
        self._offset = self._wanted = self._more_size = 0
        more.clear()

    def unread(self) -> tuple[bytes, int]:
        """The buffer and where its bytes not yet returned as objects start: for a scanner
        that reads objects in place (:mod:`bus.objects.content_lane`), which then says with
        :meth:`consume` how far it took them."""
        self._join()
        return self._buffer, self._offset

    def consume(self, end: int) -> None:
        """The objects up to ``end`` of the buffer :meth:`unread` gave were taken elsewhere
        (``end`` is where an object starts)."""
        self._offset = self._scanned = end

    def next_event(self) -> BusinessObject | NeedData:
        """The next complete object, or :data:`NEED_DATA`.

        Raises:
            LimitError: metadata longer than ``max_metadata`` or ``size`` above ``max_payload``.
            DecodeError: metadata is not a UTF-8 JSON object, or ``size`` is not a count.
        """
        self._join()
        buffer, start = self._buffer, self._offset
        end = buffer.find(_NUL, max(self._scanned, start))
        if end < 0:
            self._scanned = len(buffer)
            if self._scanned - start > self.max_metadata:
                raise LimitError("max_metadata_size", self._scanned - start, self.max_metadata)
            return NEED_DATA
        if end - start > self.max_metadata:
            raise LimitError("max_metadata_size", end - start, self.max_metadata)
        self._scanned = end  # the NUL is found again at once next time
        metadata = _parse_metadata(buffer[start:end])
        size = _payload_size(metadata, self.max_payload)
        total = end + 1 + size
        if len(buffer) < total:
            self._wanted = total
            return NEED_DATA
        payload = buffer[end + 1 : total] if size else b""
        self._offset = self._scanned = total
        return BusinessObject(metadata, payload)

    def next_events(self) -> list[BusinessObject]:
        """Every complete object buffered, in order: :meth:`next_event` until it returns
        :data:`NEED_DATA`, in one loop (what a driver routing a whole read calls).

        An error after some objects: those are returned, and the next call raises it (the
        bad object is not consumed).

        Raises:
            LimitError: as :meth:`next_event`, for the first object buffered.
            DecodeError: as :meth:`next_event`, for the first object buffered.
        """
        self._join()
        objects: list[BusinessObject] = []
        buffer, start = self._buffer, self._offset
        length, max_metadata, max_payload = len(buffer), self.max_metadata, self.max_payload
        find, loads, append = buffer.find, orjson.loads, objects.append
        scanned = max(self._scanned, start)
        while True:
            end = find(_NUL, scanned)
            if end < 0:
                scanned = length
                break
            if end - start > max_metadata:
                break
            scanned = end
            try:
                metadata = loads(buffer[start:end])
            except orjson.JSONDecodeError:
                break
            if type(metadata) is not dict:
                break
            size = metadata.get("size", 0)
            if type(size) is not int or not 0 <= size <= max_payload:
                if size is not None:
                    break
                size = 0
            total = end + 1 + size
            if length < total:
                self._wanted = total
                break
            append(new_object((metadata, buffer[end + 1 : total] if size else b"")))
            start = scanned = total
        self._offset, self._scanned = start, scanned
        if objects:
            return objects
        # Nothing complete, or the first object is refused: next_event says which (it raises).
        obj = self.next_event()
        return [obj] if isinstance(obj, BusinessObject) else []


def decode_object(
    data: bytes,
    max_metadata: int = DEFAULT_MAX_METADATA,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> BusinessObject:
    """Read exactly one object from ``data`` (metadata, NUL, ``size`` payload bytes, nothing more).

    Args:
        data: the whole object, e.g. a WebSocket binary message.
        max_metadata: most bytes of JSON metadata.
        max_payload: largest ``size`` accepted.

    Returns:
        The object.

    Raises:
        LimitError: a limit is exceeded.
        DecodeError: malformed, truncated, or followed by extra bytes.
    """
    decoder = ObjectDecoder(max_metadata, max_payload)
    decoder.receive_data(data)
    obj = decoder.next_event()
    if isinstance(obj, NeedData):
        raise DecodeError("truncated object", len(data))
    if decoder.buffered:
        raise DecodeError("bytes after the payload", len(data) - decoder.buffered)
    return obj


def decode_metadata(text: str, max_metadata: int = DEFAULT_MAX_METADATA) -> BusinessObject:
    """Read a metadata-only object from JSON text (a WebSocket text message).

    Raises:
        LimitError: the UTF-8 text is longer than ``max_metadata`` bytes.
        DecodeError: not a JSON object, or it announces a payload (``size`` > 0).
    """
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > max_metadata:
        raise LimitError("max_metadata_size", len(raw), max_metadata)
    metadata = _parse_metadata(raw)
    if _payload_size(metadata, max_payload=2**63) > 0:
        raise DecodeError("a text message carries no payload; send size > 0 as binary")
    metadata.pop("size", None)
    return BusinessObject(metadata)
