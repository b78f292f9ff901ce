"""The Object System router, sans-I/O (seed 003; docs/PROTOCOL.md section 6).

A :class:`Router` is one server of an Object System network. Drivers tell it about connections
(:meth:`Router.connect`, :meth:`Router.disconnect`) and the objects they bring
(:meth:`Router.receive`); every call returns a list of outputs (:mod:`bus.objects.outputs`):
``Deliver`` (these bytes to that connection) and ``Close`` (close that connection). No sockets,
no clock, no tasks.

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
  subscribing, unless ``ping_before_subscribe="ignore"`` asks for Objectoplex's silence);
  ``routing/neighbors`` -> reply;
- a ``pong`` answering this server's own keepalive :meth:`Router.ping` ends here and marks the
  connection as one that answers pings (``PeerInfo.answers_pings``), for the driver's keepalive
  policy (:mod:`bus.objects.keepalive`);
- ``services/register`` / ``services/discovery`` keep a registry of named services;
- server links: a server subscribes with ``role: server`` and receives everything, but only on a
  connection the driver marked as allowed to (``connect(..., trusted=True)``: a link we opened,
  or a configured server peer) or one whose subscription carries the ``link_secret``; anyone
  else claiming the role gets an error object and receives nothing more than before (issue 19);
- several links to one server (a double link) carry one copy of each object, and announce the
  server once.

The router decides; its parts live beside it: :mod:`bus.objects.subscription` (parsing
subscriptions, the rule engine), :mod:`bus.objects.dedupe` (copies of looped objects),
:mod:`bus.objects.registry` (named services), :mod:`bus.objects.server_objects` (the objects it
writes), :mod:`bus.objects.peers` (its state of a connection) and :mod:`bus.objects.outputs`.
"""

from __future__ import annotations

import hmac
import itertools
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Final, NamedTuple

from bus.errors import BusError, ConfigError
from bus.message.ids import new_id
from bus.objects.codec import BusinessObject, encode_metadata, encode_object, new_object
from bus.objects.dedupe import DEFAULT_DEDUPE_WINDOW, SeenObjects, content_id
from bus.objects.outputs import Close, Deliver, Output, new_deliver
from bus.objects.peers import PeerInfo, PeerState
from bus.objects.recipients import Recipients
from bus.objects.registry import ServiceRegistry
from bus.objects.server_objects import (
    announcement,
    decode_error,
    disconnect_notice,
    discovery_reply,
    error_reply,
    keepalive_ping,
    neighbors,
    pong,
    server_subscription,
    shared_registration,
    subscribe_notices,
    subscribe_reply,
)
from bus.objects.subscription import (
    Facts,
    SubscriptionError,
    parse_subscription,
)

__all__ = ["PING_ANSWER", "PING_BEFORE_SUBSCRIBE", "PING_IGNORE", "ContentSender", "Router"]

#: ``Router(ping_before_subscribe=...)``: answer a ping sent before subscribing (ours) ...
PING_ANSWER: Final = "answer"
#: ... or drop it, as Objectoplex does.
PING_IGNORE: Final = "ignore"
PING_BEFORE_SUBSCRIBE: Final = (PING_ANSWER, PING_IGNORE)

log = logging.getLogger(__name__)


