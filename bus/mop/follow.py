"""What the MOP listener asks of each post office so that MOP publications reach the bus
(docs/PROTOCOL.md section 11.4), sans-I/O.

MOP's ``PostOffice`` forwards a publication to its central post office only when a subscription
names its source: a ``manage.subscribe`` with ``source`` (``po.mailbox``) and ``type`` (``major``
or ``major.minor``) puts the central post office's mailbox in the bucket ``source.type``, and a
publication of ``from`` F and type T goes to the buckets ``F.T`` and ``F.<T without its last
token>``. There is no wildcard for the source or the type. So the listener subscribes, for every
*source* it knows of a post office, to every MOP *type* the bus subscribes to:

- the types: each bus subscription pattern's literal tokens before its first wildcard
  (``sensor.temp`` -> ``sensor.temp``, ``sensor.*`` and ``sensor.>`` -> ``sensor``); a pattern
  that starts with a wildcard (``>``, ``*.temp``) names no type MOP can subscribe to, and the
  system's types (``OAM.*``, ``_INBOX.*``) are left out;
  and the types the operator names (``BUSGATE_MOP_TYPES``) are always asked for, so what MOP
  publishes reaches subscribers whose patterns name no type (``>``: the Object System bridge,
  ``busgate listen '>'``);
- the sources: the mailboxes the operator names (``BUSGATE_MOP_SOURCES``), and those a post
  office is seen to use (the ``from`` of what it sends, the ``source`` of subscriptions to it),
  never its ``po`` mailbox; at most ``max_sources`` per post office;
- at most ``max_subscriptions`` (source, type) pairs per post office, the rest left out (sorted,
  so the same ones every time) and reported.

:class:`Follower` keeps what it asked of each post office (across its links: a post office that
reconnects keeps its table, one that restarted has none) and gives the :class:`Change` list that
brings a post office to what is wanted now. Unsubscribing a pair that another MOP subscription
also holds would cut that one too (the post office keeps one entry per pair for the central
post office, whoever asked), so the driver says which pairs others hold (``held``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_MAX_SOURCES",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "REQUESTOR",
    "Change",
    "Follower",
    "mop_type",
]

log = logging.getLogger(__name__)

#: Source mailboxes followed per post office, at most.
DEFAULT_MAX_SOURCES: Final = 64
#: (source, type) subscriptions asked of one post office, at most.
DEFAULT_MAX_SUBSCRIPTIONS: Final = 1024
#: The ``requestor`` of the listener's own subscriptions: the bus, as a mailbox of central.
REQUESTOR: Final = "central.bus"
_SYSTEM: Final = frozenset({"OAM", "_INBOX"})
_WILDCARDS: Final = frozenset({"*", ">"})


def mop_type(pattern: str) -> str | None:
    """The MOP type that brings what a bus pattern matches (its literal tokens before the first
    wildcard), or None when there is none (a leading wildcard, a system type)."""
    literal: list[str] = []
    for token in pattern.split("."):
        if token in _WILDCARDS:
            break
        literal.append(token)
    if not literal or literal[0] in _SYSTEM:
        return None
    return ".".join(literal)


@dataclass(frozen=True, order=True)
class Change:
    """A ``manage.subscribe`` (``subscribe``) or ``manage.unsubscribe`` to send a post office."""

    subscribe: bool
    source: str
    type: str


def _office(address: str) -> str:
    return address.partition(".")[0]


class Follower:
    """The MOP subscriptions the listener holds at each post office.

    Args:
        sources: ``po.mailbox`` addresses to follow from the start (the operator's).
        types: MOP types (``major`` or ``major.minor``) always asked for (the operator's).
        max_sources: source mailboxes per post office, at most.
        max_subscriptions: (source, type) pairs per post office, at most.

    Raises:
        ValueError: a source is not ``po.mailbox``, or a type is empty.
    """

    def __init__(
        self,
        sources: Iterable[str] = (),
        *,
        types: Iterable[str] = (),
        max_sources: int = DEFAULT_MAX_SOURCES,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
    ) -> None:
        self.max_sources = max_sources
        self.max_subscriptions = max_subscriptions
        self._sources: dict[str, list[str]] = {}  # post office -> its source mailboxes, in order
        self._always = frozenset(types)
        if any(not t or t.startswith(".") or t.endswith(".") for t in self._always):
            raise ValueError(f"a MOP type is major or major.minor, not {sorted(self._always)}")
        self._types: frozenset[str] = self._always
        self._asked: dict[str, set[tuple[str, str]]] = {}  # what each post office was asked
        self._full: set[str] = set()  # post offices told once that they hit a limit
        for source in sources:
            office, _, mailbox = source.partition(".")
            if not office or not mailbox or "." in mailbox:
                raise ValueError(f"a MOP source is po.mailbox, not {source!r}")
            self.learn(source)

    @property
    def types(self) -> frozenset[str]:
        """The MOP types followed (from the bus's patterns, and the operator's)."""
        return self._types

    def sources(self, office: str) -> list[str]:
        """The source mailboxes followed at a post office."""
        return list(self._sources.get(office, ()))

    def follow(self, patterns: Iterable[str]) -> bool:
        """The bus now subscribes to ``patterns``. Returns True when the types changed."""
        types = self._always | {t for p in patterns if (t := mop_type(p)) is not None}
        changed = types != self._types
        self._types = types
        return changed

    def learn(self, address: str) -> bool:
        """A mailbox ``po.mailbox`` seen in use. Returns True when it is a new source."""
        office, _, mailbox = address.partition(".")
        if not office or not mailbox or mailbox == "po" or office == "central":
            return False
        known = self._sources.setdefault(office, [])
        if address in known:
            return False
        if len(known) >= self.max_sources:
            self._once(office, f"more than {self.max_sources} source mailboxes")
            return False
        known.append(address)
        return True

    def restarted(self, office: str) -> None:
        """The post office started again: it holds none of our subscriptions any more."""
        self._asked.pop(office, None)

    def asked(self, source: str, type_: str) -> bool:
        """Whether the listener holds (``source``, ``type_``) at the source's post office."""
        return (source, type_) in self._asked.get(_office(source), ())

    def wanted(self, office: str) -> set[tuple[str, str]]:
        """The (source, type) pairs a post office should hold for the bus now."""
        pairs = sorted((s, t) for s in self._sources.get(office, ()) for t in self._types)
        if len(pairs) > self.max_subscriptions:
            self._once(office, f"more than {self.max_subscriptions} subscriptions")
            pairs = pairs[: self.max_subscriptions]
        return set(pairs)

    def changes(
        self, office: str, held: Callable[[str, str], bool] = lambda s, t: False
    ) -> list[Change]:
        """What to send ``office`` to bring it to :meth:`wanted`; it then counts as sent.

        Args:
            office: the post office.
            held: whether another MOP subscription holds (source, type) at it: such a pair is
                never unsubscribed (that would cut the other one too), only forgotten.
        """
        wanted = self.wanted(office)
        asked = self._asked.setdefault(office, set())
        gone = sorted(asked - wanted)
        new = sorted(wanted - asked)
        self._asked[office] = wanted
        out = [Change(False, s, t) for s, t in gone if not held(s, t)]
        return out + [Change(True, s, t) for s, t in new]

    def offices(self) -> list[str]:
        """Post offices with sources known."""
        return sorted(self._sources)

    def _once(self, office: str, what: str) -> None:
        if office not in self._full:
            self._full.add(office)
            log.warning("MOP post office %s: %s to follow; the rest is left out", office, what)
