"""Object System subscriptions, sans-I/O (seed 003; docs/PROTOCOL.md section 6).

What a client asks for in ``routing/subscribe`` (:func:`parse_subscription` gives a
:class:`Subscription`) and the filters the router applies per recipient with it: the rule engine
(:func:`passes_rules`: ``*`` types, ``@`` events, ``#`` natures, ``!`` negation, as Objectoplex's
``rule_engine.py``), the ``types`` filter of content objects, and the facts of an object those
filters look at (:class:`Facts`, read once per routed object).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NamedTuple

from bus.errors import BusError
from bus.objects.codec import BusinessObject

__all__ = [
    "Facts",
    "ReceiveMode",
    "Subscription",
    "SubscriptionError",
    "parse_subscription",
    "passes_rules",
    "passes_types",
    "rules_pass",
]


class ReceiveMode(StrEnum):
    """The ``receive_mode`` of a ``routing/subscribe`` (spec 2011; ``receive-mode`` from 2012)."""

    NONE = "none"
    ALL = "all"
    NO_ECHO = "no_echo"
    EVENTS_ONLY = "events_only"


# Each receive mode as the later rule list (Objectoplex LegacySubscriptionMiddleware) and echo.
_MODE_RULES: Final[dict[ReceiveMode, tuple[tuple[str, ...], bool]]] = {
    ReceiveMode.NONE: ((), False),
    ReceiveMode.ALL: (("*",), True),
    ReceiveMode.NO_ECHO: (("*",), False),
    ReceiveMode.EVENTS_ONLY: (("@*",), False),
}


class SubscriptionError(BusError):
    """A ``routing/subscribe`` object is invalid (answered with an error object)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Subscription:
    """What a ``routing/subscribe`` asks for.

    Attributes:
        rules: the rule list (``*`` types, ``@`` events, ``#`` natures, ``!`` negation).
        echo: whether the client receives its own objects (receive mode ``all`` only).
        types: content types for content objects (``None``: all), trailing ``*`` wildcards.
        routing_id: the routing id asked for, if any.
        extra_ids: ``routing-ids``, extra ids the client receives ``to`` objects for.
        server: ``role: server``.
    """

    rules: tuple[str, ...] = ("*",)
    echo: bool = True
    types: tuple[str, ...] | None = None
    routing_id: str | None = None
    extra_ids: tuple[str, ...] = ()
    server: bool = False


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise SubscriptionError(f"{what} must be a string or a list of strings")


def parse_subscription(metadata: dict[str, Any]) -> Subscription:
    """Read a ``routing/subscribe`` object's metadata.

    ``subscriptions`` (a rule list, or ``"all"`` / ``"none"``, or a string of comma-separated
    rules) wins over ``receive_mode``; without either the mode is ``all``. ``echo`` (a boolean,
    what Objectoplex's client library sends with rule lists) says whether the client receives
    its own objects; without it only receive mode ``all`` echoes. ``types`` (``"all"``,
    ``"none"`` or a list) applies to content objects only.

    Raises:
        SubscriptionError: an unknown mode or a value of the wrong type.
    """
    server = metadata.get("role") == "server"
    mode_text = metadata.get("receive_mode", metadata.get("receive-mode", "all"))
    try:
        mode = ReceiveMode(mode_text)
    except ValueError as exc:
        raise SubscriptionError(f"unknown receive_mode {mode_text!r}") from exc
    rules, echo = _MODE_RULES[mode]
    if "subscriptions" in metadata:
        rules, echo = _rule_list(metadata["subscriptions"]), False
    wanted_echo = metadata.get("echo")
    if wanted_echo is not None:
        if not isinstance(wanted_echo, bool):
            raise SubscriptionError("echo must be true or false")
        echo = wanted_echo
    types_value = metadata.get("types", "all")
    types: tuple[str, ...] | None
    if types_value == "all":
        types = None
    elif types_value == "none":
        types = ()
    else:
        types = _strings(types_value, "types")
    routing_id = metadata.get("routing-id")
    if routing_id is not None and not isinstance(routing_id, str):
        raise SubscriptionError("routing-id must be a string")
    extra = _strings(metadata.get("routing-ids", []), "routing-ids")
    if server:
        rules, echo, types = ("*",), False, None
    return Subscription(rules, echo, types, routing_id, extra, server)


def _rule_list(wanted: Any) -> tuple[str, ...]:
    """``subscriptions``: a list of rules, ``"all"``, ``"none"``, or rules in one string."""
    if isinstance(wanted, str):
        named = {"all": ("*",), "none": ()}.get(wanted.strip())
        if named is not None:
            return named
        return tuple(rule.strip() for rule in wanted.split(",") if rule.strip())
    return _strings(wanted, "subscriptions")


def _matches(pattern: str, value: str) -> bool:
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern


@functools.lru_cache(maxsize=4096)  # every routed object's type: a flood of new ones is bounded
def _base_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


class Facts(NamedTuple):
    """What the filters look at, read once per routed object rather than once per recipient
    (a named tuple: one is made per routed object)."""

    event: str | None
    base_type: str | None
    natures: tuple[str, ...]
    to: tuple[str, ...] | None
    announcement: bool

    @classmethod
    def of(cls, obj: BusinessObject) -> Facts:
        return cls.of_metadata(obj.metadata)

    @classmethod
    def of_metadata(cls, metadata: dict[str, Any]) -> Facts:
        # read directly, not through BusinessObject's properties: this runs per routed object
        natures = metadata.get("natures")
        nature_list: tuple[str, ...] = ()
        if isinstance(natures, list):
            nature_list = tuple(n for n in natures if isinstance(n, str))
        elif isinstance(natures, str):  # one nature given bare, as Objectoplex's tests send it
            nature_list = (natures,)
        to = metadata.get("to")
        to_ids = None if to is None else tuple(to) if isinstance(to, list) else (to,)
        content_type = metadata.get("type")
        base = _base_type(content_type) if isinstance(content_type, str) else None
        event = metadata.get("event")
        if not isinstance(event, str):
            return cls(None, base, nature_list, to_ids, False)
        return cls(event, base, nature_list, to_ids, event.startswith("routing/announcement/"))


def passes_rules(obj: BusinessObject, rules: Sequence[str]) -> bool:
    """The subscription rule engine: the last matching rule decides; no match means no.

    ``*`` matches everything, ``@pattern`` an event, ``#pattern`` a nature, any other pattern
    the content type (parameters after ``;`` ignored); ``!`` in front negates; a trailing ``*``
    is a prefix wildcard (Objectoplex ``rule_engine.py`` and its pseudocode).
    """
    return rules_pass(Facts.of(obj), tuple(rules))


def rules_pass(facts: Facts, rules: tuple[str, ...]) -> bool:
    if rules == ("*",):
        return True  # receive modes all and no_echo, and every server link
    passed = False
    for rule in rules:
        negative = rule.startswith("!")
        body = rule[1:] if negative else rule
        if body.startswith("#"):
            hit = any(_matches(body[1:], nature) for nature in facts.natures)
        elif body.startswith("@"):
            hit = facts.event is not None and _matches(body[1:], facts.event)
        else:
            hit = body == "*" or (facts.base_type is not None and _matches(body, facts.base_type))
        if hit:
            passed = not negative
    return passed


def passes_types(facts: Facts, types: tuple[str, ...] | None) -> bool:
    # Type filters apply to content only: an event passes whatever its type.
    if types is None or facts.event is not None:
        return True
    base = facts.base_type
    return any(p == "*" or (base is not None and _matches(p, base)) for p in types)
