"""The broker's side of publish receipts (PROTOCOL.md 5.12, wire form in :mod:`bus.link.receipts`).

``manage.receipts`` turns receipts on for the link that sends it and, for a client that is about
to resend what an earlier link left unreceipted, says which of those events the broker already
has: it reads its journal after the client's last receipt (``since``) for their ``MID``, so a
resent event that was journaled before a crash or a lost link is neither journaled nor routed
twice (the client drops it). Without a journal nothing can be found: the client resends all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

from bus.errors import BusError, ConfigError
from bus.link.receipts import MAX_MIDS, as_list
from bus.message.message import Message, read_message

__all__ = ["SCAN_LIMIT", "journaled_mids", "receipts_reply"]

log = logging.getLogger("bus.broker")

#: Journal records one ``manage.receipts`` reads at most; what lies beyond is not looked at.
SCAN_LIMIT: Final = 1_000_000


def journaled_mids(records: Iterable[Any], mids: set[str], limit: int = SCAN_LIMIT) -> set[str]:
    """The ``mids`` that the journal ``records`` (each with ``raw``) hold, reading at most
    ``limit`` records and stopping once every one is found."""
    found: set[str] = set()
    for count, record in enumerate(records):
        if count >= limit or len(found) == len(mids):
            break
        try:
            mid = read_message(record.raw).mid
        except BusError:  # a record the reader could not decode: not one of ours
            continue
        if mid in mids:
            found.add(mid)
    return found


def receipts_reply(journal: Any, message: Message) -> Message:
    """The ACK to ``manage.receipts {since, mids}``: ``{seq, taken, journal}``, ``taken`` the
    asked-for MIDs the journal holds after ``since`` (in the order asked).

    Raises:
        ConfigError: a bad argument (the caller answers NAK 400).
    """
    args = message.payload
    since = args.get("since", 0)
    mids = as_list(args.get("mids"))
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise ConfigError("since must be a sequence number (an integer >= 0)")
    if not isinstance(mids, list) or not all(isinstance(mid, str) for mid in mids):
        raise ConfigError("mids must be a list of message ids")
    if len(mids) > MAX_MIDS:
        raise ConfigError(f"at most {MAX_MIDS} mids in one manage.receipts")
    if journal is None:
        return message.ack({"seq": 0, "taken": [], "journal": False})
    taken: list[str] = []
    if mids:
        try:
            found = journaled_mids(journal.reader().records(since_seq=since + 1), set(mids))
        except BusError as exc:  # an unreadable journal: the client resends (at least once)
            log.warning("manage.receipts could not read the journal: %s", exc)
            found = set()
        taken = [mid for mid in mids if mid in found]
    return message.ack({"seq": journal.last_seq, "taken": taken, "journal": True})