class ContentSender(NamedTuple):
    """A subscribed client as :meth:`Router.receive_batch` routes its content objects: the
    connection's state, this server's routing id, the prefix and counter of the ids it gives,
    and who receives an object (``of_content(peer, metadata)``)."""

    peer: PeerState
    own_id: str
    id_prefix: str
    next_id: Callable[[], int]
    of_content: Callable[[PeerState, dict[str, Any]], list[PeerState]]


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
        ping_before_subscribe: ``answer`` (default): a ``ping`` from a connection that has not
            subscribed yet is answered with ``pong``; ``ignore``: it is dropped, as Objectoplex
            does (its ``legacy_ping.robot`` expects no answer), and counted in
            :attr:`ignored_pings` (PROTOCOL.md 6.3).
    """

    def __init__(
        self,
        routing_id: str | None = None,
        *,
        name: str = "busgate",
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        link_secret: str | None = None,
        ping_before_subscribe: str = PING_ANSWER,
    ) -> None:
        if ping_before_subscribe not in PING_BEFORE_SUBSCRIBE:
            choices = ", ".join(PING_BEFORE_SUBSCRIBE)
            raise ConfigError(
                f"ping_before_subscribe={ping_before_subscribe!r}: expected one of {choices}"
            )
        self.routing_id = routing_id or new_id()
        self.answer_early_pings = ping_before_subscribe == PING_ANSWER
        #: Pings before subscribing dropped under ``ping_before_subscribe="ignore"``.
        self.ignored_pings = 0
        self.name = name
        self.link_secret = link_secret or None
        self._peers: dict[Hashable, PeerState] = {}
        self._services = ServiceRegistry()
        self._seen = SeenObjects(dedupe_window)
        # Ids for client objects that carry none: this server's id and a count (unique on the
        # network as the server's id is; a fresh UUID per object cost a microsecond).
        self._id_prefix = f"{self.routing_id}-"
        self._next_id = itertools.count(1).__next__
        self._recipients = Recipients(self._peers)  # told of every change of a connection
        #: Counts the changes of connections (connected, subscribed, gone): a reader of
        #: :meth:`content_types` skips its pass over every connection while it stays the same.
        self.changes = 0

    # ------------------------------------------------------------------ queries

    def peer(self, conn: Hashable) -> PeerInfo | None:
        """The view of connection ``conn``, or ``None`` if unknown."""
        p = self._peers.get(conn)
        return None if p is None else p.info()

    def peers(self) -> list[PeerInfo]:
        """Every connection, in connection order."""
        return [info for conn in self._peers if (info := self.peer(conn)) is not None]

    def services(self, name: str | None = None) -> list[tuple[str, str]]:
        """Known services as (name, routing id), sorted; only ``name``'s when given."""
        return self._services.listing(name)

    def content_types(self, conn: Hashable) -> tuple[str, ...] | None:
        """The content types connection ``conn`` subscribed to (``None``: all, or unknown);
        the gateway's presence reads the ``bus/...`` ones (PROTOCOL.md 5.16)."""
        p = self._peers.get(conn)
        return None if p is None or not p.subscribed else p.types

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
        peer = PeerState(conn, new_id(), server=link, linked=link, trusted=link or trusted)
        self._peers[conn] = peer
        self._recipients.changed(peer)
        self.changes += 1
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
        self._recipients.changed(peer)
        self.changes += 1
        twin = self._recipients.twin(peer)
        if twin is not None:
            self._services.move_via(conn, twin.conn)
            return []
        self._services.forget(peer.routing_id)
        self._services.forget_via(conn)
        if not peer.subscribed:
            return []
        return self._route_own(disconnect_notice(peer), origin=peer.routing_id)

    def reject(self, conn: Hashable, error: BusError) -> list[Output]:
        """Refuse a connection's input: an ``error`` object, a close, and the disconnect notice.

        Drivers call this when the codec raises (malformed or oversized objects).
        """
        if conn not in self._peers:
            return []
        outputs: list[Output] = [self._deliver(conn, BusinessObject(decode_error(error)))]
        outputs.append(Close(conn, str(error)))
        return outputs + self.disconnect(conn)

    def ping(self, conn: Hashable) -> list[Output]:
        """A keepalive ``ping`` for connection ``conn`` (servers answer with ``pong``).

        The ``pong`` that answers it (``in-reply-to`` = its id) ends at this server and sets
        :attr:`~bus.objects.peers.PeerInfo.answers_pings` for the connection.
        """
        peer = self._peers.get(conn)
        if peer is None:
            return []
        peer.ping_id = new_id()
        ping = keepalive_ping(peer.ping_id, self.routing_id)
        return [self._deliver(conn, BusinessObject(ping))]

    def announce(self) -> list[Output]:
        """``routing/announcement/neighbors`` for the linked servers (Objectoplex: every 5 min)."""
        return self._route_own(announcement(self.routing_id, self._peers.values()))

    # ------------------------------------------------------------------ objects

    def content_sender(self, conn: Hashable) -> ContentSender | None:
        """What the C content lane (:mod:`bus.objects.content_lane`) needs to take ``conn``'s
        content objects as :meth:`receive_batch` does; None unless ``conn`` is a subscribed
        client (a server link's objects and a subscription take the general path)."""
        peer = self._peers.get(conn)
        if peer is None or peer.server or not peer.subscribed:
            return None
        return ContentSender(
            peer, self.routing_id, self._id_prefix, self._next_id, self._recipients.of_content
        )

    def receive(self, conn: Hashable, obj: BusinessObject) -> list[Output]:
        """An object arrived from connection ``conn``.

        Returns:
            What to send where. Never raises for bad objects: they are answered or dropped.
        """
        return self.receive_batch(conn, [obj])

    def receive_batch(self, conn: Hashable, objects: list[BusinessObject]) -> list[Output]:
        """Objects that arrived together from connection ``conn``: :meth:`receive` for each, in
        order, the outputs joined.

        A client's content object (no ``event``, no ``route``, an ``id`` that is a non-empty
        string or none) takes a short path here: its recipients are remembered per sender,
        content type and ``to`` (:meth:`Recipients.of_content`), and a stream of them costs
        one call, not one per object. Everything else takes the general path.
        """
        outputs: list[Output] = []
        peer = self._peers.get(conn)
        if peer is None:
            return outputs
        of_content, own_id = self._recipients.of_content, self.routing_id
        prefix, next_id = self._id_prefix, self._next_id
        for obj in objects:
            metadata = obj.metadata
            object_id = metadata.get("id")
            if (
                peer.server
                or not peer.subscribed
                or "event" in metadata
                or "route" in metadata
                or not (object_id is None or (type(object_id) is str and object_id))
            ):
                outputs += self._receive(peer, obj)
                continue
            if object_id is None:
                object_id = f"{prefix}{next_id()}"
            metadata = dict(metadata)  # the object's own: copied, as with_metadata does
            metadata["route"] = [peer.routing_id, own_id]
            metadata["id"] = object_id
            targets = of_content(peer, metadata)
            if targets:
                payload = obj.payload
                obj = new_object((metadata, payload))
                if metadata.get("size") == (len(payload) if payload else None):
                    data = encode_metadata(metadata) + b"\0" + payload  # encode_object's work
                else:
                    data = encode_object(obj)  # a size to correct
                for target in targets:
                    outputs.append(new_deliver((target.conn, obj, data)))
        return outputs

    def _receive(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        """:meth:`receive`, the general path: any object."""
        event = obj.event
        if event == "pong" and self._answers_our_ping(peer, obj):
            return []
        if event == "routing/subscribe":
            return self._subscribe(peer, obj)
        if peer.server and not obj.route and event in _LINK_LOCAL:
            if peer.linked and event == "error" and obj.metadata.get("code") == "forbidden":
                peer.refused = str(obj.metadata.get("error") or "role server refused")
            return []  # the linked server's answer to our subscription or keepalive
        if not peer.subscribed:
            if event == "ping" and not obj.route:  # a liveness check is answered even now
                return self._early_ping(peer, obj)
            text = "not subscribed: send routing/subscribe first"
            return [self._error(peer, obj, text)]
        route = obj.route
        if self.routing_id in route:
            return []
        route = route or [peer.routing_id]
        object_id = obj.id or (
            content_id(obj) if peer.server else f"{self._id_prefix}{self._next_id()}"
        )
        metadata = dict(obj.metadata)  # what with_metadata does, without its loop: every object
        metadata["route"] = [*route, self.routing_id]
        metadata["id"] = object_id
        obj = BusinessObject(metadata, obj.payload)
        if peer.server and self._seen.is_duplicate(route[0], str(obj.id), peer.conn):
            return []
        handler = _HANDLERS.get(event or "")
        if handler is not None:
            return handler(self, peer, obj)
        return self._route(obj, peer)

    def _early_ping(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        if self.answer_early_pings:
            return [self._deliver(peer.conn, BusinessObject(pong(obj, peer.routing_id)))]
        self.ignored_pings += 1
        log.debug("ping %s before routing/subscribe: not answered (as Objectoplex)", obj.id)
        return []

    # ------------------------------------------------------------------ subscriptions

    def _subscribe(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
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
            self._services.forget(peer.routing_id)  # registered under the id it gives up
            peer.routing_id = sub.routing_id
        announce = not peer.subscribed and self._recipients.twin(peer) is None
        peer.server = peer.server or sub.server
        peer.rules, peer.echo, peer.types = sub.rules, sub.echo, sub.types
        peer.extra_ids = sub.extra_ids
        peer.subscribed = True
        self._recipients.changed(peer)
        self.changes += 1
        reply = subscribe_reply(peer, obj)
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

    def _notices(self, peer: PeerState) -> list[Output]:
        """``routing/subscribe/notify`` and ``.../notification`` for everyone but ``peer``."""
        outputs: list[Output] = []
        for notice in subscribe_notices(peer):
            outputs += self._route_own(notice, exclude=peer.conn, origin=peer.routing_id)
        return outputs

    def _own_subscription(self, peer: PeerState) -> Deliver:
        metadata = server_subscription(self.routing_id, self.name, self.link_secret)
        return self._deliver(peer.conn, BusinessObject(metadata))

    # ------------------------------------------------------------------ routing

    def _route(self, obj: BusinessObject, sender: PeerState | None) -> list[Output]:
        """Deliver ``obj``, as this router built it (its ``route`` a list of ids it made)."""
        targets = self._recipients.of(Facts.of(obj), obj.metadata["route"], sender)
        if not targets:
            return []
        data = encode_object(obj)
        return [new_deliver((peer.conn, obj, data)) for peer in targets]

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
            self._seen.remember_own(origin, object_id)
        metadata = {**metadata, "route": route, "id": object_id}
        outputs = self._route(BusinessObject(metadata), None)
        if exclude is None:
            return outputs
        return [output for output in outputs if output.conn != exclude]

    def _answer(
        self, peer: PeerState, obj: BusinessObject, metadata: dict[str, Any]
    ) -> list[Output]:
        """Answer ``obj``: straight back to a directly connected sender, else across the network."""
        origin = obj.route[0]
        answer = {**metadata, "to": origin}
        if obj.id is not None:
            answer["in-reply-to"] = obj.id
        if origin == peer.routing_id:
            return [self._deliver(peer.conn, BusinessObject(answer))]
        return self._route_own(answer)

    def _error(
        self, peer: PeerState, obj: BusinessObject, text: str, code: str = "refused"
    ) -> Deliver:
        return self._deliver(peer.conn, BusinessObject(error_reply(obj, text, code)))

    def _deliver(self, conn: Hashable, obj: BusinessObject) -> Deliver:
        return Deliver(conn, obj, encode_object(obj))

    @staticmethod
    def _answers_our_ping(peer: PeerState, obj: BusinessObject) -> bool:
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

    def _on_ping(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        if not self._addressed_here(obj):
            return self._route(obj, peer)
        return self._answer(peer, obj, {"event": "pong", "routing-id": obj.route[0]})

    def _on_neighbors(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        if not self._addressed_here(obj):
            return self._route(obj, peer)
        reply = {"event": "routing/neighbors/reply", "node": self.routing_id}
        return self._answer(peer, obj, {**reply, "neighbors": neighbors(self._peers.values())})

    def _on_register(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        name = obj.metadata.get("name")
        if not isinstance(name, str) or not name:
            return [self._error(peer, obj, "services/register needs a name")]
        origin = obj.route[0]
        self._services.register(name, origin, peer.conn if peer.server else None)
        outputs = self._route(obj, peer)
        if origin == peer.routing_id and not peer.server:
            reply = {"event": "services/register/reply", "name": name, "routing-id": origin}
            outputs = self._answer(peer, obj, reply) + outputs
        return outputs

    def _on_unregister(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        name = obj.metadata.get("name")
        if isinstance(name, str):
            self._services.unregister(name, obj.route[0])
        return self._route(obj, peer)

    def _on_discovery(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        outputs = self._route(obj, peer)
        if peer.server:
            return outputs  # the sender's own server answers
        name = obj.metadata.get("name")
        wanted = name if isinstance(name, str) else None
        reply = discovery_reply(wanted, self.services(wanted))
        return self._answer(peer, obj, reply) + outputs

    def _on_disconnect_notice(self, peer: PeerState, obj: BusinessObject) -> list[Output]:
        gone = obj.metadata.get("routing-id")
        if isinstance(gone, str):
            self._services.forget(gone)
        return self._route(obj, peer)

    # ------------------------------------------------------------------ service registry

    def _share_services(self, peer: PeerState) -> Iterable[Output]:
        """Tell a newly linked server the services we know, as their own registrations."""
        for name, rid in self.services():
            if self._services.via(name, rid) != peer.conn:
                metadata = shared_registration(name, rid, self.routing_id)
                yield self._deliver(peer.conn, BusinessObject(metadata))


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
