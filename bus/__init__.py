"""busgate's bus: the data-frame codec, the wire framing, the broker, the client and services.

What users import from ``bus`` directly is the data frame and the Kestrel message; the wire,
broker, client and services live in their own modules (see ``docs/DESIGN.md``). Modules that
moved into the layer packages still import by their old names (``bus.codec``), with a
DeprecationWarning (:mod:`bus.moved`).
"""

from typing import TYPE_CHECKING

from bus.frame.codec import Limits, decode, encode
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import (
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    Array,
    DataFrame,
    Field,
    Float32,
    Typed,
    Uri,
    typed,
)
from bus.frame.jsonmap import from_json, from_typed, to_json, to_typed
from bus.message.message import Flag, Message, MessageType, decode_message, encode_message
from bus.moved import BUS_MOVED, moved_attribute, register

register(BUS_MOVED)

__all__ = [
    "S8",
    "S16",
    "S32",
    "S64",
    "U8",
    "U16",
    "U32",
    "U64",
    "Array",
    "DataFrame",
    "Encoding",
    "Field",
    "FieldType",
    "Flag",
    "Float32",
    "Limits",
    "Message",
    "MessageType",
    "Typed",
    "Uri",
    "decode",
    "decode_message",
    "encode",
    "encode_message",
    "from_json",
    "from_typed",
    "to_json",
    "to_typed",
    "typed",
]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """``bus.codec`` and the other moved modules by their old names (:mod:`bus.moved`)."""
        return moved_attribute(__name__, name)
