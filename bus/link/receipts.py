"""Publish receipts (PROTOCOL.md 5.12): the wire form and the client's window, sans-I/O.

A link that asked for receipts (``manage.receipts``) is told, once per batch the broker reads
from it, how many events (``TYP=EVT``) it has sent on this link that the broker has taken:
routed, and written to the journal when the broker journals them. The receipt is one
MqCommand frame (section 3), so a client that did not ask never sees one and an older client
ignores it:

    05 12 00 01 52 <count: u64 LE> <seq: u64 LE>

``52`` is ``R``; ``count`` is cumulative over the link; ``seq`` is the journal's last sequence
number when the receipt was written (0 without a journal), so any event the link sent after
it that the broker journaled has a greater ``seq``.

:class:`Outbox` is the client's side: the events written on the current link and not yet
receipted, bounded by count and bytes, dropped as receipts come, handed back for a resend
after a reconnection. It does no I/O and knows no asyncio.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Final

from bus.frame.enums import CommandKind
from bus.frame.frame import DataFrame
from bus.link import wire
from bus.message.message import Message, MessageType, read_message

__all__ = [
    "DEFAULT_WINDOW",
    "ENTRY_COST",
    "MAX_MIDS",
    "RECEIPT_TAG",
    "Outbox",
    "as_list",
    "decode_receipt",
    "encode_receipt",
    "event_kind",
]

#: The first data byte after the MqCommand kind that makes a Command frame a receipt.
RECEIPT_TAG: Final = b"R"
_BODY: Final = struct.Struct("<QQ")
_EVT: Final = MessageType.EVT.value
#: Bytes of unreceipted events a client keeps at most before a publish waits for receipts:
#: each event's encoded size plus :data:`ENTRY_COST` (what keeping it costs besides).
DEFAULT_WINDOW: Final = 32 * 1024 * 1024
ENTRY_COST: Final = 64
#: MIDs one ``manage.receipts`` may ask about (the client sends more in several calls).
MAX_MIDS: Final = 1000


def event_kind(message: Message) -> bool | None:
    """What a message written on a link is to the receipts: None when it is not an event
    (``TYP=EVT``, the broker counts nothing else), True for an unconfirmed event (kept for a
    resend), False for a confirmed one (``RPY``: its confirmation covers it).

    Cheap for the usual messages (read off the wire, or built by :meth:`Message.event`), since
    it runs for every message a client writes: their TYP is looked up, not decoded.
    """
    head = message._head
    if head is not None:  # still on the wire: its header is read
        return None if head.typ != _EVT else head.rpy is None
    frame = message._frame
    if frame is None:
        return None if message.typ != _EVT else message.rpy is None
    index = frame._find("TYP")
    if index < 0 or frame._fields[index][2] != _EVT:
        return None
    return frame._find("RPY") < 0


def as_list(value: Any) -> Any:
    """A list argument of ``manage.receipts`` as it travels (a frame of unnamed fields; an
    empty one has no type)."""
    if isinstance(value, DataFrame):
        value = value.to_dict()
    return [] if value is None or value == {} else value


def encode_receipt(count: int, seq: int) -> bytes:
    """The receipt frame: ``count`` events taken on this link, the journal at ``seq``."""
    return wire.encode_command(CommandKind.MQ_COMMAND, RECEIPT_TAG + _BODY.pack(count, seq))


def decode_receipt(data: bytes) -> tuple[int, int] | None:
    """``(count, seq)`` of an MqCommand frame's data (after the kind byte); None if it is not
    a receipt."""
    if len(data) != 1 + _BODY.size or data[:1] != RECEIPT_TAG:
        return None
    count, seq = _BODY.unpack_from(data, 1)
    return int(count), int(seq)


class Outbox:
    """The events written on the current link that the broker has not receipted yet, and those
    an earlier link left unreceipted, waiting to be resent. They are kept as the bytes that
    were written (no message objects), so a burst costs little more than its size.

    Every event written on the link is recorded (the broker counts them all); a confirmed
    publish is recorded as a placeholder, since its own confirmation covers it.

    Args:
        window: bytes kept at most (:attr:`full` beyond), each event counted as its size plus
            :data:`ENTRY_COST`.

    Attributes:
        seq: the journal position of the newest receipt on this link (or of the broker's
            answer to ``manage.receipts`` when it started).
        resend: the events (their bytes) to send again on the new link, oldest first.
        scan_from: where the broker's journal is read for an earlier copy of ``resend``: the
            position before the oldest of them was written.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self.window = window
        self.seq = 0
        self.resend: deque[bytes] = deque()
        self.scan_from = 0
        self._entries: deque[bytes | None] = deque()
        self._bytes = 0
        self._receipted = 0  # the count of the newest receipt on this link
        self._written = 0  # events written on this link

    def written(self, raw: bytes | None) -> None:
        """An event was written on the link as ``raw`` (None: a confirmed publish, which its
        own confirmation covers)."""
        self._written += 1
        self._entries.append(raw)
        self._bytes += ENTRY_COST + (len(raw) if raw is not None else 0)

    def receipt(self, count: int, seq: int) -> None:
        """The broker took the first ``count`` events of this link; its journal was at ``seq``."""
        self.seq = seq
        count = min(count, self._written)
        entries = self._entries
        freed = 0
        for _ in range(count - self._receipted):
            raw = entries.popleft()
            freed += ENTRY_COST + (len(raw) if raw is not None else 0)
        self._bytes -= freed
        self._receipted = max(self._receipted, count)

    def new_link(self) -> None:
        """The link is gone: its unreceipted events go to the front of :attr:`resend` (they
        are older than those still waiting there), and the next link counts from 0."""
        pending = [raw for raw in self._entries if raw is not None]
        if pending:
            self.scan_from = min(self.scan_from, self.seq) if self.resend else self.seq
            self.resend.extendleft(reversed(pending))
        self._entries.clear()
        self._bytes = 0
        self._receipted = self._written = 0

    def resend_mids(self) -> list[str]:
        """The MIDs of :attr:`resend`, in order."""
        return [read_message(raw).mid or "" for raw in self.resend]

    def taken(self, mids: set[str], seq: int) -> None:
        """The new link's broker already has ``mids`` (not resent); its journal is at ``seq``."""
        if mids:
            self.resend = deque(raw for raw in self.resend if read_message(raw).mid not in mids)
        self.seq = seq

    @property
    def full(self) -> bool:
        """True when a publish should wait for receipts."""
        return self._bytes >= self.window

    def __len__(self) -> int:
        return len(self._entries)
