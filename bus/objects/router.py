"""The Object System router, sans-I/O (seed 003; docs/PROTOCOL.md section 6).

A :class:`Router` is one server of an Object System network. Drivers tell it about connections
(:meth:`Router.connect`, :meth:`Router.disconnect`) and the objects they bring
(:meth:`Router.receive`); every call returns a list of outputs: :class:`Deliver` (these bytes to
that connection) and :class:`Close` (close that connection). No sockets, no clock, no tasks.

What it does, as the original server (Objectoplex) and the specification say:

- every connection gets a routing id (assigned, or the one its subscription names);
- nothing is routed to a connection before it sends ``routing/subscribe``;
- ``route`` records the path (sender id, then each server's id); an object whose route already
  holds this server's id is dropped, and an object that comes back over another link of a looped
  topology is dropped by its (origin, id) key (a key seen again over the *same* link is a new
  object whose sender reused an id);
- ``to`` restricts delivery to the connections holding that routing id;
- ``receive_mode`` / ``receive-mode``, ``types`` and the later ``subscriptions`` rule list choose
  what a client receives;
- ``routing/subscribe/reply`` answers a subscription; ``routing/subscribe/notify`` (the seed's
  name) and ``routing/subscribe/notification`` (what Objectoplex and its client registry use)
  and ``routing/disconnect`` tell the network, with ``route`` = [the connection's id], so
  Objectoplex servers pass them on to their clients too; ``ping`` -> ``pong`` (also before
  subscribing); ``routing/neighbors`` -> reply;
- a ``pong`` answering this server's own keepalive :meth:`Router.ping` ends here and marks the
  connection as one that answers pings (:attr:`PeerInfo.answers_pings`), for the driver's
  keepalive policy;
- ``services/register`` / ``services/discovery`` keep a registry of named services;
- server links: a server subscribes with ``role: server`` and receives everything, but only on a
  connection the driver marked as allowed to (``connect(..., trusted=True)``: a link we opened,
  or a configured server peer) or one whose subscription carries the ``link_secret``; anyone
  else claiming the role gets an error object and receives nothing more than before (issue 19);
- several links to one server (a double link) carry one copy of each object, and announce the
  server once.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

import orjson

from bus.errors import BusError, LimitError
from bus.ids import new_id
from bus.objects.codec import BusinessObject, encode_object

__all__ = [
    "Close",
    "Deliver",
    "Output",
    "PeerInfo",
    "ReceiveMode",
    "Router",
    "Subscription",
    "SubscriptionError",
    "parse_subscription",
    "passes_rules",
]

log = logging.getLogger(__name__)

DEFAULT_DEDUPE_WINDOW: Final = 4096
#: The seed's name for the notice of a new subscription, and Objectoplex's (both are sent).
NOTIFY_EVENTS: Final = ("routing/subscribe/notify", "routing/subscribe/notification")
_LOCAL: Final = "<this server>"  # the "link" of an object this server originated


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


@dataclass(frozen=True, slots=True)
class Deliver:
    """Send ``data`` (the wire bytes of ``obj``) to connection ``conn``."""

    conn: Hashable
    obj: BusinessObject
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close connection ``conn`` (after the outputs before this one are written)."""

    conn: Hashable
    reason: str


Output = Deliver | Close


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


