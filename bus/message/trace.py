"""W3C trace context on the bus: the ``TRC`` header field (``docs/PROTOCOL.md`` 5.11).

A ``traceparent`` (https://www.w3.org/TR/trace-context/) is ``00-<trace id: 32 hex>-<parent id:
16 hex>-<flags: 2 hex>``. The gateway takes the one an HTTP request brings (or starts one), the
request carries it as ``TRC``, responses carry their request's, and a service's own requests
carry a child of it (same trace id, the service's span as parent): :func:`current` is the
trace context of the handler running now, which :class:`bus.asyncio.client.Client` puts on the
requests it makes.

Pure functions and one context variable; OpenTelemetry spans, when wanted, are in
:mod:`bus.otel`.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from random import getrandbits
from typing import Final

from bus.message.ids import random_hex

__all__ = ["child", "current", "new", "parse", "trace_id", "use"]

_FORMAT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE: Final = "0" * 32
_ZERO_PARENT: Final = "0" * 16

_CURRENT: ContextVar[str | None] = ContextVar("busgate_traceparent", default=None)


def parse(text: str | bytes | None) -> str | None:
    """A valid ``traceparent`` as the next hop sends it, or None (start a new one then).

    Version ``00`` must be exactly 55 characters; a later version is read by its first four
    parts (the W3C rule for versions this code does not know) and sent on as version ``00``;
    version ``ff``, all-zero ids and upper-case hex are invalid.
    """
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    text = text.strip(" \t")
    found = _FORMAT.match(text)
    if found is None:
        return None
    version, trace, parent, flags = found.groups()
    if version == "ff" or trace == _ZERO_TRACE or parent == _ZERO_PARENT:
        return None
    if version == "00":
        return text if len(text) == 55 else None
    if len(text) > 55 and text[55] != "-":
        return None
    return f"00-{trace}-{parent}-{flags}"


def new() -> str:
    """A new trace: random trace and parent ids, sampled.

    The ids come from :func:`random.getrandbits`, as OpenTelemetry's SDK makes them: they must
    be unique, not secret, and every gateway request without a traceparent pays for this (one
    draw of 192 bits as hex: half the cost of formatting two numbers to a width).
    """
    text = getrandbits(192).to_bytes(24, "big").hex()
    trace, parent = text[:32], text[32:]
    if trace == _ZERO_TRACE or parent == _ZERO_PARENT:
        return new()  # all-zero ids are invalid (one draw in 2**64): draw again
    return f"00-{trace}-{parent}-01"


def child(parent: str, span_id: str | None = None) -> str:
    """The traceparent of a hop below ``parent``: same trace id and flags, a new parent id
    (``span_id``, 16 hex digits, else random: from the message ids' pool of random bytes,
    :func:`bus.message.ids.random_hex`, which costs a service's request less than a draw)."""
    return f"{parent[:36]}{span_id or random_hex(8)}{parent[52:]}"


def trace_id(traceparent: str) -> str:
    """The 32 hex digits of the trace id."""
    return traceparent[3:35]


def current() -> str | None:
    """The traceparent of the handler running now (requests made here carry it), or None."""
    return _CURRENT.get()


def use(traceparent: str | None) -> None:
    """Make ``traceparent`` the current one in this context (a service sets it per request,
    in a context of the request's own)."""
    _CURRENT.set(traceparent)
