"""An event's sequence number and replay pattern spliced into its bytes (PROTOCOL.md 5.14, 10.2).

Sans-I/O. :func:`with_seq` adds ``SEQ`` (U64) and, for a replayed event, ``RPL`` to a message
body without decoding it: a binary frame gets the fields appended, a JSON object gets first
members. The broker adds them to the events it delivers from its journal
(:mod:`bus.broker.replay`); the NATS recorder adds ``SEQ`` = the stream sequence to each event
it journals (:mod:`bus.recording`).
"""

from __future__ import annotations

import struct
from typing import Final

import orjson

from bus.frame.codec import encode_field
from bus.frame.enums import FieldType
from bus.frame.frame import Typed, make_field

__all__ = ["rpl_field", "with_seq"]

_FRAM: Final = 0
_JSON: Final = 1
_SPACE: Final = b" \t\r\n"
#: ``SEQ`` as a binary field (1.1) up to its value: every journaled event is given one.
_SEQ_FIELD: Final = encode_field(make_field("SEQ", Typed(FieldType.U64, 0)))[:-8]
_U64: Final = struct.Struct(">Q").pack


def with_seq(
    raw: bytes, enc: int, seq: int, replay: str | None = None, replay_field: bytes = b""
) -> bytes:
    """``raw`` with ``SEQ`` (and ``RPL`` when replayed) added, or ``raw`` itself when its
    encoding takes no field this way (a text body: delivered without a sequence number).
    ``replay_field``: ``RPL`` already encoded as a binary field, for a batch that adds the
    same one to every event (else it is encoded here)."""
    if enc == _FRAM:
        if replay is None:
            return b"".join((raw, _SEQ_FIELD, _U64(seq)))
        return b"".join((raw, _SEQ_FIELD, _U64(seq), replay_field or rpl_field(replay)))
    if enc == _JSON:
        start = len(raw) - len(raw.lstrip(_SPACE))
        if raw[start : start + 1] != b"{" or not (replay is None or replay.isascii()):
            return raw
        members = b'"SEQ":%d,' % seq
        if replay is not None:
            members += b'"RPL":' + orjson.dumps(replay) + b","
        rest = raw[start + 1 :]
        if rest.lstrip(_SPACE)[:1] == b"}":
            members = members[:-1]
        return b"".join((raw[: start + 1], members, rest))
    return raw


def rpl_field(replay: str) -> bytes:
    """``RPL`` = ``replay`` as a binary field (1.1)."""
    return encode_field(make_field("RPL", replay))
