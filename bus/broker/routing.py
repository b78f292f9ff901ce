"""The broker's routing tables, sans-I/O (``docs/PROTOCOL.md`` section 5).

Connections are plain integers chosen by the caller. The tables answer three questions and
know nothing of sockets, queues or time:

- **groups** (seed 000): which consumer of a group gets the next request
  (:meth:`Router.choose`, round-robin over the consumers, so competing consumers are balanced)
  and which get a message marked for all (:meth:`Router.consumers`);
- **publish/subscribe** (seed 001): which connections subscribed to a pattern that matches an
  event type (:meth:`Router.subscribers`);
- **direct mail** (seed 001): which connection holds a post office (:meth:`Router.office`).

Patterns and the rule that matches them live in :mod:`bus.discovery.topics` (clients need them
without the broker); this module re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from bus.discovery.topics import (
    INBOX_PREFIX,
    MATCH_CACHE,
    MAX_NAME,
    check_pattern,
    match_tokens,
    matches,
)
from bus.errors import LimitError, RefusedError

__all__ = [
    "CACHE_BYTES",
    "CACHE_ENTRIES",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "MAX_NAME",
    "INBOX_PREFIX",
    "MATCH_CACHE",
    "Router",
    "check_pattern",
    "matches",
]

#: Subscriptions plus consumed groups one connection may hold, by default.
DEFAULT_MAX_SUBSCRIPTIONS: Final = 1000
#: The subscriber cache: at most this many event types and this many bytes of their names.
CACHE_ENTRIES: Final = 10_000
CACHE_BYTES: Final = 1 << 20


_NOBODY: Final[list[int]] = []


@dataclass
class _Group:
    consumers: list[int] = field(default_factory=list)
    turn: int = 0  # index of the consumer that gets the next request


@dataclass
class _Holder:
    """What one connection holds in the tables."""

    office: str
    patterns: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)


class Router:
    """Routing tables of one broker.

    Args:
        max_subscriptions: patterns plus consumed groups one connection may hold
            (default :data:`DEFAULT_MAX_SUBSCRIPTIONS`); the inbox does not count.
    """

    def __init__(self, max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS) -> None:
        self.max_subscriptions = max_subscriptions
        self._holders: dict[int, _Holder] = {}
        self._groups: dict[str, _Group] = {}
        self._offices: dict[str, list[int]] = {}
        self._exact: dict[str, set[int]] = {}  # pattern without wildcards, 2+ tokens
        self._major: dict[str, set[int]] = {}  # single-token pattern: major type
        self._wild: dict[str, tuple[tuple[str, ...], set[int]]] = {}  # patterns with * or >
        # event type -> subscribers (only types someone receives); emptied by every
        # subscription change (a link's end included), and when it reaches CACHE_ENTRIES types
        # or CACHE_BYTES of names
        self._cache: dict[str, list[int]] = {}
        self._cache_bytes = 0
        # event types nobody receives (journal-only confirms, junk): kept apart, with the same
        # bounds and emptied by the same changes, so a flood of made-up types evicts none of
        # the types someone receives
        self._nobody: set[str] = set()
        self._nobody_bytes = 0
        #: Counts changes of the subscribed patterns, so a reader can tell it must look again.
        self.pattern_version = 0

    # -- connections -------------------------------------------------------------------------

    def add_connection(self, conn: int, office: str, inbox: str) -> None:
        """Register an authenticated connection, its post office and its inbox group.

        Args:
            conn: the connection's number (unique while it is registered).
            office: the post office name it authenticated as.
            inbox: its reply group; the connection becomes its only consumer.

        Raises:
            RefusedError: the inbox group already has a consumer.
        """
        if self._groups.get(inbox):
            raise RefusedError(f"inbox {inbox!r} is already in use")
        self._holders[conn] = _Holder(office)
        self._offices.setdefault(office, []).append(conn)
        self._join(conn, inbox)
        self._holders[conn].groups.add(inbox)

    def remove_connection(self, conn: int) -> None:
        """Forget a connection and everything it held (idempotent)."""
        holder = self._holders.pop(conn, None)
        if holder is None:
            return
        for pattern in holder.patterns:
            self._drop_pattern(conn, pattern)
        for group in holder.groups:
            self._leave(conn, group)
        holders = self._offices.get(holder.office, [])
        if conn in holders:
            holders.remove(conn)
        if not holders:
            self._offices.pop(holder.office, None)

    @property
    def connections(self) -> int:
        """Number of registered connections."""
        return len(self._holders)

    def office_of(self, conn: int) -> str:
        """The post office name a connection authenticated as."""
        return self._holders[conn].office

    def holdings(self, conn: int) -> tuple[str, set[str], set[str]] | None:
        """A connection's post office, subscription patterns and groups (inbox included), or
        ``None`` for a connection not registered (copies: the caller may keep them)."""
        holder = self._holders.get(conn)
        if holder is None:
            return None
        return holder.office, set(holder.patterns), set(holder.groups)

    # -- groups ------------------------------------------------------------------------------

    def consume(self, conn: int, group: str) -> bool:
        """Make a connection a competing consumer of a group.

        Returns:
            False if it already consumed that group (nothing changes).

        Raises:
            ConfigError: a bad group name.
            RefusedError: the group is an inbox (only its owner consumes it).
            LimitError: ``max_subscriptions`` reached (``limit="max_subscriptions"``).
        """
        check_pattern(group)
        if group.startswith(INBOX_PREFIX):
            raise RefusedError(f"group {group!r} is an inbox")
        holder = self._holders[conn]
        if group in holder.groups:
            return False
        self._check_room(holder)
        holder.groups.add(group)
        self._join(conn, group)
        return True

    def leave(self, conn: int, group: str) -> bool:
        """Stop consuming a group. Returns False if the connection did not consume it."""
        holder = self._holders[conn]
        if group not in holder.groups or group.startswith(INBOX_PREFIX):
            return False
        holder.groups.discard(group)
        self._leave(conn, group)
        return True

    @property
    def group_table(self) -> dict[str, Any]:
        """Group name -> its entry (``consumers``, a list of connection numbers, and ``turn``),
        the table :meth:`choose` reads: the C routing path (``bus.native._hotpath.route``) reads and
        turns it the same way. Not to be changed through this."""
        return self._groups

    def choose(self, group: str) -> int | None:
        """The consumer that gets the next message of a group (round-robin), or None."""
        entry = self._groups.get(group)
        if not entry or not entry.consumers:
            return None
        consumers = entry.consumers
        turn = entry.turn % len(consumers)
        entry.turn = turn + 1
        return consumers[turn]

    def consumers(self, group: str) -> list[int]:
        """Every consumer of a group (for a message marked ``Flag.ALL``)."""
        entry = self._groups.get(group)
        return list(entry.consumers) if entry else []

    def groups(self) -> dict[str, int]:
        """Each group with at least one consumer, and how many (inboxes left out)."""
        return {
            name: len(entry.consumers)
            for name, entry in self._groups.items()
            if entry.consumers and not name.startswith(INBOX_PREFIX)
        }

    def _join(self, conn: int, group: str) -> None:
        self._groups.setdefault(group, _Group()).consumers.append(conn)

    def _leave(self, conn: int, group: str) -> None:
        entry = self._groups.get(group)
        if entry is None or conn not in entry.consumers:
            return
        index = entry.consumers.index(conn)
        entry.consumers.pop(index)
        if index < entry.turn:
            entry.turn -= 1  # keep the rotation fair for the consumers after it
        if not entry.consumers:
            del self._groups[group]

    # -- publish / subscribe -----------------------------------------------------------------

    def subscribe(self, conn: int, pattern: str) -> bool:
        """Subscribe a connection to a pattern.

        Returns:
            False if it already held that pattern.

        Raises:
            ConfigError: a malformed pattern.
            LimitError: ``max_subscriptions`` reached.
        """
        tokens = check_pattern(pattern)
        holder = self._holders[conn]
        if pattern in holder.patterns:
            return False
        self._check_room(holder)
        holder.patterns.add(pattern)
        self.pattern_version += 1
        self._clear_cache()
        if "*" in tokens or ">" in tokens:
            self._wild.setdefault(pattern, (tokens, set()))[1].add(conn)
        elif len(tokens) == 1:
            self._major.setdefault(pattern, set()).add(conn)
        else:
            self._exact.setdefault(pattern, set()).add(conn)
        return True

    def unsubscribe(self, conn: int, pattern: str) -> bool:
        """Drop one subscription. Returns False if the connection did not hold it."""
        holder = self._holders[conn]
        if pattern not in holder.patterns:
            return False
        holder.patterns.discard(pattern)
        self._drop_pattern(conn, pattern)
        return True

    def subscribers(self, event_type: str) -> list[int]:
        """Connections with at least one pattern matching the type, each once, in order.

        The list is shared with a cache: read it, do not change it.
        """
        cached = self._cache.get(event_type)
        if cached is not None:
            return cached
        if event_type in self._nobody:
            return _NOBODY
        found: set[int] = set()
        tokens = event_type.split(".")
        found.update(self._exact.get(event_type, ()))
        found.update(self._major.get(tokens[0], ()))
        for pattern_tokens, conns in self._wild.values():
            if match_tokens(pattern_tokens, tokens):
                found.update(conns)
        if not found:  # nobody listens: remembered apart, so junk cannot evict the hot types
            if len(self._nobody) >= CACHE_ENTRIES or self._nobody_bytes >= CACHE_BYTES:
                self._nobody.clear()
                self._nobody_bytes = 0
            self._nobody.add(event_type)
            self._nobody_bytes += len(event_type)
            return _NOBODY
        if len(self._cache) >= CACHE_ENTRIES or self._cache_bytes >= CACHE_BYTES:
            self._clear_cache()
        result = self._cache[event_type] = sorted(found)
        self._cache_bytes += len(event_type)
        return result

    def cache_size(self) -> tuple[int, int]:
        """Event types in the subscriber cache, and the bytes of their names."""
        return len(self._cache), self._cache_bytes

    def nobody_size(self) -> tuple[int, int]:
        """Event types remembered as received by nobody, and the bytes of their names."""
        return len(self._nobody), self._nobody_bytes

    def _clear_cache(self) -> None:
        self._cache.clear()
        self._cache_bytes = 0
        self._nobody.clear()
        self._nobody_bytes = 0

    def subscription_count(self) -> int:
        """Total patterns held by all connections."""
        return sum(len(holder.patterns) for holder in self._holders.values())

    def patterns(self) -> dict[str, frozenset[str]]:
        """Every subscribed pattern and the post offices of the connections holding it (the
        MOP listener asks MOP post offices for what the bus subscribes to, PROTOCOL.md 11.4)."""
        found: dict[str, set[str]] = {}
        for holder in self._holders.values():
            for pattern in holder.patterns:
                found.setdefault(pattern, set()).add(holder.office)
        return {pattern: frozenset(offices) for pattern, offices in found.items()}

    def _drop_pattern(self, conn: int, pattern: str) -> None:
        self.pattern_version += 1
        self._clear_cache()
        for table in (self._exact, self._major):
            conns = table.get(pattern)
            if conns is not None:
                conns.discard(conn)
                if not conns:
                    del table[pattern]
        wild = self._wild.get(pattern)
        if wild is not None:
            wild[1].discard(conn)
            if not wild[1]:
                del self._wild[pattern]

    def _check_room(self, holder: _Holder) -> None:
        held = len(holder.patterns) + len(holder.groups) - 1  # the inbox does not count
        if held >= self.max_subscriptions:
            raise LimitError("max_subscriptions", held + 1, self.max_subscriptions)

    # -- direct mail -------------------------------------------------------------------------

    def office(self, name: str) -> int | None:
        """The connection that receives mail for a post office (the newest one), or None."""
        holders = self._offices.get(name)
        return holders[-1] if holders else None

    def offices(self) -> dict[str, int]:
        """Each connected post office and how many connections it has."""
        return {name: len(conns) for name, conns in self._offices.items()}
