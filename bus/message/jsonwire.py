"""JSON bodies without frames: the fast lane of ``ENC=JSON`` messages (PROTOCOL.md 1.7, 9.2).

A message that travels as Kestrel JSON is JSON text already. Where the JSON mapping of
:mod:`bus.frame.jsonmap` is the identity, building a :class:`~bus.frame.frame.DataFrame` only to
write the
same text again is wasted work. These functions decide when it is the identity and then use
orjson directly; otherwise they return None and the caller takes the frame path, which gives
the same result (and raises the documented errors):

- :func:`plain_json` writes plain Python data (dict, list, tuple, str, int, float, bool, None)
  whose mapping is the identity: text values in Latin-1, names of 1..255 UTF-8 bytes, integers
  of 64 bits, finite floats, within a depth and field budget;
- :func:`read_plain` reads a payload's JSON text back to the same plain data
  ``DataFrame.to_dict()`` would give, given how many fields the text holds (an object with a
  repeated name reads differently, so the counts must agree);
- :func:`compose_request` and :func:`compose_reply` write whole request and response bodies
  as ``Message.request`` and ``Message.reply`` would; :func:`json_parts` and
  :func:`read_payload` cut a received JSON body's header and payload apart;
- :func:`ack_frame` writes a service's usual answer (the ACK of a JSON request, its payload
  plain data) straight to the wire: one Last frame (seed 002), no Message built; in C when the
  accelerator was built (``bus/native/_hotpath_answer.c``), :func:`ack_frame_reference` else.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, Final

import orjson

from bus.accelerators import accelerator
from bus.frame.codec import Limits
from bus.link.wire import DEFAULT_MAX_FRAME, encode_message
from bus.message import header as header_module
from bus.message.header import Header, peek_json
from bus.message.ids import id_block, new_id

__all__ = [
    "ack_frame",
    "ack_frame_reference",
    "compose_reply",
    "compose_request",
    "compose_request_reference",
    "json_parts",
    "latin1_json",
    "plain_json",
    "read_payload",
    "read_plain",
]

_MAX_NAME: Final = 255
_I64_MIN: Final = -(2**63)
_U64_END: Final = 2**64
#: Finite floats orjson and repr both write without an exponent (orjson's bounds are wider).
_FLOAT_LOW: Final = 1e-4
_FLOAT_HIGH: Final = 1e16


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def _plain(value: Any, depth: int, budget: _Budget) -> bool:
    kind = type(value)
    if kind is str:
        return bool(value.isascii()) or _latin1(value)
    if kind is int:
        return bool(_I64_MIN <= value < _U64_END)
    if kind is bool or value is None:
        return True
    if kind is float:
        # orjson writes 1e+16 and 1e-7 without a fraction, which Java's JsonFrameParser reads
        # as a STRING: floats that may be written with an exponent take the frame path, whose
        # to_json writes 1.0e+16 (PROTOCOL.md 1.7).
        return bool(value == 0.0 or _FLOAT_LOW <= abs(value) < _FLOAT_HIGH)
    if kind is dict:
        if depth <= 0 or not value:  # to_json writes an empty nested frame as [] (as Java)
            return False
        budget.left -= len(value)
        if budget.left < 0:
            return False
        for name, item in value.items():
            if type(name) is not str or not name or not _name_fits(name):
                return False
            if not _plain(item, depth - 1, budget):
                return False
        return True
    if kind is list or kind is tuple:
        if depth <= 0 or not value:
            return False
        budget.left -= len(value)
        return budget.left >= 0 and all(_plain(item, depth - 1, budget) for item in value)
    return False  # bytes, datetime, DataFrame, Typed, subclasses: the frame path knows them


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _name_fits(name: str) -> bool:
    if name.isascii():
        return len(name) <= _MAX_NAME
    try:
        return len(name.encode("utf-8")) <= _MAX_NAME
    except UnicodeEncodeError:  # a lone surrogate
        return False


def plain_json(value: Any, max_depth: int, max_fields: int) -> bytes | None:
    """``value`` as UTF-8 JSON when it is plain data whose JSON mapping is the identity.

    Args:
        value: the data (a dict for a payload).
        max_depth: nesting allowed below ``value`` itself (a payload sits one level below the
            message, so ``Limits.max_depth - 1``).
        max_fields: fields allowed in ``value``, nested ones included.

    Returns:
        The JSON text (UTF-8: call :func:`latin1_json` before it goes on the wire), or None.
    """
    if type(value) is not dict or not _is_plain(value, max_depth + 1, max_fields):
        return None
    return orjson.dumps(value)


def latin1_json(text: bytes) -> bytes | None:
    """UTF-8 JSON text as the wire's Latin-1 JSON, or None when a character is above U+00FF."""
    if text.isascii():
        return text
    try:
        return text.decode("utf-8").encode("latin-1")
    except UnicodeEncodeError:
        return None


