"""Writing a Kestrel message's body (PROTOCOL.md 2): :func:`encode_message` as the message's
``ENC`` says (FRAM: binary frame; JSON and STR: Latin-1 JSON, as Kestrel's MessageCodec), and
:func:`encode_event`, an event's body written from its parts without building the message (the
publish path). Reading a body, :func:`bus.message.decode_message`, stays next to the
:class:`~bus.message.Message` it makes: a message still on the wire decodes itself with it.
:mod:`bus.message` re-exports what is here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bus import codec
from bus.codec import encode
from bus.enums import Encoding
from bus.frame import DataFrame
from bus.jsonmap import to_json
from bus.message_fields import _event_fields

if TYPE_CHECKING:  # pragma: no cover
    from bus.message import Message

__all__ = ["encode_event", "encode_message"]


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
        except Exception:  # anything unusual, or the accelerator turned off: the reference
            pass
    return encode(DataFrame._trusted(_event_fields(mid, type, payload)))


_fast_event: Callable[[str, str, Any], bytes] | None = getattr(codec._fast, "encode_event", None)


def encode_message(message: Message) -> bytes:
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
            return to_json(frame).encode("latin-1")
    return encode(frame)
