"""Content negotiation: which of the types we can send the ``Accept`` header prefers.

RFC 9110 section 12.5.1: each media range may carry a weight ``q`` (0 to 1, default 1; ``q=0``
means "not acceptable"); an offer takes the weight of the most specific range that matches it
(``type/subtype`` over ``type/*`` over ``*/*``, and a range with parameters over one without).
The offer with the highest weight wins; on equal weights, the one whose range the client listed
first, then the server's own order. Sans-I/O: strings in, a string out.

``POST /v1/request/{group}`` offers ``application/json``, ``application/x-ndjson`` and
``text/event-stream`` (docs/PROTOCOL.md 9.4)::

    preferred("application/x-ndjson;q=0.5, application/json", OFFERS)  -> "application/json"
    preferred("text/event-stream, application/x-ndjson;q=0.9", OFFERS)  -> "text/event-stream"
    preferred("*/*", OFFERS)                                            -> "application/json"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["REQUEST_OFFERS", "MediaRange", "parse_accept", "preferred"]

#: What ``POST /v1/request/{group}`` can answer with, its own preference first.
REQUEST_OFFERS: Final = ("application/json", "application/x-ndjson", "text/event-stream")
#: Longest Accept header read (longer ones are cut: they are no client's honest preference).
MAX_ACCEPT: Final = 4096


@dataclass(frozen=True)
class MediaRange:
    """One entry of an Accept header."""

    type: str
    subtype: str
    q: float
    params: int  # how many parameters besides q (more specific when > 0)
    position: int

    def matches(self, offer: str) -> int:
        """How specifically this range matches ``offer`` (``type/subtype``): -1 for no match."""
        kind, _, sub = offer.partition("/")
        if self.type == "*":
            return 0
        if self.type != kind:
            return -1
        if self.subtype == "*":
            return 1
        if self.subtype != sub:
            return -1
        return 2 + min(self.params, 1)


def parse_accept(accept: str) -> list[MediaRange]:
    """The media ranges of an Accept header; malformed entries are skipped."""
    ranges = []
    for position, item in enumerate(accept[:MAX_ACCEPT].split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        kind, slash, sub = media.lower().partition("/")
        if not slash or not kind or not sub or (kind == "*" and sub != "*"):
            continue
        q, others = 1.0, 0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:  # also NaN
                    q = 0.0
            elif name:
                others += 1
        ranges.append(MediaRange(kind, sub, q, others, position))
    return ranges


def preferred(accept: str | None, offers: Sequence[str] = REQUEST_OFFERS) -> str | None:
    """The offer the client prefers, or ``None`` when it accepts none of them.

    Args:
        accept: the ``Accept`` header (``None`` or empty: anything, so the first offer).
        offers: what the server can send, its own preference first.

    Returns:
        One of ``offers``, or ``None`` (the caller answers 406, or its default).
    """
    if not accept or not accept.strip():
        return offers[0] if offers else None
    ranges = parse_accept(accept)
    if not ranges:
        return offers[0] if offers else None
    best: tuple[float, int, int] | None = None
    chosen: str | None = None
    for order, offer in enumerate(offers):
        match: MediaRange | None = None
        specificity = -1
        for candidate in ranges:
            level = candidate.matches(offer.lower())
            if level > specificity or (level == specificity and match and candidate.q > match.q):
                match, specificity = candidate, level
        if match is None or specificity < 0 or match.q <= 0:
            continue
        key = (match.q, -match.position, -order)
        if best is None or key > best:
            best, chosen = key, offer
    return chosen
