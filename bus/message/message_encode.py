"""Writing a Kestrel message's body (PROTOCOL.md 2): :func:`encode_message` as the message's
``ENC`` says (FRAM: binary frame; JSON and STR: Latin-1 JSON, as Kestrel's MessageCodec), and
:func:`encode_event`, an event's body written from its parts without building the message (the
publish path). Reading a body, :func:`bus.message.message.decode_message`, stays next to the
:class:`~bus.message.message.Message` it makes: a message still on the wire decodes itself with it.
:mod:`bus.message.message` re-exports what is here.

A body nested deeper than its receivers read (``Limits.max_depth``, 32 levels by default:
every busgate broker, client and gateway decodes with it) is refused here with an
:class:`~bus.errors.EncodeError` naming the limit, at once, rather than sent to be dropped by
whoever cannot read it (PROTOCOL.md 1.5). The C encoders check it on their way (no cost); the
pure-Python path walks the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from bus.errors import EncodeError
from bus.frame import codec
from bus.frame.codec import DEFAULT_LIMITS, encode
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import DataFrame
from bus.frame.jsonmap import to_json
from bus.message.message_fields import _event_fields

__all__ = ["Encodable", "encode_event", "encode_message"]


class Encodable(Protocol):
    """What :func:`encode_message` reads of a :class:`bus.message.message.Message` (named here so
    that
    this module, which the message re-exports, does not import it: no import circle)."""

    _raw: bytes | None  # the bytes it arrived or was composed as, while still on the wire

    @property
    def frame(self) -> DataFrame:
        """The message as a data frame."""

    @property
    def enc(self) -> Encoding:
        """Its ENC."""


def encode_event(mid: str, type: str, payload: Mapping[str, Any] | DataFrame | None) -> bytes:
    """The body of ``Message.event(type, payload)`` with this MID, byte for byte what
    :func:`encode_message` gives for it, written without building the message (the publish
    path). The C accelerator writes it when it can; this function is its reference.

    Raises:
        EncodeError: as :meth:`Message.event` and :func:`encode_message` raise it.
    """
    if _fast_event is not None:
        try:
            return _fast_event(mid, type, payload)
        except _TooDeep:
            raise _too_deep() from None
        except Exception:  # anything unusual, or the accelerator turned off: the reference
            pass
    return _encode_frame(DataFrame._trusted(_event_fields(mid, type, payload)))


_fast_event: Callable[[str, str, Any], bytes] | None = getattr(codec._fast, "encode_event", None)
_fast_body: Callable[[DataFrame], bytes] | None = getattr(codec._fast, "encode_body", None)


class _NeverRaised(Exception):
    """Stands for the accelerator's TooDeep when there is no accelerator."""


_TooDeep: type[Exception] = getattr(codec._fast, "TooDeep", None) or _NeverRaised
_MAX_DEPTH = DEFAULT_LIMITS.max_depth
_FRAME, _ARRAY = FieldType.FRAME, FieldType.ARRAY


def _too_deep() -> EncodeError:
    return EncodeError(
        f"message nested deeper than max_depth ({_MAX_DEPTH} levels): its receivers would "
        "refuse it (Limits.max_depth), so it is not sent; flatten the payload"
    )


def _encode_frame(frame: DataFrame) -> bytes:
    """A message's frame as a binary body, refused when nested deeper than max_depth."""
    if _fast_body is not None:
        try:
            return _fast_body(frame)
        except _TooDeep:
            raise _too_deep() from None
        except Exception:  # anything unusual, or the accelerator turned off: the reference
            pass
    _check_depth(frame)
    return encode(frame)


def _check_depth(frame: DataFrame) -> None:
    """Raise :func:`_too_deep` when a frame or array sits more than max_depth levels below
    the top frame (what the decoders count, PROTOCOL.md 1.5)."""
    if _deepest(frame._fields, 0) > _MAX_DEPTH:
        raise _too_deep()


def _deepest(fields: Any, level: int) -> int:
    deepest = level
    for field in fields:
        type_, value = field[1], field[2]
        if type_ is _FRAME and isinstance(value, DataFrame):
            below = _deepest(value._fields, level + 1)
        elif type_ is _ARRAY:
            below = _deepest(value, level + 1) if value else level + 1
        else:
            continue
        if below > _MAX_DEPTH:
            return below  # far enough: no need to walk the rest
        deepest = max(deepest, below)
    return deepest


def encode_message(message: Encodable) -> bytes:
    """The message body as its ENC says: JSON and STR as Latin-1 JSON, else a binary frame.

    Args:
        message: the message.

    Returns:
        The bytes to send.

    Raises:
        EncodeError: a field cannot be encoded.
    """
    raw = message._raw
    if raw is not None:  # still on the wire: the same bytes again
        return raw
    frame = message.frame
    index = frame._find("ENC")
    if index >= 0 and frame._fields[index][2] != "FRAM":
        enc = message.enc
        if enc is Encoding.JSON or enc is Encoding.STR:
            _check_depth(frame)
            return to_json(frame).encode("latin-1")
    return _encode_frame(frame)
