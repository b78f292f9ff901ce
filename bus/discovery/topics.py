"""Subscription patterns and the rule that matches them to event types (PROTOCOL.md 5.3).

Pure functions, shared by the broker's routing tables (:mod:`bus.broker.routing`) and by every
client that filters what it receives (:mod:`bus.asyncio.subscription`, the NATS transport, the
MOP bridge), so a client does not import the broker to check a pattern.

Patterns are dot-separated tokens. ``*`` matches exactly one token and ``>`` (last token only)
matches one or more tokens. A single token without wildcards is a MOP *major* type: it matches
the type itself and every ``major.minor`` type under it (``sensor`` = ``sensor`` + ``sensor.>``).
"""

from __future__ import annotations

import functools
from typing import Final

from bus.errors import ConfigError

__all__ = [
    "INBOX_PREFIX",
    "MATCH_CACHE",
    "MAX_NAME",
    "check_pattern",
    "match_tokens",
    "matches",
    "overlaps",
    "token_patterns",
    "tokens_overlap",
]

#: Prefix of the reply groups the broker gives each connection at connect time.
INBOX_PREFIX: Final = "_INBOX."
#: The longest event type, group, pattern or mailbox name the broker routes (PROTOCOL.md 5.7).
MAX_NAME: Final = 255
_MAX_NAME: Final = MAX_NAME

#: (pattern, event type) pairs whose :func:`matches` answer is remembered.
MATCH_CACHE: Final = 4096


def check_pattern(pattern: str) -> tuple[str, ...]:
    """Split a subscription pattern into tokens, refusing a malformed one.

    Args:
        pattern: e.g. ``sensor``, ``sensor.temp``, ``sensor.*``, ``>``.

    Returns:
        The tokens.

    Raises:
        ConfigError: empty pattern or token, ``>`` not last, or a wildcard inside a token.
    """
    if not pattern or len(pattern) > _MAX_NAME:
        raise ConfigError(f"bad pattern {pattern!r}: must be 1..{_MAX_NAME} characters")
    tokens = tuple(pattern.split("."))
    for index, token in enumerate(tokens):
        if not token:
            raise ConfigError(f"bad pattern {pattern!r}: empty token")
        if token == ">" and index != len(tokens) - 1:
            raise ConfigError(f"bad pattern {pattern!r}: '>' must be the last token")
        if token not in ("*", ">") and ("*" in token or ">" in token):
            raise ConfigError(f"bad pattern {pattern!r}: wildcard inside a token")
    return tokens


def match_tokens(pattern: tuple[str, ...], tokens: list[str]) -> bool:
    """Whether a pattern, split into tokens, matches an event type split into tokens."""
    if len(pattern) == 1 and pattern[0] not in ("*", ">"):
        return tokens[0] == pattern[0]  # MOP major type: the major and all its minors
    for index, want in enumerate(pattern):
        if want == ">":
            return len(tokens) > index
        if index >= len(tokens) or (want != "*" and want != tokens[index]):
            return False
    return len(tokens) == len(pattern)


@functools.lru_cache(maxsize=MATCH_CACHE)
def matches(pattern: str, event_type: str) -> bool:
    """Whether a subscription pattern matches an event type (the same rule as the broker).

    A client asks it for each event it receives and each pattern it holds, so the answers are
    remembered (:data:`MATCH_CACHE` pairs, least recently used first out).

    Args:
        pattern: a valid pattern (see :func:`check_pattern`).
        event_type: the event's type (its GRP), e.g. ``sensor.temp``.

    Returns:
        True when an event of that type is delivered to that subscription.
    """
    return match_tokens(tuple(pattern.split(".")), event_type.split("."))


def token_patterns(pattern: str) -> list[tuple[str, ...]]:
    """A pattern as token patterns of plain ``*``/``>`` rules: a major type ``x`` is ``x`` and
    ``x.>``.

    Raises:
        ConfigError: a malformed pattern.
    """
    tokens = check_pattern(pattern)
    if len(tokens) == 1 and tokens[0] not in ("*", ">"):
        return [tokens, (tokens[0], ">")]
    return [tokens]


def tokens_overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether some type matches both token patterns (``*`` one token, a last ``>`` more)."""
    if not a or not b:
        return not a and not b
    if a[0] == ">" or b[0] == ">":
        return True  # the other has a token here, and ">" takes it and anything after
    if a[0] == "*" or b[0] == "*" or a[0] == b[0]:
        return tokens_overlap(a[1:], b[1:])
    return False


@functools.lru_cache(maxsize=MATCH_CACHE)
def overlaps(a: str, b: str) -> bool:
    """Whether some event type matches both patterns (a subscriber of ``a`` gets some of the
    events a subscriber of ``b`` gets: ``sensor.*`` and ``*.temp`` overlap, ``sensor`` and
    ``pump.*`` do not).

    Raises:
        ConfigError: a malformed pattern.
    """
    return any(tokens_overlap(x, y) for x in token_patterns(a) for y in token_patterns(b))
