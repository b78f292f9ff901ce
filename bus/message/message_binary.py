"""The binary lanes: the usual request, answer and event (ENC=FRAM), written straight to
bytes by the C encoder (``bus.native._speedups.encode_texts``) instead of through a DataFrame.

Each lane writes the fields :meth:`bus.message.message.Message.request`,
:meth:`~bus.message.message.Message.reply` or :meth:`~bus.message.message.Message.event` would put
in the
frame, in the same order (an answer's in Kestrel's: its payload before SRC and TRC), so the
bytes are the frame path's; anything the lane does not write (a
text beyond ASCII, a payload value that is not plain, XPY, FLG, MSG, RCD) returns None and the
frame path writes it, raising its errors.
Without the accelerator (``BUSGATE_PURE_PYTHON``, no compiler) both lanes are off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bus.frame import codec as codec_module
from bus.frame.enums import Encoding
from bus.frame.frame import DataFrame
from bus.message.header import Header
from bus.message.ids import new_id

__all__ = ["binary_event", "binary_reply", "binary_request", "lanes_on", "reply_bytes"]

_fast_texts: Any = getattr(codec_module._fast, "encode_texts", None)
_FRAM: Final = Encoding.FRAM.value
_RQS: Final = "RQS"
_EVT: Final = "EVT"


def lanes_on() -> bool:
    """Whether the C encoder the lanes write with is in use."""
    return _fast_texts is not None


def _encoded(
    texts: tuple[str | None, ...], payload: Mapping[str, Any] | None, *optional: str | None
) -> bytes | None:
    """The body of ``texts``, then the ``optional`` (name, text) pairs whose text is not None,
    then the payload, as ``encode_texts`` writes it; None when something needs the frame path
    (a text beyond ASCII, a payload value that is not plain)."""
    for k in range(0, len(optional), 2):
        if optional[k + 1] is not None:
            texts += optional[k : k + 2]
    try:
        raw: bytes = _fast_texts(texts, payload)
    except Exception:  # anything unusual: the frame path writes it (and raises its errors)
        return None
    return raw


def binary_reply(
    rpy: str | None,
    mid: str | None,
    typ: str,
    src: str | None,
    trace: str | None,
    payload: dict[str, Any] | None,
) -> tuple[bytes, Header] | None:
    """An answer as :meth:`~bus.message.message.Message.reply` writes it without MSG, RCD or FLG
    (``GRP RID ENC MID TYP PLD SRC TRC``): its bytes and header, or None (the frame path writes
    it)."""
    if _fast_texts is None:
        return None
    new_mid = new_id()
    raw = reply_bytes(rpy, mid, new_mid, typ, src, trace, payload)
    if raw is None:
        return None
    # Bounds and counts are left unknown: this message is read by others, not by us.
    header = Header(
        0, typ, rpy, None, None, new_mid, mid, src, None, _FRAM, None, None, None,
        -1, -1, -1, False, trc=trace,
    )  # fmt: skip
    return raw, header


def reply_bytes(
    rpy: str | None,
    mid: str | None,
    new_mid: str,
    typ: str,
    src: str | None,
    trace: str | None,
    payload: dict[str, Any] | None,
) -> bytes | None:
    """The bytes alone of :func:`binary_reply`'s answer, with ``new_mid`` as its MID (no
    header built: for answers the sender only writes, as the broker's confirm ACK), or None
    (the frame path writes it; also without the accelerator)."""
    if _fast_texts is None:
        return None
    texts: tuple[str | None, ...] = ("GRP", rpy) if rpy is not None else ()
    if mid is not None:
        texts += ("RID", mid)
    texts += ("ENC", _FRAM, "MID", new_mid, "TYP", typ)
    # Kestrel's order: PLD right after TYP, then SRC (and our TRC) (PROTOCOL.md 2.3).
    after: tuple[str, ...] = () if src is None else ("SRC", src)
    if trace is not None:
        after += ("TRC", trace)
    try:
        raw: bytes = _fast_texts(texts, payload, after)
    except Exception:  # anything unusual: the frame path writes it (and raises its errors)
        return None
    return raw


def binary_request(
    group: str,
    cmd: str,
    args: Mapping[str, Any] | DataFrame | None,
    mid: str,
    reply_to: str | None,
    src: str | None,
    caller: str | None,
    trace: str | None,
) -> tuple[bytes, Header] | None:
    """A request as :meth:`~bus.message.message.Message.request` writes it with ENC=FRAM and no XPY
    or FLG, ``args`` a dict or None: its bytes and header, or None (the frame path writes it)."""
    if _fast_texts is None:
        return None
    if args is None:
        payload: dict[str, Any] = {"CMD": cmd}
    elif type(args) is dict and "CMD" not in args:  # the frame path drops an argument CMD
        payload = {"CMD": cmd, **args}
    else:
        return None
    texts: tuple[str | None, ...] = ("MID", mid, "GRP", group)
    if reply_to is not None:
        texts += ("RPY", reply_to)
    texts += ("TYP", _RQS, "CMD", cmd, "ENC", _FRAM)
    raw = _encoded(texts, payload, "SRC", src, "CLR", caller, "TRC", trace)
    if raw is None:
        return None
    header = Header(
        0, _RQS, group, None, reply_to, mid, None, src, cmd, _FRAM, None, None, None,
        -1, -1, -1, False, clr=caller, trc=trace,
    )  # fmt: skip
    return raw, header


def binary_event(
    mid: str,
    event_type: str,
    payload: Mapping[str, Any] | DataFrame | None,
    reply_to: str | None,
    src: str | None,
) -> tuple[bytes, Header] | None:
    """An event as :meth:`~bus.message.message.Message.event` writes it, ``payload`` a dict or None:
    its bytes and header, or None (the frame path writes it)."""
    if _fast_texts is None or not (payload is None or type(payload) is dict):
        return None
    texts = ("MID", mid, "GRP", event_type, "TYP", _EVT)
    raw = _encoded(texts, payload, "RPY", reply_to, "SRC", src)
    if raw is None:
        return None
    header = Header(
        0, _EVT, event_type, None, reply_to, mid, None, src, None, None, None, None, None,
        -1, -1, -1, False,
    )  # fmt: skip
    return raw, header
