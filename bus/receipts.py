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
from typing import Final

from bus import wire
from bus.enums import CommandKind
from bus.message import Message

__all__ = [
    "DEFAULT_WINDOW",
    "DEFAULT_WINDOW_BYTES",
    "RECEIPT_TAG",
    "Outbox",
    "decode_receipt",
    "encode_receipt",
]

#: The first data byte after the MqCommand kind that makes a Command frame a receipt.
RECEIPT_TAG: Final = b"R"
_BODY: Final = struct.Struct("<QQ")
#: Unreceipted events a client keeps at most before a publish waits for receipts.
DEFAULT_WINDOW: Final = 10_000
#: Bytes of unreceipted events a client keeps at most before a publish waits for receipts.
DEFAULT_WINDOW_BYTES: Final = 16 * 1024 * 1024


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
    an earlier link left unreceipted, waiting to be resent.

    Every event written on the link is recorded (the broker counts them all); a confirmed
    publish is recorded as a placeholder, since its own confirmation covers it.

    Args:
        max_events: unreceipted events kept at most (:attr:`full` beyond).
        max_bytes: their encoded bytes at most.

    Attributes:
        seq: the journal position of the newest receipt on this link (or of the broker's
            answer to ``manage.receipts`` when it started).
        resend: the events to send again on the new link, oldest first.
        scan_from: where the broker's journal is read for an earlier copy of ``resend``: the
            position before the oldest of them was written.
    """

    def __init__(self, max_events: int = DEFAULT_WINDOW, max_bytes: int = DEFAULT_WINDOW_BYTES):
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.seq = 0
        self.resend: deque[Message] = deque()
        self.scan_from = 0
        self._entries: deque[tuple[Message | None, int]] = deque()
        self._bytes = 0
        self._receipted = 0  # the count of the newest receipt on this link
        self._written = 0  # events written on this link

    def written(self, message: Message, size: int, keep: bool = True) -> None:
        """An event was written on the link (``keep`` False: a confirmed publish)."""
        self._written += 1
        self._entries.append((message if keep else None, size))
        self._bytes += size

    def receipt(self, count: int, seq: int) -> None:
        """The broker took the first ``count`` events of this link; its journal was at ``seq``."""
        self.seq = seq
        count = min(count, self._written)
        entries = self._entries
        for _ in range(count - self._receipted):
            _, size = entries.popleft()
            self._bytes -= size
        self._receipted = max(self._receipted, count)

    def new_link(self) -> None:
        """The link is gone: its unreceipted events go to the front of :attr:`resend` (they
        are older than those still waiting there), and the next link counts from 0."""
        pending = [message for message, _ in self._entries if message is not None]
        if pending:
            self.scan_from = min(self.scan_from, self.seq) if self.resend else self.seq
            self.resend.extendleft(reversed(pending))
        self._entries.clear()
        self._bytes = 0
        self._receipted = self._written = 0

    def taken(self, mids: set[str], seq: int) -> None:
        """The new link's broker already has ``mids`` (not resent); its journal is at ``seq``."""
        if mids:
            self.resend = deque(m for m in self.resend if m.mid not in mids)
        self.seq = seq

    @property
    def full(self) -> bool:
        """True when a publish should wait for receipts."""
        return len(self._entries) >= self.max_events or self._bytes >= self.max_bytes

    def __len__(self) -> int:
        return len(self._entries)