def _fields(value: Any) -> int:
    if type(value) is dict:
        return len(value) + sum(_fields(item) for item in value.values())
    if type(value) is list:
        return len(value) + sum(_fields(item) for item in value)
    return 0


def _plain_reference(value: Any, depth: int, max_fields: int) -> bool:
    """Whether ``value`` is plain data within ``depth`` levels and ``max_fields`` fields (the
    reference of the C accelerator's ``plain``)."""
    return _plain(value, depth, _Budget(max_fields))


# Every answer a service writes as JSON, and every JSON payload it reads, is checked: in C when
# the accelerator was built (tests/bus/message/test_jsonwire.py holds it to the reference above).
_hotpath = accelerator("bus.native._hotpath")
_is_plain: Callable[[Any, int, int], bool] = (
    _plain_reference if _hotpath is None else _hotpath.plain
)
_count_fields: Callable[[Any], int] = _fields if _hotpath is None else _hotpath.count_fields
_json_request: Callable[..., tuple[bytes, tuple[Any, ...]] | None] | None = getattr(
    _hotpath, "json_request", None
)


def read_plain(text: bytes | str, fields: int) -> Any:
    """A JSON object's plain data, or None when it does not read as the frame would.

    Args:
        text: the object's Latin-1 JSON text (the payload's bytes in a body).
        fields: how many fields the text holds, nested ones included (``Header.pld_fields``).

    Returns:
        The dict ``DataFrame.to_dict()`` gives for the same text, or None (a repeated name,
        text orjson refuses): read the frame instead.
    """
    if isinstance(text, bytes) and not text.isascii():
        text = text.decode("latin-1")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or _count_fields(data) != fields:
        return None
    return data


# Whole messages ----------------------------------------------------------------------------

_CMD_FIRST: Final = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"CMD"[ \t\n\r]*:')
_PLD_MEMBER: Final = b',"PLD":'
#: Header fields of a request besides its payload: MID GRP RPY TYP CMD ENC and PLD itself.
_REQUEST_FIELDS: Final = 7
_S32: Final = 2**31
_new = tuple.__new__


def compose_request(
    group: str,
    payload: bytes,
    reply_to: str | None,
    limits: Limits,
    src: str | None = None,
    caller: str | None = None,
    trace: str | None = None,
) -> tuple[bytes, Header] | None:
    """A request (``ENC=JSON``) around a payload given as JSON text, as ``Message.request`` writes
    it (``MID GRP RPY TYP CMD ENC [SRC] [CLR] [TRC] PLD``, CMD copied from the payload's first
    member). Every gateway request is made here: written by the C accelerator
    (``json_request``) when it was built and the header reader uses it, else (and for a CMD or
    a name to escape) by :func:`compose_request_reference`, which gives the same bytes.

    Returns:
        The body and its header, or None when the text is not one this lane vouches for (not
        ASCII, CMD not first, a quirk, over a limit): build the message from the frame then.
    """
    inner = _inner_limits(limits)
    if _json_request is not None and header_module.accelerated():
        block, pos = id_block(1)
        found = _json_request(
            payload, group, reply_to, src, caller, trace, inner.max_depth, inner.max_fields,
            block, pos,
        )  # fmt: skip
        if found is not None:
            return found[0], _new(Header, found[1])
    return compose_request_reference(group, payload, reply_to, limits, src, caller, trace)


