"""History: the journaled events of a pattern, a page at a time (PROTOCOL.md 5.15).

:class:`History` is mixed into :class:`bus.asyncio.client.Client`. ``await client.history(
"sensor.*", limit=100)`` asks the bus for the newest events of the pattern that the broker's
journal holds (or, on NATS, the JetStream stream), oldest first; ``since=`` (a sequence number)
or ``since_time=`` (epoch seconds) reads forward from there instead, and ``before=`` pages back.
A pattern whose events the bus does not keep is refused with ``NakError`` RCD 409, whose
message names the journal's filter: an empty page always means "nothing happened".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bus.asyncio.transport import Transport
from bus.discovery.topics import check_pattern
from bus.errors import ConfigError, DisconnectedError, NakError, NotJournaledError
from bus.frame.enums import CloseReason
from bus.message.message import Message, read_message

__all__ = ["HistoryEvent", "HistoryPage", "History", "page_from_answer"]


@dataclass(frozen=True)
class HistoryEvent:
    """One journaled event.

    Attributes:
        seq: its sequence number (the broker's journal, or the JetStream stream's).
        time: when it was routed (stored), epoch seconds.
        message: the event as it was published.
    """

    seq: int
    time: float
    message: Message


@dataclass
class HistoryPage:
    """One page of history.

    Attributes:
        events: oldest first.
        seq: the journal's (stream's) last sequence number when it was read: subscribe with
            ``since=seq`` to go on live with nothing missed.
        more: there may be more in the direction read; ask again with :attr:`next`.
        next: the arguments of the next page: ``{"since": n}`` or ``{"before": n}``.
        filter: set when the journal keeps only some of the pattern's types (its filter).
    """

    events: list[HistoryEvent] = field(default_factory=list)
    seq: int = 0
    more: bool = False
    next: dict[str, int] | None = None
    filter: str | None = None


def _listed(value: Any) -> Sequence[Any]:
    # an empty list travels as an empty frame (PROTOCOL.md 1.7), read back as {}
    return value if isinstance(value, list) else []


def page_from_answer(answer: Any) -> HistoryPage:
    """A :class:`HistoryPage` from a ``manage.history`` ACK's payload data."""
    if not isinstance(answer, dict):
        return HistoryPage()
    raws, seqs, times = (_listed(answer.get(k)) for k in ("events", "seqs", "times"))
    events = [
        HistoryEvent(int(seq), float(ts), read_message(bytes(raw)))
        for raw, seq, ts in zip(raws, seqs, times, strict=False)
    ]
    nxt = answer.get("next")
    page = HistoryPage(events, int(answer.get("seq") or 0), bool(answer.get("more")))
    if isinstance(nxt, dict) and nxt:
        page.next = {str(k): int(v) for k, v in nxt.items()}
    text = answer.get("filter")
    page.filter = text if isinstance(text, str) and text else None
    return page


class History:
    """``history()`` of the client (a mixin of :class:`bus.asyncio.client.Client`)."""

    timeout: float
    _connected: bool
    _transport: Transport | None

    def _check_open(self) -> None:
        raise NotImplementedError  # the client's

    async def history(
        self,
        pattern: str,
        *,
        limit: int = 100,
        since: int | None = None,
        since_time: float | None = None,
        before: int | None = None,
        last: bool = False,
        timeout: float | None = None,
    ) -> HistoryPage:
        """A page of the journaled events of ``pattern``, oldest first.

        Args:
            pattern: the types (``sensor.temp``, ``sensor.*``).
            limit: events at most (0..1000).
            since: the events after this sequence number (forward).
            since_time: the events from this time on, epoch seconds (forward).
            before: only events before this sequence number; without ``since``, the newest
                ``limit`` of them.
            last: instead, the last event of each type (at most ``limit`` types, the most
                recently published; oldest first).
            timeout: seconds to wait for the answer (default: the client's).

        Raises:
            ConfigError: a malformed pattern or argument.
            NotJournaledError: (a NakError, RCD 409) the bus keeps none of the pattern's
                events (no journal, its filter, no JetStream).
            NakError: RCD 503, the journal could not be read.
            DisconnectedError: not connected.
        """
        check_pattern(pattern)
        if not 0 <= limit <= 1000:
            raise ConfigError("limit must be in 0..1000")
        self._check_open()
        transport = self._transport
        if not self._connected or transport is None:
            raise DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        args: dict[str, Any] = {"pattern": pattern, "limit": limit}
        for name, value in (("since", since), ("sinceTime", since_time), ("before", before)):
            if value is not None:
                args[name] = value
        if last:
            args["last"] = True
        try:
            ack = await transport.call(
                "manage.history", args, self.timeout if timeout is None else timeout
            )
        except NakError as exc:
            raise NotJournaledError.of(exc) from None
        return page_from_answer(ack.payload_data() if ack.payload is not None else {})
