"""A message's routing header, read without decoding its values (sans-I/O).

A router needs a handful of header fields of each message (TYP, GRP, TGT, FLG, RPY, MID, RID)
and forwards the bytes as they came (``docs/PROTOCOL.md`` 5.1); a client needs the same to find
the waiting request or subscription. :func:`read_header` gives them without building a single
field, through the optional C accelerator ``bus.native._hotpath``, which validates the whole body
the way
:func:`bus.message.message.decode_message` does (a body it vouches for decodes, with the same
header).
Whatever it cannot vouch for (an unusual body, or no accelerator at all) is decoded by the
reference code, so the answer is the same either way; only the cost differs.

``Header.pld`` bounds the payload's bytes inside the body, which lets the gateway hand a JSON
payload on as it came (``docs/PROTOCOL.md`` 9.2) and a service read it with orjson.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from bus.frame.codec import DEFAULT_LIMITS, Limits
from bus.frame.enums import Encoding
from bus.frame.frame import accelerator

__all__ = [
    "ENC_CODES",
    "Header",
    "accelerated",
    "header_of",
    "peek",
    "peek_json",
    "use_accelerator",
]

#: ``Header.enc`` codes: how the body was read (decode_message's order).
ENC_CODES: Final = (Encoding.FRAM, Encoding.JSON, Encoding.STR, Encoding.UNKN)
_ENC_INDEX: Final = {enc: index for index, enc in enumerate(ENC_CODES)}


class Header(NamedTuple):
    """The routing header of one message body.

    Attributes:
        enc: how the body reads: index into :data:`ENC_CODES` (0 FRAM, 1 JSON, 2 STR, 3 UNKN).
        typ, grp, tgt, rpy, mid, rid, src, cmd: the first header field of that name as text,
            or None (``cmd`` is the header's CMD only, not the payload's).
        enc_field: the body's own ENC field (None when absent; ``enc`` says how it reads);
            from :func:`header_of`, the decoded message's ENC.
        flg, rcd, xpy: the FLG, RCD and XPY integers, or None.
        pld_start, pld_end: where the PLD value's bytes are in the body (-1 when unknown:
            the header came from a decoded message).
        pld_fields: how many fields the payload holds, nested ones included.
        quirks: the JSON body holds an empty object or array, an empty name, a number too
            large for a double or one with an exponent but no fraction (``1e5``), where the
            JSON mapping is not the identity (``docs/PROTOCOL.md`` 1.7).
        fields: how many fields the whole body holds (-1 when unknown).
        clr, trc: the CLR (caller) and TRC (W3C traceparent) header fields as text, or None
            (``docs/PROTOCOL.md`` 5.11).
        rpl, seq: a replayed event's RPL (the pattern it is replayed for) as text, and an
            event's SEQ (its journal sequence number) as an integer, or None (5.14).
    """

    enc: int
    typ: str | None
    grp: str | None
    tgt: str | None
    rpy: str | None
    mid: str | None
    rid: str | None
    src: str | None
    cmd: str | None
    enc_field: str | None
    flg: int | None
    rcd: int | None
    xpy: int | None
    pld_start: int = -1
    pld_end: int = -1
    pld_fields: int = 0
    quirks: bool = False
    fields: int = -1
    clr: str | None = None
    trc: str | None = None
    rpl: str | None = None
    seq: int | None = None


def _load() -> Any:
    return accelerator("bus.native._hotpath")


_fast: Any = _load()
_new = tuple.__new__
_enabled = _fast is not None


def accelerated() -> bool:
    """True when headers are read by the C accelerator."""
    return _enabled


def use_accelerator(enabled: bool = True) -> bool:
    """Read headers with the C accelerator (when built) or always decode (the tests run both).

    Returns:
        Whether the accelerator is now in use.
    """
    global _enabled
    _enabled = bool(enabled) and _fast is not None
    return _enabled


def peek(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> Header | None:
    """The header of a body the accelerator can vouch for, else None (decode it instead).

    Args:
        raw: the message body (at most ``limits.max_size`` bytes: the caller checks).
        limits: the decoder limits the body must meet.
    """
    if not _enabled:
        return None
    found = _fast.peek(raw, limits.max_depth, limits.max_fields, 0)
    return None if found is None else _new(Header, found)  # Header._make without its checks


def peek_json(text: bytes, limits: Limits = DEFAULT_LIMITS) -> Header | None:
    """As :func:`peek` for a JSON object only (never read as a binary frame): a gateway body."""
    if not _enabled:
        return None
    found = _fast.peek(text, limits.max_depth, limits.max_fields, 1)
    return None if found is None else _new(Header, found)


def header_of(message: Any) -> Header:  # a Message: bus.message.message imports this module
    """The header of a decoded :class:`bus.message.message.Message` (no payload bounds)."""
    frame = message.frame
    flg, rcd, xpy = message.flg, message.rcd, message.xpy
    cmd, enc = frame.get("CMD"), frame.get("ENC")
    clr, trc, rpl = frame.get("CLR"), frame.get("TRC"), frame.get("RPL")
    return Header(
        _ENC_INDEX[message.enc],
        message.typ,
        message.grp,
        message.tgt,
        message.rpy,
        message.mid,
        message.rid,
        message.src,
        None if cmd is None else str(cmd),
        None if enc is None else str(enc),
        flg,
        rcd,
        xpy,
        clr=None if clr is None else str(clr),
        trc=None if trc is None else str(trc),
        rpl=None if rpl is None else str(rpl),
        seq=message.seq,
    )