def compose_request_reference(
    group: str,
    payload: bytes,
    reply_to: str | None,
    limits: Limits,
    src: str | None = None,
    caller: str | None = None,
    trace: str | None = None,
) -> tuple[bytes, Header] | None:
    """:func:`compose_request` in Python (the reference of the C accelerator's
    ``json_request``)."""
    if not payload.isascii() or not _CMD_FIRST.match(payload):
        return None
    inner = _inner_limits(limits)
    head = peek_json(payload, inner)
    if head is None or head.quirks or not head.cmd:
        return None
    mid = new_id()
    fields = {"MID": mid, "GRP": group}
    if reply_to is not None:
        fields["RPY"] = reply_to
    fields.update(TYP="RQS", CMD=head.cmd, ENC="JSON")
    if src is not None:
        fields["SRC"] = src
    if caller is not None:
        fields["CLR"] = caller
    if trace is not None:
        fields["TRC"] = trace
    prefix = latin1_json(orjson.dumps(fields))
    if prefix is None:
        return None
    body = payload.strip(b" \t\n\r")
    raw = b"".join((prefix[:-1], _PLD_MEMBER, body, b"}"))
    start = len(prefix) - 1 + len(_PLD_MEMBER)
    # (tuple.__new__: Header's own __new__ is a Python function, a frame on every request)
    header: Header = _new(Header, (
        1, "RQS", group, None, reply_to, mid, None, src, head.cmd, "JSON", None, None, None,
        start, start + len(body), head.fields, False, -1, caller, trace, None, None,
    ))  # fmt: skip
    return raw, header


#: The last limits a request was composed with, and the payload's (one level down, the
#: request's own fields fewer): made once, not per request (a frozen dataclass is slow to make).
_inner: tuple[Limits, Limits] | None = None


def _inner_limits(limits: Limits) -> Limits:
    global _inner
    known = _inner
    if known is not None and known[0] is limits:
        return known[1]
    inner = Limits(limits.max_size, limits.max_depth - 1, limits.max_fields - _REQUEST_FIELDS)
    _inner = (limits, inner)
    return inner


def compose_reply(
    rpy: str | None,
    mid: str | None,
    typ: str,
    payload: Any,
    msg: str | None,
    rcd: int | None,
    flags: int,
    limits: Limits,
    trace: str | None = None,
    src: str | None = None,
    new_mid: str | None = None,
) -> tuple[bytes, Header] | None:
    """A response (``ENC=JSON``) as ``Message.reply`` writes it, its payload plain data (its
    MID ``new_mid``, else a new one).

    Returns:
        The body and its header, or None when something needs the frame path (a payload that
        is not plain, an RCD beyond 32 bits, a text beyond Latin-1).
    """
    fields: dict[str, Any] = {}
    if rpy is not None:
        fields["GRP"] = rpy
    if mid is not None:
        fields["RID"] = mid
    if new_mid is None:
        new_mid = new_id()
    fields["ENC"] = "JSON"
    fields["MID"] = new_mid
    fields["TYP"] = typ
    # Kestrel's order (PROTOCOL.md 2.3): PLD right after TYP, then MSG RCD FLG SRC TRC; the
    # payload goes into the dict (checked plain), so one orjson call writes the whole body.
    text_ok = msg is not None and msg.strip()
    if rcd is not None and (type(rcd) is not int or not -_S32 <= rcd < _S32):
        return None
    if payload is not None:
        after = (
            bool(text_ok) + (rcd is not None) + bool(flags) + (src is not None)
            + (trace is not None)
        )  # fmt: skip
        room = limits.max_fields - len(fields) - after - 1
        if type(payload) is not dict or not _is_plain(payload, limits.max_depth, room):
            return None
        fields["PLD"] = payload
    if text_ok:
        fields["MSG"] = msg
    if rcd is not None:
        fields["RCD"] = rcd
    if flags:
        fields["FLG"] = flags
    if src is not None:
        fields["SRC"] = src
    if trace is not None:
        fields["TRC"] = trace
    text = orjson.dumps(fields)
    raw = latin1_json(text)
    if raw is None:
        return None
    # Bounds and counts are left unknown: this message is read by others, not by us.
    header = Header(
        1,
        typ,
        rpy,
        None,
        None,
        new_mid,
        mid,
        src,
        None,
        "JSON",
        flags or None,
        rcd,
        None,
        -1,
        -1,
        -1,
        True,
        trc=trace,
    )
    return raw, header


