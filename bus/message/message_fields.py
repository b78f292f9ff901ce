"""The header fields of a Kestrel message (PROTOCOL.md 2), names as in Kestrel's
``KestrelProtocol``::

    MID  STRING  message id (a UUID)           RID  STRING  id of the message answered
    GRP  STRING  group the message is sent to   RPY  STRING  group replies go to
    TYP  STRING  RQS ACK NAK EVT OAM HBT        CMD  STRING  command, copied from the payload
    ENC  STRING  FRAM JSON STR UNKN             PLD  FRAME   the payload (application data)
    MSG  STRING  text of an ACK/NAK             RCD  U16/S32 result code (a Java Integer)
    XPY  U32/S64 expiry, epoch seconds          FLG  U32     Flag bits (ALL=1, MORE=2)
    SRC  STRING  sender                         TGT  STRING  target
    PRI  U8      priority                       DATA         the body when it was no frame
    CLR  STRING  caller (5.11)                  TRC  STRING  W3C traceparent (5.11)

Their values (:class:`Flag`, :class:`MessageType`), :class:`HeaderFields` (the base of
:class:`~bus.message.message.Message` that reads and writes them as attributes) and the header
fields
every message repeats, built once. The underscored names are for :mod:`bus.message.message` and
:mod:`bus.message.message_encode`, not API; :mod:`bus.message.message` re-exports ``Flag`` and
``MessageType``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntFlag, StrEnum
from typing import TYPE_CHECKING, Any, overload

from bus.accelerators import accelerator
from bus.errors import EncodeError
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import DataFrame, Field, Typed, make_field
from bus.message.header import ENC_CODES, Header

__all__ = ["Flag", "HeaderFields", "MessageType"]


class Flag(IntFlag):
    """Bits of the ``FLG`` header field (a U32)."""

    NONE = 0
    ALL = 1  # deliver to every consumer of the group, not to one of them
    MORE = 2  # more responses to the same request follow
    END = 4  # the end of a stream: this response carries no data of its own


class MessageType(StrEnum):
    """Values of the ``TYP`` header field (Kestrel's ``*_TYPE`` constants)."""

    RQS = "RQS"
    ACK = "ACK"
    NAK = "NAK"
    OAM = "OAM"
    HBT = "HBT"
    EVT = "EVT"


_ENCODINGS = {e.value: e for e in Encoding}
# Flag bits as plain ints: IntFlag arithmetic costs a Python call per operator.
_ALL, _MORE, _END = int(Flag.ALL), int(Flag.MORE), int(Flag.END)
_ENC_FRAM = Field("ENC", FieldType.STRING, Encoding.FRAM.value)
# Header fields every message repeats, built once (Fields are immutable tuples).
_ENC_FIELDS = {e: Field("ENC", FieldType.STRING, e.value) for e in Encoding}
_TYP_FIELDS = {t.value: Field("TYP", FieldType.STRING, t.value) for t in MessageType}
_STRING = FieldType.STRING
_new = tuple.__new__


def _text(name: str, value: str) -> Field:
    """A header text field: built directly for ASCII text, checked by make_field otherwise."""
    if type(value) is str and value.isascii():
        return _new(Field, (name, _STRING, value))
    return make_field(name, value)


def _java_integer(value: int) -> Typed:
    # Kestrel puts an int RCD; the original infers a Java Integer as U16 when 0..65535, else S32.
    if not -(2**31) <= value < 2**31:
        raise EncodeError(f"RCD {value} is not a 32-bit integer (-2147483648..2147483647)")
    return Typed(FieldType.U16 if 0 <= value <= 0xFFFF else FieldType.S32, value)


_hotpath = accelerator("bus.native._hotpath")
if TYPE_CHECKING or _hotpath is None:

    class _HeadField:
        """Pure Python: the descriptors below answer with their own ``__get__``."""

        index: int

else:  # bus/native/_hotpath_fields.c: __get__ without a Python frame, ``_read`` when it must
    _HeadField = _hotpath.HeadField


class _Text(_HeadField):
    """A header field read and written as text (``None`` when absent)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # Where a message still on the wire has it in its Header, else -1 (decode first).
        self.index = Header._fields.index(name.lower()) if name.lower() in Header._fields else -1

    @overload
    def __get__(self, obj: None, owner: type[HeaderFields]) -> _Text: ...
    @overload
    def __get__(self, obj: HeaderFields, owner: type[HeaderFields]) -> str | None: ...
    def __get__(self, obj: HeaderFields | None, owner: type[HeaderFields]) -> _Text | str | None:
        # The reference of HeadField.__get__ (bus/native/_hotpath_fields.c), which replaces it when
        # the accelerator is built (see the end of this module).
        if obj is None:
            return self
        head = obj._head
        if head is not None and self.index >= 0:  # every message routed or answered: no cast()
            return head[self.index]  # type: ignore[return-value]
        value = obj.frame.get(self.name)  # _read, inline: pure Python pays no second call
        return None if value is None else str(value)

    def _read(self, obj: HeaderFields) -> str | None:
        """The field from the message's frame (no Header holds it)."""
        value = obj.frame.get(self.name)
        return None if value is None else str(value)

    def __set__(self, obj: HeaderFields, value: str | None) -> None:
        if value is None:
            obj.frame.remove(self.name)
        else:
            obj.frame[self.name] = str(value)


class _Number(_HeadField):
    """A header field read as an int (``None`` when absent or not a number)."""

    def __init__(self, name: str, kind: FieldType | None) -> None:
        self.name = name
        self.kind = kind
        self.index = Header._fields.index(name.lower()) if name.lower() in Header._fields else -1

    @overload
    def __get__(self, obj: None, owner: type[HeaderFields]) -> _Number: ...
    @overload
    def __get__(self, obj: HeaderFields, owner: type[HeaderFields]) -> int | None: ...
    def __get__(self, obj: HeaderFields | None, owner: type[HeaderFields]) -> _Number | int | None:
        # The reference of HeadField.__get__, as for _Text.
        if obj is None:
            return self
        head = obj._head
        if head is not None and self.index >= 0:
            return head[self.index]  # type: ignore[return-value]
        value = obj.frame.get(self.name)  # _read, inline
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value

    def _read(self, obj: HeaderFields) -> int | None:
        """The field from the message's frame (no Header holds it)."""
        value = obj.frame.get(self.name)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value

    def __set__(self, obj: HeaderFields, value: int | None) -> None:
        if value is None:
            obj.frame.remove(self.name)
        elif self.kind is None:
            obj.frame[self.name] = _java_integer(value)
        else:
            obj.frame[self.name] = Typed(self.kind, int(value))


if _hotpath is not None:  # the C __get__ of HeadField answers (the same, without a frame)
    del _Text.__get__, _Number.__get__


class HeaderFields:
    """The header fields of a :class:`~bus.message.message.Message` as attributes (its base class).

    A message still on the wire answers the fields its routing :class:`~bus.message.header.Header`
    holds without decoding; the others are read from (and written to) its frame.
    """

    __slots__ = ()

    if TYPE_CHECKING:  # provided by Message
        _head: Header | None

        @property
        def frame(self) -> DataFrame: ...

    mid = _Text("MID")
    rid = _Text("RID")
    grp = _Text("GRP")
    rpy = _Text("RPY")
    typ = _Text("TYP")
    msg = _Text("MSG")
    src = _Text("SRC")
    tgt = _Text("TGT")
    clr = _Text("CLR")
    trc = _Text("TRC")
    rcd = _Number("RCD", None)
    xpy = _Number("XPY", FieldType.U32)
    flg = _Number("FLG", FieldType.U32)
    pri = _Number("PRI", FieldType.U8)
    seq = _Number("SEQ", FieldType.U64)  # the journal's sequence number of an event (5.14)
    rpl = _Text("RPL")  # the pattern a replayed event was sent for (5.14)

    @property
    def cmd(self) -> str | None:
        """The command: the header's CMD, else the payload's CMD, else ``None``."""
        head = self._head
        if head is not None and head.cmd is not None:
            return head.cmd
        value = self.frame.get("CMD")
        if value is None:
            payload = self.frame.get("PLD")
            if isinstance(payload, DataFrame):
                value = payload.get("CMD")
        return None if value is None else str(value)

    @property
    def enc(self) -> Encoding:
        """How the message travelled or is to travel (FRAM when absent or unknown)."""
        head = self._head
        if head is not None:
            return ENC_CODES[head.enc]
        value = self.frame.get("ENC")
        if value is None:
            return Encoding.FRAM
        return _ENCODINGS.get(value) or _ENCODINGS.get(str(value).upper(), Encoding.FRAM)

    @enc.setter
    def enc(self, value: Encoding | str) -> None:
        self.frame["ENC"] = str(Encoding(str(value).upper()))

    @property
    def payload(self) -> DataFrame:
        """The PLD frame; an empty new frame when there is none (as Kestrel's getPayload)."""
        value = self.frame.get("PLD")
        return value if isinstance(value, DataFrame) else DataFrame()

    @payload.setter
    def payload(self, value: DataFrame | Mapping[str, Any]) -> None:
        self.frame["PLD"] = value if isinstance(value, DataFrame) else DataFrame(value)

    @property
    def flags(self) -> Flag:
        """``FLG`` as :class:`Flag` bits (unknown bits kept)."""
        return Flag(self.flg or 0)

    @property
    def more(self) -> bool:
        """True when more responses to the same request follow (``Flag.MORE``)."""
        return bool((self.flg or 0) & _MORE)

    @property
    def end(self) -> bool:
        """True for the end-of-stream marker that closes a stream of responses (``Flag.END``)."""
        return bool((self.flg or 0) & _END)

    @property
    def to_all(self) -> bool:
        """True when every consumer of the group gets the message (``Flag.ALL``)."""
        return bool((self.flg or 0) & _ALL)


def _event_fields(
    mid: str,
    type: str,
    payload: Mapping[str, Any] | DataFrame | None,
    reply_to: str | None = None,
    src: str | None = None,
) -> list[Field]:
    fields = [_text("MID", mid), _text("GRP", type), _TYP_FIELDS["EVT"]]
    if reply_to is not None:  # a confirmed publish's inbox
        fields.append(_text("RPY", reply_to))
    if src is not None:
        fields.append(_text("SRC", src))
    if payload is not None:
        frame = payload if isinstance(payload, DataFrame) else DataFrame(payload)
        fields.append(_new(Field, ("PLD", FieldType.FRAME, frame)))
    return fields


def _payload(args: Mapping[str, Any] | DataFrame | None, cmd: str) -> DataFrame:
    fields = [_text("CMD", cmd)]
    if isinstance(args, DataFrame):
        fields += [item for item in args._fields if item.name != "CMD"]
    elif args is not None:
        fields += [make_field(name, value) for name, value in args.items() if name != "CMD"]
    return DataFrame._trusted(fields)
