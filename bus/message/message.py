"""The Kestrel message: a data frame of header fields around a payload frame (PROTOCOL.md 2).

The header fields (their table, :class:`Flag`, :class:`MessageType`, and the attributes that
read them) are in :mod:`bus.message.message_fields`, writing a body (:func:`encode_message`,
:func:`encode_event`) in :mod:`bus.message.message_encode`; this module re-exports them.

:func:`encode_message` writes a message as its ``ENC`` says (FRAM: binary frame; JSON and STR:
Latin-1 JSON, as Kestrel's MessageCodec). :func:`decode_message` reads any body in Kestrel's order:
binary frame (ENC=FRAM), Latin-1 JSON (ENC=JSON), text in DATA (ENC=STR), bytes in DATA (ENC=UNKN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bus.errors import DecodeError
from bus.frame.codec import DEFAULT_LIMITS, Limits, decode
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import DataFrame, Field, Typed, find_name, make_field
from bus.frame.jsonmap import from_json
from bus.message.header import Header, header_of, peek
from bus.message.ids import new_id
from bus.message.jsonwire import ack_frame, compose_reply, compose_request, json_parts, read_payload
from bus.message.message_binary import binary_event, binary_reply, binary_request
from bus.message.message_encode import encode_event, encode_message
from bus.message.message_fields import (
    _ENC_FIELDS,
    _ENC_FRAM,
    _END,
    _MORE,
    _TYP_FIELDS,
    Flag,
    HeaderFields,
    MessageType,
    _java_integer,
    _new,
    _payload,
    _text,
)

# Re-exported: written here first (tests compare the C encode_event with what it builds).
from bus.message.message_fields import _event_fields as _event_fields

_FRAM_TEXT: Final = Encoding.FRAM.value

__all__ = [
    "Flag",
    "Message",
    "MessageType",
    "decode_message",
    "encode_event",
    "encode_message",
    "new_id",
    "read_header",
    "read_message",
]


class Message(HeaderFields):
    """A Kestrel message: header fields in a :class:`DataFrame` (``message.frame``).

    A message read from the wire (:func:`read_message`) keeps its bytes and its routing
    :class:`~bus.message.header.Header` and decodes its fields only when something reads one the
    header
    does not hold (``frame``, ``payload``, ``msg``, ...): routing, correlating and forwarding it
    cost no decoding, and :func:`encode_message` sends the same bytes again.

    Args:
        frame: the header frame (shared, not copied), a mapping of header fields, or ``None``.
    """

    __slots__ = ("_frame", "_raw", "_head", "_limits")

    def __init__(self, frame: DataFrame | Mapping[str, Any] | None = None) -> None:
        if type(frame) is not DataFrame:
            if frame is None:
                frame = DataFrame()
            elif not isinstance(frame, DataFrame):
                frame = DataFrame(frame)
        self._frame: DataFrame | None = frame
        self._raw: bytes | None = None
        self._head: Header | None = None
        self._limits = DEFAULT_LIMITS

    @classmethod
    def on_wire(cls, raw: bytes, head: Header, limits: Limits = DEFAULT_LIMITS) -> Message:
        """A message as bytes and their header, decoded only when a field is read.

        Args:
            raw: the body; it must decode (with ``limits``) to a message with this header,
                as :func:`bus.message.header.peek` vouches.
            head: its header.
            limits: the limits it is decoded with.
        """
        message = cls.__new__(cls)
        message._frame = None
        message._raw = raw
        message._head = head
        message._limits = limits
        return message

    @property
    def frame(self) -> DataFrame:
        """The header frame (decoded now if the message was still on the wire)."""
        frame = self._frame
        if frame is None:
            assert self._raw is not None
            frame = self._frame = decode_message(self._raw, self._limits).frame
        self._raw = self._head = None  # the frame may change now: it is the message
        return frame

    @frame.setter
    def frame(self, frame: DataFrame) -> None:
        self._frame = frame
        self._raw = self._head = None

    @property
    def wire(self) -> bytes | None:
        """The bytes the message arrived (or was composed) as, while it is still on the wire."""
        return self._raw

    @property
    def header(self) -> Header:
        """The routing header (read from the frame when the message was decoded)."""
        head = self._head
        return head if head is not None else header_of(self)

    # Constructors --------------------------------------------------------------------------

    @classmethod
    def request(
        cls,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None = None,
        *,
        reply_to: str | None = None,
        enc: Encoding | str = Encoding.FRAM,
        xpy: int | None = None,
        to_all: bool = False,
        mid: str | None = None,
        src: str | None = None,
        caller: str | None = None,
        trace: str | None = None,
    ) -> Message:
        """A request (TYP=RQS) for ``cmd`` to ``group``.

        The payload is ``CMD`` followed by ``args``; CMD is copied to the header so routers
        need not open the payload.

        Args:
            group: the group to send to (GRP).
            cmd: the command (CMD).
            args: the command's arguments (the rest of PLD).
            reply_to: the group responses go to (RPY); none when ``None``.
            enc: how the message travels and so how replies travel (ENC).
            xpy: expiry in epoch seconds (XPY).
            to_all: deliver to every consumer of the group (``Flag.ALL`` in FLG).
            mid: the message id; a new UUID when ``None``.
            src: the sender's post office (SRC; the broker adds it when absent, PROTOCOL.md 5.11).
            caller: who it is made for (CLR; only a gateway's is kept, PROTOCOL.md 5.11).
            trace: the W3C ``traceparent`` it belongs to (TRC, PROTOCOL.md 5.11).

        Returns:
            The request.

        Raises:
            EncodeError: a value cannot travel.
        """
        mid = mid or new_id()
        if xpy is None and not to_all and (enc is Encoding.FRAM or enc == _FRAM_TEXT):
            # The binary lane: the usual request written straight to bytes
            # (bus/message/message_binary.py).
            lane = binary_request(group, cmd, args, mid, reply_to, src, caller, trace)
            if lane is not None:
                return cls.on_wire(*lane)
        fields = [_text("MID", mid), _text("GRP", group)]
        if reply_to is not None:
            fields.append(_text("RPY", reply_to))
        fields.append(_TYP_FIELDS["RQS"])
        fields.append(_text("CMD", cmd))
        fields.append(_ENC_FIELDS[Encoding(enc)])
        if xpy is not None:
            fields.append(make_field("XPY", xpy))
        if to_all:
            fields.append(make_field("FLG", Typed(FieldType.U32, int(Flag.ALL))))
        if src is not None:
            fields.append(_text("SRC", src))
        if caller is not None:
            fields.append(_text("CLR", caller))
        if trace is not None:
            fields.append(_text("TRC", trace))
        fields.append(_new(Field, ("PLD", FieldType.FRAME, _payload(args, cmd))))
        return cls(DataFrame._trusted(fields))

    def reply(
        self,
        typ: MessageType | str,
        payload: Mapping[str, Any] | DataFrame | None = None,
        *,
        msg: str | None = None,
        rcd: int | None = None,
        more: bool = False,
        end: bool = False,
        src: str | None = None,
    ) -> Message:
        """A response to this message: RPY -> GRP, MID -> RID, ENC kept, a new MID, then TYP,
        PLD, MSG, RCD, FLG, SRC, TRC (Kestrel's order; PROTOCOL.md 2.3).

        Args:
            typ: the response type (ACK, NAK, ...).
            payload: application data (PLD); none when ``None``.
            msg: human-readable text (MSG); blank text is left out, as Kestrel does.
            rcd: result code (RCD).
            more: more responses to the same request follow (``Flag.MORE``).
            end: this response only ends a stream whose responses were sent with ``more``
                (``Flag.END``, section 2.3 of docs/PROTOCOL.md).
            src: who answers (SRC, PROTOCOL.md 5.11).

        Returns:
            The response.
        """
        flags = (_MORE if more else 0) | (_END if end else 0)
        trace = self.trc  # a response belongs to its request's trace (PROTOCOL.md 5.11)
        enc = self.enc
        if enc is Encoding.JSON and (payload is None or type(payload) is dict):
            # The JSON lane: written by orjson when the payload is plain data
            # (bus/message/jsonwire.py).
            lane = compose_reply(
                self.rpy, self.mid, str(typ), payload, msg, rcd, flags, self._limits, trace,
                src,
            )  # fmt: skip
            if lane is not None:
                return Message.on_wire(*lane, self._limits)
        rpy, mid = self.rpy, self.mid
        if (
            enc is Encoding.FRAM
            and self._head is not None  # read from the wire: it has ENC, so the answer too
            and msg is None
            and rcd is None
            and not flags
            and (payload is None or type(payload) is dict)
        ):
            # The binary lane: the usual answer written straight to bytes by the C encoder.
            lane = binary_reply(rpy, mid, str(typ), src, trace, payload)
            if lane is not None:
                return Message.on_wire(*lane, self._limits)
        fields = []
        if rpy is not None:
            fields.append(_text("GRP", rpy))
        if mid is not None:
            fields.append(_text("RID", mid))
        # A message read from the wire always has ENC (decoding sets it).
        if self._head is not None or "ENC" in self.frame:
            fields.append(_ENC_FIELDS[enc])
        fields.append(_text("MID", new_id()))
        fields.append(_TYP_FIELDS.get(str(typ)) or make_field("TYP", str(typ)))
        # Kestrel's order (AbstractService.sendResponse): PLD, MSG, RCD, then SRC; our FLG and
        # TRC, which Kestrel does not write, follow what it does (PROTOCOL.md 2.3).
        if payload is not None:
            frame = payload if isinstance(payload, DataFrame) else DataFrame(payload)
            fields.append(_new(Field, ("PLD", FieldType.FRAME, frame)))
        if msg is not None and msg.strip():
            fields.append(make_field("MSG", msg))
        if rcd is not None:
            fields.append(make_field("RCD", _java_integer(rcd)))
        if flags:
            fields.append(make_field("FLG", Typed(FieldType.U32, flags)))
        if src is not None:
            fields.append(_text("SRC", src))
        if trace is not None:
            fields.append(_text("TRC", trace))
        return Message(DataFrame._trusted(fields))

    def ack(
        self,
        payload: Mapping[str, Any] | DataFrame | None = None,
        *,
        msg: str | None = None,
        rcd: int | None = None,
        more: bool = False,
        end: bool = False,
        src: str | None = None,
    ) -> Message:
        """A positive acknowledgement (TYP=ACK) of this request; see :meth:`reply`."""
        return self.reply(MessageType.ACK, payload, msg=msg, rcd=rcd, more=more, end=end, src=src)

    def ack_frame(self, payload: Any, src: str | None, max_size: int) -> bytes | None:
        """:meth:`ack` as the bytes of one wire frame, for a JSON request still on the wire whose
        ACK is the usual one (:func:`bus.message.jsonwire.ack_frame`); None: build it instead."""
        head, limits = self._head, self._limits
        if head is None or head.enc != 1 or head.rpy is None:
            return None
        return ack_frame(
            head.rpy, head.mid, new_id(), payload, src, head.trc, limits.max_depth,
            limits.max_fields, max_size,
        )  # fmt: skip

    def nak(
        self,
        msg: str,
        rcd: int | None = None,
        payload: Mapping[str, Any] | DataFrame | None = None,
        more: bool = False,
        src: str | None = None,
    ) -> Message:
        """A negative acknowledgement (TYP=NAK) of this request; see :meth:`reply`."""
        return self.reply(MessageType.NAK, payload, msg=msg, rcd=rcd, more=more, src=src)

    @classmethod
    def event(
        cls,
        type: str,
        payload: Mapping[str, Any] | DataFrame | None = None,
        *,
        reply_to: str | None = None,
        src: str | None = None,
    ) -> Message:
        """An event (TYP=EVT) published to the group named by its ``major.minor`` type.

        Args:
            type: the event type, e.g. ``"sensor.temp"`` (becomes GRP).
            payload: the event data (PLD).
            reply_to: where the broker confirms it (RPY: a confirmed publish, PROTOCOL.md 5.12).
            src: the sender's post office (SRC, PROTOCOL.md 5.11).

        Returns:
            The event message.
        """
        mid = new_id()
        lane = binary_event(mid, type, payload, reply_to, src)  # bus/message/message_binary.py
        if lane is not None:
            return cls.on_wire(*lane)
        return cls(DataFrame._trusted(_event_fields(mid, type, payload, reply_to, src)))

    # The JSON lane (bus/message/jsonwire.py)
    # --------------------------------------------------------

    @classmethod
    def json_request(
        cls,
        group: str,
        payload: bytes,
        *,
        reply_to: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
        src: str | None = None,
        caller: str | None = None,
        trace: str | None = None,
    ) -> Message | None:
        """A request (ENC=JSON) whose payload is JSON text, sent as it is.

        Args:
            group: the group (GRP).
            payload: a JSON object whose first member is its text ``CMD`` (copied to the
                header), as a gateway receives it.
            reply_to: the group responses go to (RPY).
            limits: the limits receivers decode with (the payload sits one level down).
            src, caller, trace: SRC, CLR and TRC, as for :meth:`request`.

        Returns:
            The request, or None when the text is not one the JSON lane vouches for: then
            ``Message.request(group, cmd, from_json(text), enc=JSON, ...)`` is the same request
            and says what is wrong with it.
        """
        lane = compose_request(group, payload, reply_to, limits, src, caller, trace)
        return None if lane is None else cls.on_wire(*lane, limits)

    def payload_data(self) -> Any:
        """The payload as plain data, as ``payload.to_dict()`` gives it; read straight from the
        bytes (orjson) for a JSON message still on the wire."""
        raw, head = self._raw, self._head
        if raw is not None and head is not None:
            if head.enc == 0 and head.pld_start >= 0 and self._frame is None:
                # A binary body header.peek vouched for: its payload's span alone is decoded
                # (the whole body meets the limits, so the span does).
                return decode(raw[head.pld_start : head.pld_end], self._limits).to_dict()
            data = read_payload(raw, head)
            if data is not None:
                return data
            # Decoded, but still on the wire: reading data changes nothing, so the header
            # stays what answers MID, RPY, ENC (the answer reads them) without a search.
            frame = self._frame
            if frame is None:
                frame = self._frame = decode_message(raw, self._limits).frame
            value = frame.get("PLD")
            return value.to_dict() if isinstance(value, DataFrame) else {}
        return self.payload.to_dict()

    def json_parts(self) -> tuple[bytes, bytes] | None:
        """The header (all fields but PLD) and the payload as UTF-8 JSON text, cut from the
        bytes of a JSON message still on the wire; None: write them from the frame
        (``to_json``), which gives the same values."""
        raw, head = self._raw, self._head
        return None if raw is None or head is None else json_parts(raw, head)

    # Comparing and showing -----------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self.frame == other.frame

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Message({self.frame!r})"


def _is_text(raw: bytes) -> bool:
    # Latin-1 text: no C0 control but tab, line feed and carriage return; no DEL, no C1.
    return not raw.translate(None, _TEXT_BYTES)


_TEXT_BYTES = bytes([9, 10, 13, *range(0x20, 0x7F), *range(0xA0, 0x100)])


def decode_message(raw: bytes | bytearray | memoryview, limits: Limits = DEFAULT_LIMITS) -> Message:
    """Read a message body in Kestrel's order; ENC is set to how it was read.

    1. a binary data frame -> ENC=FRAM;
    2. else Latin-1 JSON (an object or array) -> ENC=JSON;
    3. else, when every byte is Latin-1 text, a frame ``{DATA: text}`` -> ENC=STR;
    4. else a frame ``{DATA: bytes}`` -> ENC=UNKN.

    Args:
        raw: the body.
        limits: limits for the binary and JSON decoders.

    Returns:
        The message (any ENC field it carried is overwritten, as Kestrel does).

    Raises:
        DecodeError: only when the body is larger than ``limits.max_size``.
    """
    if type(raw) is not bytes:
        raw = bytes(raw)
    if len(raw) > limits.max_size:
        raise DecodeError(f"message of {len(raw)} bytes exceeds max_size {limits.max_size}", 0)
    try:
        frame = decode(raw, limits)
    except DecodeError:
        return _decode_other(raw, limits)
    # ENC=FRAM, overwriting what it carried; inline, since every message passes here.
    fields = frame._fields
    index = find_name(fields, "ENC")
    if index < 0:
        fields.append(_ENC_FRAM)
    elif fields[index] != _ENC_FRAM:
        fields[index] = _ENC_FRAM
    return Message(frame)


def _decode_other(raw: bytes, limits: Limits) -> Message:
    """Steps 2 to 4 of :func:`decode_message`: JSON, else text, else bytes."""
    try:
        frame = from_json(raw.decode("latin-1"), limits)
        encoding = Encoding.JSON
    except DecodeError:
        frame = DataFrame()
        if _is_text(raw):
            frame.add("DATA", raw.decode("latin-1"))
            encoding = Encoding.STR
        else:
            frame.add("DATA", raw)
            encoding = Encoding.UNKN
    frame["ENC"] = encoding.value
    return Message(frame)


def read_header(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[Header, Message | None]:
    """The header of a body, and the decoded message when it had to be decoded for it.

    Returns:
        ``(header, message)``; ``message`` is None when :func:`bus.message.header.peek` read the
        header
        without decoding.

    Raises:
        DecodeError: the body is larger than ``limits.max_size`` (any other body reads:
            :func:`decode_message` never refuses one).
    """
    if len(raw) > limits.max_size:
        raise DecodeError(f"message of {len(raw)} bytes exceeds max_size {limits.max_size}", 0)
    head = peek(raw, limits)
    if head is not None:
        return head, None
    message = decode_message(raw, limits)
    return header_of(message), message


def read_message(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> Message:
    """A received body as a message, decoded only when a field beyond the header is read.

    Same result as :func:`decode_message`, at the cost of a header read when the body is one
    :func:`bus.message.header.peek` vouches for.

    Raises:
        DecodeError: the body is larger than ``limits.max_size``.
    """
    head = peek(raw, limits) if len(raw) <= limits.max_size else None  # read_header's usual
    if head is not None:
        return Message.on_wire(raw, head, limits)
    head, message = read_header(raw, limits)
    return message if message is not None else Message.on_wire(raw, head, limits)
