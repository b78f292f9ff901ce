"""Who sent a message: the broker's stamp on SRC and CLR (sans-I/O; ``docs/PROTOCOL.md`` 5.11).

Every message a client sends through the broker that names a sender names the client's
authenticated post office: an ``SRC`` naming another post office is replaced, and a request
(``TYP=RQS``) or a heartbeat (``TYP=HBT``) without one gets one, so a service always knows who
asked and the service directory whose instance a heartbeat describes. An event or reply
without ``SRC`` stays without (MOP calls such an event bus-native: it has no source).
``CLR`` (the caller a request is made for) is kept only from a link whose post office the broker
trusts to act for callers (a gateway: ``callers`` in the broker config); from any other link a
``CLR`` that is not its own post office name is replaced by it.

Cheap on the data path: a message whose ``SRC`` already names the sender (what
:class:`bus.asyncio.client.Client` sends, or ``<office>.<mailbox>``) and that carries no foreign
``CLR`` is forwarded as it came, read from the header alone. An absent ``SRC`` is spliced into
the bytes (a binary frame has no field count: the field is appended; a JSON object gets a first
member); only a forged ``SRC`` or ``CLR`` is decoded and encoded again.
"""

from __future__ import annotations

from typing import Final

import orjson

from bus.frame.codec import encode_field
from bus.frame.frame import make_field
from bus.message.header import Header
from bus.message.message import Message, encode_message

__all__ = ["Stamper"]

_FRAM: Final = 0
_JSON: Final = 1
#: What always names its sender: a request (who asked) and a heartbeat (whose instance it is).
_NAMED: Final = frozenset({"RQS", "HBT"})
_JSON_SPACE: Final = b" \t\r\n"


class Stamper:
    """The stamp of one authenticated link.

    Args:
        office: the link's authenticated post office name.
        trusted: the post office may set CLR for the callers it acts for (a gateway).
    """

    __slots__ = ("office", "trusted", "latin1", "_dotted", "_field", "_member")

    def __init__(self, office: str, trusted: bool = False) -> None:
        self.office = office
        self.trusted = trusted
        self._dotted = office + "."
        self._field = encode_field(make_field("SRC", office))
        # A JSON body is Latin-1 text (PROTOCOL.md 1.7): a name beyond ASCII is encoded instead.
        self._member = b'"SRC":' + orjson.dumps(office) + b"," if office.isascii() else b""
        #: The name as a header's bytes read (Latin-1), for the C routing path's test of SRC and
        #: CLR (bus/native/_hotpath.c ``stamped``); None beyond Latin-1: that path is not taken.
        self.latin1: bytes | None
        try:
            self.latin1 = office.encode("latin-1")
        except UnicodeEncodeError:
            self.latin1 = None

    def owns(self, src: str | None) -> bool:
        """True when ``src`` names this post office (``office`` or ``office.<mailbox>``)."""
        return src is not None and (src == self.office or src.startswith(self._dotted))

    def stamp(self, message: Message, raw: bytes) -> tuple[Message, bytes]:
        """The message as it is to be routed, and its bytes.

        Args:
            message: a message read from this link (:func:`bus.message.message.read_message`).
            raw: its bytes.

        Returns:
            ``(message, raw)`` unchanged when SRC and CLR are already right, else the stamped
            message and its new bytes.
        """
        head = message.header
        clr_ok = self.trusted or head.clr is None or head.clr == self.office
        src = head.src
        if src is None:  # no claim: an event or reply stays anonymous; a request and a
            src_ok = head.typ not in _NAMED  # heartbeat get SRC (5.10, 5.11)
        else:
            src_ok = src == self.office or src.startswith(self._dotted)
        if clr_ok and src_ok:
            return message, raw
        if clr_ok and src is None:
            spliced = self._splice(message, raw, head.enc)
            if spliced is not None:
                return spliced
        frame = message.frame  # decodes a message still on the wire
        if not src_ok or len([item for item in frame._fields if item.name == "SRC"]) > 1:
            frame.remove("SRC")
            frame.add("SRC", self.office)
        if not clr_ok:
            frame.remove("CLR")
            frame.add("CLR", self.office)
        return message, encode_message(message)

    def _splice(self, message: Message, raw: bytes, enc: int) -> tuple[Message, bytes] | None:
        wire_head = message.wire is not None
        if enc == _FRAM:
            new = raw + self._field
            shift = 0
        elif enc == _JSON and self._member:
            start = len(raw) - len(raw.lstrip(_JSON_SPACE))
            if raw[start : start + 1] != b"{" or raw[start + 1 :].lstrip(_JSON_SPACE)[:1] == b"}":
                return None
            new = b"".join((raw[: start + 1], self._member, raw[start + 1 :]))
            shift = len(self._member)
        else:
            return None
        if not wire_head:  # decoded already: the frame is the message
            message.frame.add("SRC", self.office)
            return message, new
        head = message.header
        start, end, fields = head.pld_start, head.pld_end, head.fields
        moved = tuple.__new__(  # Header._replace, without its cost (a field per request)
            Header,
            (
                *head[:7],
                self.office,
                *head[8:13],
                start + shift if start >= 0 else -1,
                end + shift if end >= 0 else -1,
                head.pld_fields,
                head.quirks,
                fields + 1 if fields >= 0 else -1,
                *head[18:],  # clr, trc, rpl, seq
            ),
        )
        return Message.on_wire(new, moved, message._limits), new