def _base_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the filters look at, read once per routed object rather than once per recipient."""

    event: str | None
    base_type: str | None
    natures: tuple[str, ...]
    to: tuple[str, ...] | None
    announcement: bool

    @classmethod
    def of(cls, obj: BusinessObject) -> _Facts:
        natures = obj.metadata.get("natures")
        nature_list: tuple[str, ...] = ()
        if isinstance(natures, list):
            nature_list = tuple(n for n in natures if isinstance(n, str))
        elif isinstance(natures, str):  # one nature given bare, as Objectoplex's tests send it
            nature_list = (natures,)
        to = obj.metadata.get("to")
        to_ids = None if to is None else tuple(to) if isinstance(to, list) else (to,)
        base = _base_type(obj.type) if obj.type is not None else None
        event = obj.event
        announcement = event is not None and event.startswith("routing/announcement/")
        return cls(event, base, nature_list, to_ids, announcement)


def passes_rules(obj: BusinessObject, rules: Sequence[str]) -> bool:
    """The subscription rule engine: the last matching rule decides; no match means no.

    ``*`` matches everything, ``@pattern`` an event, ``#pattern`` a nature, any other pattern
    the content type (parameters after ``;`` ignored); ``!`` in front negates; a trailing ``*``
    is a prefix wildcard (Objectoplex ``rule_engine.py`` and its pseudocode).
    """
    return _rules_pass(_Facts.of(obj), tuple(rules))


def _rules_pass(facts: _Facts, rules: tuple[str, ...]) -> bool:
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


def _passes_types(facts: _Facts, types: tuple[str, ...] | None) -> bool:
    # Type filters apply to content only: an event passes whatever its type.
    if types is None or facts.event is not None:
        return True
    base = facts.base_type
    return any(p == "*" or (base is not None and _matches(p, base)) for p in types)


@dataclass
class _Peer:
    conn: Hashable
    routing_id: str
    subscribed: bool = False
    server: bool = False
    linked: bool = False  # we opened this link and sent our subscription
    trusted: bool = False  # may subscribe with role: server (a link we opened, a server peer)
    echo: bool = False
    rules: tuple[str, ...] = ()
    types: tuple[str, ...] | None = None
    extra_ids: tuple[str, ...] = ()
    services: set[str] = field(default_factory=set)
    ping_id: str | None = None  # our keepalive ping waiting for its pong
    answers_pings: bool = False

    def has_any(self, ids: tuple[str, ...]) -> bool:
        return any(i == self.routing_id or i in self.extra_ids for i in ids)


@dataclass(frozen=True)
class PeerInfo:
    """A read-only view of one connection, for drivers, tests and ``routing/neighbors``."""

    conn: Hashable
    routing_id: str
    subscribed: bool
    server: bool
    extra_ids: tuple[str, ...]
    answers_pings: bool = False


class Router:
    """One Object System server.

    Args:
        routing_id: this server's routing id (a new UUID when ``None``).
        name: the ``name`` this server gives in its own subscriptions to linked servers.
        dedupe_window: how many (origin, id) keys of objects received over server links are
            remembered, with the link each came over, to drop the second copy that a looped
            topology brings by another link (default 4096).
        link_secret: a secret shared by one operator's servers: our server subscriptions carry
            it (``link-secret``), and a connection whose server subscription carries it may be
            a server link wherever it comes from (``None``: no such credential).
    """

    def __init__(
        self,
        routing_id: str | None = None,
        *,
        name: str = "busgate",
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        link_secret: str | None = None,
    ) -> None:
        self.routing_id = routing_id or new_id()
        self.name = name
        self.link_secret = link_secret or None
        self._peers: dict[Hashable, _Peer] = {}
        self._services: dict[str, dict[str, Hashable | None]] = {}  # name -> routing id -> via
        self._dedupe_window = max(1, dedupe_window)
        self._seen: dict[tuple[str, str], Hashable] = {}  # (origin, id) -> link, oldest first

    # ------------------------------------------------------------------ queries

    def peer(self, conn: Hashable) -> PeerInfo | None:
        """The view of connection ``conn``, or ``None`` if unknown."""
        p = self._peers.get(conn)
        if p is None:
            return None
        return PeerInfo(p.conn, p.routing_id, p.subscribed, p.server, p.extra_ids, p.answers_pings)

    def peers(self) -> list[PeerInfo]:
        """Every connection, in connection order."""
        return [info for conn in self._peers if (info := self.peer(conn)) is not None]

    def services(self, name: str | None = None) -> list[tuple[str, str]]:
        """Known services as (name, routing id), sorted; only ``name``'s when given."""
        return sorted(
            (svc, rid)
            for svc, holders in self._services.items()
            if name is None or svc == name
            for rid in holders
        )

    # ------------------------------------------------------------------ connections

    def connect(self, conn: Hashable, *, link: bool = False, trusted: bool = False) -> list[Output]:
        """A new connection.

        Args:
            conn: the driver's id of the connection.
            link: we opened it to another server and subscribe to it (implies ``trusted``).
            trusted: the connection may subscribe with ``role: server`` (a configured server
                peer). Any other connection claiming the role is refused.

        Returns:
            For a link, the delivery of our ``role: server`` subscription; otherwise nothing.
        """
        peer = _Peer(conn, new_id(), server=link, linked=link, trusted=link or trusted)
        self._peers[conn] = peer
        return [self._own_subscription(peer)] if link else []

    def disconnect(self, conn: Hashable) -> list[Output]:
        """Connection ``conn`` is gone (any reason). Tells the network with ``routing/disconnect``.

        Unknown connections are ignored, so drivers may call this more than once. When another
        link to the same server remains (a double link), the server is not gone: nothing is
        announced, and the services learnt over this link are kept, reached by the other one.
        """
        peer = self._peers.pop(conn, None)
        if peer is None:
            return []
        twin = self._twin(peer)
        if twin is not None:
            self._move_via(conn, twin.conn)
            return []
        self._forget_services(peer.routing_id)
        self._forget_via(conn)
        if not peer.subscribed:
            return []
        notice: dict[str, Any] = {"event": "routing/disconnect", "routing-id": peer.routing_id}
        if peer.extra_ids:
            notice["routing-ids"] = list(peer.extra_ids)
        return self._route_own(notice, origin=peer.routing_id)

    def _twin(self, peer: _Peer) -> _Peer | None:
        """Another subscribed connection with the same routing id (a second link to a server)."""
        for other in self._peers.values():
            if other is not peer and other.subscribed and other.routing_id == peer.routing_id:
                return other
        return None

    def reject(self, conn: Hashable, error: BusError) -> list[Output]:
        """Refuse a connection's input: an ``error`` object, a close, and the disconnect notice.

        Drivers call this when the codec raises (malformed or oversized objects).
        """
        if conn not in self._peers:
            return []
        reply: dict[str, Any] = {"event": "error", "error": str(error)}
        reply["code"] = "limit" if isinstance(error, LimitError) else "malformed"
        outputs: list[Output] = [self._deliver(conn, BusinessObject(reply))]
        outputs.append(Close(conn, str(error)))
        return outputs + self.disconnect(conn)

    def ping(self, conn: Hashable) -> list[Output]:
        """A keepalive ``ping`` for connection ``conn`` (servers answer with ``pong``).

        The ``pong`` that answers it (``in-reply-to`` = its id) ends at this server and sets
        :attr:`PeerInfo.answers_pings` for the connection.
        """
        peer = self._peers.get(conn)
        if peer is None:
            return []
        peer.ping_id = new_id()
        ping = {"event": "ping", "id": peer.ping_id, "routing-id": self.routing_id}
        return [self._deliver(conn, BusinessObject(ping))]

    def announce(self) -> list[Output]:
        """``routing/announcement/neighbors`` for the linked servers (Objectoplex: every 5 min)."""
        announcement = {
            "event": "routing/announcement/neighbors",
            "node": self.routing_id,
            "neighbors": self._neighbors(),
        }
        return self._route_own(announcement)

    def _neighbors(self) -> list[dict[str, str]]:
        return [
            {"routing-id": p.routing_id, "role": "server" if p.server else "client"}
            for p in self._peers.values()
            if p.subscribed
        ]

    # ------------------------------------------------------------------ objects

    def receive(self, conn: Hashable, obj: BusinessObject) -> list[Output]:
        """An object arrived from connection ``conn``.

        Returns:
            What to send where. Never raises for bad objects: they are answered or dropped.
        """
        peer = self._peers.get(conn)
        if peer is None:
            return []
        event = obj.event
        if event == "pong" and self._answers_our_ping(peer, obj):
            return []
        if event == "routing/subscribe":
            return self._subscribe(peer, obj)
        if peer.server and not obj.route and event in _LINK_LOCAL:
            return []  # the linked server's answer to our subscription or keepalive
        if not peer.subscribed:
            if event == "ping" and not obj.route:  # a liveness check is answered even now
                pong = {"event": "pong", "routing-id": peer.routing_id}
                if obj.id is not None:
                    pong["in-reply-to"] = obj.id
                return [self._deliver(peer.conn, BusinessObject(pong))]
            text = "not subscribed: send routing/subscribe first"
            return [self._error(peer, obj, text)]
        route = obj.route
        if self.routing_id in route:
            return []
        route = route or [peer.routing_id]
        object_id = obj.id or (_content_id(obj) if peer.server else new_id())
        metadata = dict(obj.metadata)  # what with_metadata does, without its loop: every object
        metadata["route"] = [*route, self.routing_id]
        metadata["id"] = object_id
        obj = BusinessObject(metadata, obj.payload)
        if peer.server and self._is_duplicate(route[0], str(obj.id), peer.conn):
            return []
        handler = _HANDLERS.get(event or "")
        if handler is not None:
            return handler(self, peer, obj)
        return self._route(obj, peer)

    # ------------------------------------------------------------------ subscriptions

    def _subscribe(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        if len(obj.route) > 1:
            return []  # another server's client subscribed: only its notices travel
        try:
            sub = parse_subscription(obj.metadata)
        except SubscriptionError as exc:
            return [self._error(peer, obj, f"invalid subscription: {exc.reason}")]
        if sub.server and not (peer.trusted or self._holds_secret(obj)):
            log.warning(
                "refused role: server from connection %s (routing-id %r): not a configured "
                "server link",
                peer.conn,
                sub.routing_id,
            )
            text = (
                "role server refused: this connection is not a configured server link "
                "(an --objects-link peer or an allowed server peer)"
            )
            return [self._error(peer, obj, text, code="forbidden")]
        if sub.routing_id == self.routing_id:
            return [self._error(peer, obj, "invalid subscription: that is the server's own id")]
        if sub.routing_id is not None and sub.routing_id != peer.routing_id:
            self._forget_services(peer.routing_id)  # registered under the id it gives up
            peer.routing_id = sub.routing_id
        announce = not peer.subscribed and self._twin(peer) is None
        peer.server = peer.server or sub.server
        peer.rules, peer.echo, peer.types = sub.rules, sub.echo, sub.types
        peer.extra_ids = sub.extra_ids
        peer.subscribed = True
        reply: dict[str, Any] = {
            "event": "routing/subscribe/reply",
            "routing-id": peer.routing_id,
            "routing-ids": list(peer.extra_ids),
        }
        if obj.id is not None:
            reply["in-reply-to"] = obj.id
        if peer.server:
            reply["role"] = "server"
        outputs: list[Output] = []
        if peer.server and not peer.linked:
            # Ours first: a server that hears our reply before our subscription (Objectoplex)
            # would drop it and log that an unsubscribed peer spoke.
            peer.linked = True
            outputs.append(self._own_subscription(peer))
        outputs.append(self._deliver(peer.conn, BusinessObject(reply)))
        if peer.server:
            outputs.extend(self._share_services(peer))
        if announce:
            outputs.extend(self._notices(peer))
        return outputs

    def _holds_secret(self, obj: BusinessObject) -> bool:
        offered = obj.metadata.get("link-secret")
        if self.link_secret is None or not isinstance(offered, str):
            return False
        return hmac.compare_digest(offered.encode(), self.link_secret.encode())

    def _notices(self, peer: _Peer) -> list[Output]:
        """``routing/subscribe/notify`` and ``.../notification`` for everyone but ``peer``."""
        outputs: list[Output] = []
        for event in NOTIFY_EVENTS:
            notice: dict[str, Any] = {
                "event": event,
                "routing-id": peer.routing_id,
                "routing-ids": list(peer.extra_ids),
            }
            if peer.server:
                notice["role"] = "server"
            outputs += self._route_own(notice, exclude=peer.conn, origin=peer.routing_id)
        return outputs

    def _own_subscription(self, peer: _Peer) -> Deliver:
        # No receive-mode: Objectoplex would take it for a legacy client's subscription. The
        # rule list, and types for the servers that read them (Objectoplex logged KeyError).
        metadata = {
            "event": "routing/subscribe",
            "role": "server",
            "routing-id": self.routing_id,
            "subscriptions": ["*"],
            "types": "all",
            "name": self.name,
            "id": new_id(),
        }
        if self.link_secret is not None:
            metadata["link-secret"] = self.link_secret
        return self._deliver(peer.conn, BusinessObject(metadata))

    # ------------------------------------------------------------------ routing

    def _route(self, obj: BusinessObject, sender: _Peer | None) -> list[Output]:
        data: bytes | None = None
        outputs: list[Output] = []
        route = obj.route
        facts = _Facts.of(obj)
        servers: set[str] = set()
        for peer in self._peers.values():
            if not self._should_deliver(peer, facts, route, sender):
                continue
            if peer.server:
                if peer.routing_id in servers:
                    continue  # a second link to the same server: one copy is enough
                servers.add(peer.routing_id)
            data = data if data is not None else encode_object(obj)
            outputs.append(Deliver(peer.conn, obj, data))
        return outputs

    @staticmethod
    def _should_deliver(peer: _Peer, facts: _Facts, route: list[str], sender: _Peer | None) -> bool:
        if not peer.subscribed:
            return False
        if peer.server:
            return peer.routing_id not in route
        if not peer.echo and (peer is sender or (route and peer.routing_id == route[0])):
            return False
        if facts.announcement:
            return False
        if facts.to is not None and not peer.has_any(facts.to):
            return False
        return _rules_pass(facts, peer.rules) and _passes_types(facts, peer.types)

    def _route_own(
        self, metadata: dict[str, Any], exclude: Hashable = None, origin: str | None = None
    ) -> list[Output]:
        """Route an object this server originates (notices, disconnects, routed answers).

        ``origin``: the routing id the object is about, put first in ``route`` instead of ours.
        Notices of a client's arrival and departure travel so: an Objectoplex server does not
        pass on a ``routing/*`` event whose route holds the id of the link it came from, so a
        notice routed as ``[our id]`` would never reach its clients. The copy that such a
        server sends back is dropped here by its (origin, id) key, remembered now.
        """
        object_id = new_id()
        route = [origin] if origin is not None else [self.routing_id]
        if origin is not None:
            self._remember((origin, object_id), _LOCAL)
        metadata = {**metadata, "route": route, "id": object_id}
        outputs = self._route(BusinessObject(metadata), None)
        if exclude is None:
            return outputs
        return [output for output in outputs if output.conn != exclude]

    def _answer(self, peer: _Peer, obj: BusinessObject, metadata: dict[str, Any]) -> list[Output]:
        """Answer ``obj``: straight back to a directly connected sender, else across the network."""
        origin = obj.route[0]
        answer = {**metadata, "to": origin}
        if obj.id is not None:
            answer["in-reply-to"] = obj.id
        if origin == peer.routing_id:
            return [self._deliver(peer.conn, BusinessObject(answer))]
        return self._route_own(answer)

    def _error(self, peer: _Peer, obj: BusinessObject, text: str, code: str = "refused") -> Deliver:
        error: dict[str, Any] = {"event": "error", "error": text, "code": code}
        if obj.id is not None:
            error["in-reply-to"] = obj.id
        return self._deliver(peer.conn, BusinessObject(error))

    def _deliver(self, conn: Hashable, obj: BusinessObject) -> Deliver:
        return Deliver(conn, obj, encode_object(obj))

    def _is_duplicate(self, origin: str, object_id: str, link: Hashable) -> bool:
        """A copy of an object that already came over another link (a loop in the topology),
        or one this server originated coming back.

        Each server forwards an object at most once per link, so the same key over the same
        link is a new object whose sender reused an id: it is routed, and remembered again.
        """
        key = (origin, object_id)
        first_link = self._seen.pop(key, None)
        if first_link is not None and first_link != link:
            self._seen[key] = first_link
            return True
        self._remember(key, link)
        return False

    def _remember(self, key: tuple[str, str], link: Hashable) -> None:
        self._seen[key] = link
        if len(self._seen) > self._dedupe_window:
            del self._seen[next(iter(self._seen))]

    @staticmethod
    def _answers_our_ping(peer: _Peer, obj: BusinessObject) -> bool:
        if peer.ping_id is None or obj.metadata.get("in-reply-to") != peer.ping_id:
            return False
        peer.ping_id = None
        peer.answers_pings = True
        return True

    def _addressed_here(self, obj: BusinessObject) -> bool:
        to = obj.metadata.get("to")
        return (
            to is None or to == self.routing_id or (isinstance(to, list) and self.routing_id in to)
        )

    # ------------------------------------------------------------------ server events

    def _on_ping(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        if not self._addressed_here(obj):
            return self._route(obj, peer)
        return self._answer(peer, obj, {"event": "pong", "routing-id": obj.route[0]})

    def _on_neighbors(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        if not self._addressed_here(obj):
            return self._route(obj, peer)
        reply = {"event": "routing/neighbors/reply", "node": self.routing_id}
        return self._answer(peer, obj, {**reply, "neighbors": self._neighbors()})

    def _on_register(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        name = obj.metadata.get("name")
        if not isinstance(name, str) or not name:
            return [self._error(peer, obj, "services/register needs a name")]
        origin = obj.route[0]
        self._services.setdefault(name, {})[origin] = peer.conn if peer.server else None
        outputs = self._route(obj, peer)
        if origin == peer.routing_id and not peer.server:
            reply = {"event": "services/register/reply", "name": name, "routing-id": origin}
            outputs = self._answer(peer, obj, reply) + outputs
        return outputs

    def _on_unregister(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        name = obj.metadata.get("name")
        holders = self._services.get(name) if isinstance(name, str) else None
        if holders is not None and isinstance(name, str):
            holders.pop(obj.route[0], None)
            if not holders:
                del self._services[name]
        return self._route(obj, peer)

    def _on_discovery(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        outputs = self._route(obj, peer)
        if peer.server:
            return outputs  # the sender's own server answers
        name = obj.metadata.get("name")
        wanted = name if isinstance(name, str) else None
        found = [{"name": svc, "routing-id": rid} for svc, rid in self.services(wanted)]
        reply: dict[str, Any] = {"event": "services/discovery/reply", "services": found}
        if wanted is not None:
            reply["name"] = wanted
        return self._answer(peer, obj, reply) + outputs

    def _on_disconnect_notice(self, peer: _Peer, obj: BusinessObject) -> list[Output]:
        gone = obj.metadata.get("routing-id")
        if isinstance(gone, str):
            self._forget_services(gone)
        return self._route(obj, peer)

    # ------------------------------------------------------------------ service registry

    def _forget_services(self, routing_id: str) -> None:
        for name in list(self._services):
            self._services[name].pop(routing_id, None)
            if not self._services[name]:
                del self._services[name]

    def _move_via(self, conn: Hashable, other: Hashable) -> None:
        for holders in self._services.values():
            for rid, via in holders.items():
                if via == conn:
                    holders[rid] = other

    def _forget_via(self, conn: Hashable) -> None:
        for name in list(self._services):
            holders = self._services[name]
            for rid in [rid for rid, via in holders.items() if via == conn]:
                del holders[rid]
            if not holders:
                del self._services[name]

    def _share_services(self, peer: _Peer) -> Iterable[Output]:
        """Tell a newly linked server the services we know, as their own registrations."""
        for name, rid in self.services():
            metadata = {
                "event": "services/register",
                "name": name,
                "route": [rid, self.routing_id],
                "id": new_id(),
            }
            if self._services[name].get(rid) != peer.conn:
                yield self._deliver(peer.conn, BusinessObject(metadata))


def _content_id(obj: BusinessObject) -> str:
    """An id for an object that reached us over a link without one (a foreign server's).

    Derived from its content (route left out), so every copy that a looped topology brings gets
    the same id on every server and is dropped as a duplicate.
    """
    metadata = {k: v for k, v in obj.metadata.items() if k != "route"}
    try:
        text = orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # not from the wire: nothing to compare it with
        return new_id()
    digest = hashlib.blake2b(text, digest_size=16)
    digest.update(obj.payload)
    return digest.hexdigest()


# Objects a linked server sends us directly (no route) that end at this hop.
_LINK_LOCAL: Final = frozenset({"routing/subscribe/reply", "pong", "error"})

_HANDLERS: Final = {
    "ping": Router._on_ping,
    "routing/neighbors": Router._on_neighbors,
    "routing/disconnect": Router._on_disconnect_notice,
    "services/register": Router._on_register,
    "services/unregister": Router._on_unregister,
    "services/discovery": Router._on_discovery,
}