def json_parts(raw: bytes, head: Header) -> tuple[bytes, bytes] | None:
    """The header (every field but PLD) and the payload of a JSON body as UTF-8 JSON text, cut
    from the bytes, or None when they must be written from the frame (a quirk, spacing around
    PLD, PLD first)."""
    if head.enc != 1 or head.quirks or head.enc_field != "JSON":
        return None
    start, end = head.pld_start, head.pld_end
    if start < 0:
        header, payload = raw, b"{}"
    else:
        cut = start - 7  # len(_PLD_MEMBER)
        if raw[cut:start] != _PLD_MEMBER:
            return None
        if end == len(raw) - 1:  # PLD last, as in a request
            header = raw[:cut] + b"}"
        elif raw[end] == 44:  # a comma: more after it, as in an answer (Kestrel's order)
            header = raw[:cut] + raw[end:]
        else:
            return None
        payload = raw[start:end]
    if not raw.isascii():
        header = header.decode("latin-1").encode()
        payload = payload.decode("latin-1").encode()
    return header, payload


def read_payload(raw: bytes, head: Header) -> Any:
    """A JSON body's payload as plain data (``payload.to_dict()``), or None: decode it instead."""
    if head.enc != 1 or head.pld_start < 0 or head.quirks or head.pld_fields < 0:
        return None
    text = raw[head.pld_start : head.pld_end]
    if not text.isascii():  # read_plain, inline: every request a service answers passes here
        return read_plain(text, head.pld_fields)
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return data if type(data) is dict and _count_fields(data) == head.pld_fields else None


def ack_frame_reference(
    rpy: str | None,
    rid: str | None,
    mid: str,
    payload: Any,
    src: str | None,
    trace: str | None,
    max_depth: int,
    max_fields: int,
    max_size: int,
    dumps: Callable[[Any], bytes] = orjson.dumps,
) -> bytes | None:
    """The ACK of a JSON request (``ENC=JSON``, ``RPY -> GRP``, ``MID -> RID``, this new
    ``mid``) with ``payload`` (plain data, or None) as one Last frame: :func:`compose_reply`'s
    body, framed as :func:`bus.link.wire.encode_message` frames it. None when it is not the
    usual answer (a payload that is not plain, a body beyond one frame or ``max_size``): build
    the message then (``Message.ack``), which says what is wrong with it. The reference of the C
    accelerator's ``ack_frame``, which may answer None where this does not (text it would have
    to escape or convert), never other bytes."""
    limits = Limits(max_size, max_depth, max_fields)
    lane = compose_reply(rpy, rid, "ACK", payload, None, None, 0, limits, trace, src, mid)
    if lane is None:
        return None
    raw = lane[0]
    if len(raw) > max_size or len(raw) > DEFAULT_MAX_FRAME:
        return None
    return encode_message(raw)


#: :func:`ack_frame_reference` (without ``dumps``), in C when the accelerator was built.
ack_frame: Callable[..., bytes | None] = (
    ack_frame_reference if _hotpath is None else partial(_hotpath.ack_frame, orjson.dumps)
)
