"""The sans-I/O Object System router: every receive mode, filter, rule, service and link rule."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.errors import DecodeError, LimitError
from bus.objects.codec import BusinessObject, decode_object
from bus.objects.outputs import Close, Deliver, Output
from bus.objects.router import Router
from bus.objects.server_objects import NOTIFY_EVENTS
from bus.objects.subscription import SubscriptionError, parse_subscription, passes_rules
from tests.docexamples import examples


class Net:
    """A router plus the objects each connection received, decoded from the delivered bytes."""

    def __init__(self, router: Router | None = None) -> None:
        self.router = router or Router("server-1")
        self.inbox: dict[Hashable, list[dict[str, Any]]] = {}
        self.closed: dict[Hashable, str] = {}

    def take(self, outputs: list[Output]) -> list[Output]:
        for out in outputs:
            if isinstance(out, Deliver):
                assert out.conn not in self.closed, "delivered after close"
                obj = decode_object(out.data)
                self.inbox.setdefault(out.conn, []).append(
                    {**obj.metadata, "_payload": obj.payload}
                )
            else:
                assert isinstance(out, Close)
                self.closed[out.conn] = out.reason
        return outputs

    def join(self, conn: str, **subscribe: Any) -> str:
        self.take(self.router.connect(conn))
        self.send(conn, {"event": "routing/subscribe", "id": f"sub-{conn}", **subscribe})
        reply = self.pop(conn)[0]
        assert reply["event"] == "routing/subscribe/reply"
        assert reply["in-reply-to"] == f"sub-{conn}"
        return str(reply["routing-id"])

    def send(self, conn: Hashable, metadata: dict[str, Any], payload: bytes = b"") -> None:
        self.take(self.router.receive(conn, BusinessObject(metadata, payload)))

    def pop(self, conn: Hashable) -> list[dict[str, Any]]:
        return self.inbox.pop(conn, [])

    def events(self, conn: Hashable) -> list[str | None]:
        return [m.get("event", m.get("type")) for m in self.pop(conn)]

    def clear(self) -> None:
        self.inbox.clear()


TEXT = {"type": "text/plain"}
IMAGE = {"type": "image/png"}


def test_nothing_is_routed_before_subscription_and_sender_is_told() -> None:
    net = Net()
    net.join("a")
    net.take(net.router.connect("b"))
    net.send("a", {"event": "chat", "id": "1"})
    assert net.pop("b") == []
    assert net.events("a") == ["chat"]  # its own echo (receive mode all)
    net.send("b", {"event": "chat", "id": "2"})
    [error] = net.pop("b")
    assert error["event"] == "error" and error["in-reply-to"] == "2"
    assert "subscribe" in error["error"]
    assert net.pop("a") == []


def test_routing_id_assigned_or_taken_from_subscription_and_route_recorded() -> None:
    net = Net()
    rid_a = net.join("a")
    rid_b = net.join("b", **{"routing-id": "bee"})
    assert rid_b == "bee" and len(rid_a) == 36
    net.clear()
    net.send("a", {"event": "chat"})
    [got] = net.pop("b")
    assert got["route"] == [rid_a, "server-1"]
    assert got["id"]  # the server gives every routed object an id


@pytest.mark.parametrize(
    ("mode_key", "mode", "own", "other_event", "other_content"),
    [
        ("receive_mode", "all", True, True, True),
        ("receive-mode", "all", True, True, True),
        ("receive_mode", "no_echo", False, True, True),
        ("receive-mode", "events_only", False, True, False),
        ("receive_mode", "none", False, False, False),
    ],
)
def test_receive_modes(
    mode_key: str, mode: str, own: bool, other_event: bool, other_content: bool
) -> None:
    net = Net()
    net.join("me", **{mode_key: mode})
    net.join("other")
    net.clear()
    net.send("me", {"event": "mine"})
    net.send("other", {"event": "theirs"})
    net.send("other", TEXT, b"hi")
    got = net.events("me")
    assert ("mine" in got) is own
    assert ("theirs" in got) is other_event
    assert ("text/plain" in got) is other_content


@pytest.mark.parametrize(
    ("types", "text", "image", "untyped"),
    [
        ("all", True, True, True),
        ("none", False, False, False),
        (["text/plain"], True, False, False),
        (["text/*"], True, False, False),
        (["image/*", "text/plain"], True, True, False),
        (["*"], True, True, True),
    ],
)
def test_type_filters_apply_to_content_only(
    types: Any, text: bool, image: bool, untyped: bool
) -> None:
    net = Net()
    net.join("me", types=types)
    net.join("other")
    net.clear()
    net.send("other", {"type": "text/plain; charset=UTF-8"}, b"t")
    net.send("other", IMAGE, b"p")
    net.send("other", {"data": 1})
    net.send("other", {"event": "note", "type": "image/png"}, b"e")
    got = net.events("me")
    assert ("text/plain; charset=UTF-8" in got) is text
    assert ("image/png" in got) is image
    assert (None in got) is untyped
    assert "note" in got  # events pass whatever the type filter says


RULE_CASES = [
    (["*"], {"event": "x"}, True),
    (["*"], {"data": 1}, True),
    (["@*"], {"event": "x"}, True),
    (["@*"], TEXT, False),
    (["@chat/*"], {"event": "chat/line"}, True),
    (["@chat/*"], {"event": "chatter"}, False),
    (["text/*"], TEXT, True),
    (["text/*"], IMAGE, False),
    (["#sensor"], {"natures": ["sensor", "hot"]}, True),
    (["#sen*"], {"natures": ["sensor"]}, True),
    (["#sensor"], {"natures": ["other"]}, False),
    (["*", "!image/png"], IMAGE, False),
    (["*", "!image/png"], TEXT, True),
    (["!image/png", "*"], IMAGE, True),  # last match wins
    (["*", "!@ping*", "@ping/special"], {"event": "ping/special"}, True),
    (["*", "!@ping*", "@ping/special"], {"event": "ping/other"}, False),
    ([], {"event": "x"}, False),
]


@pytest.mark.parametrize(("rules", "metadata", "expected"), RULE_CASES)
def test_rule_engine(rules: list[str], metadata: dict[str, Any], expected: bool) -> None:
    assert passes_rules(BusinessObject(metadata), rules) is expected


def test_subscriptions_rule_list_in_a_real_subscription() -> None:
    net = Net()
    net.join("me", subscriptions=["@chat/*", "text/*", "!@chat/secret"])
    net.join("other")
    net.clear()
    net.send("other", {"event": "chat/line"})
    net.send("other", {"event": "chat/secret"})
    net.send("other", {"event": "other"})
    net.send("other", TEXT, b"x")
    net.send("other", IMAGE, b"x")
    assert net.events("me") == ["chat/line", "text/plain"]


def test_subscriptions_win_over_receive_mode_and_named_lists() -> None:
    assert parse_subscription({"receive_mode": "none", "subscriptions": ["*"]}).rules == ("*",)
    assert parse_subscription({"subscriptions": "all"}).rules == ("*",)
    assert parse_subscription({"subscriptions": "none"}).rules == ()
    assert parse_subscription({}).echo is True


@pytest.mark.parametrize(
    "metadata",
    [{"receive_mode": "loud"}, {"types": 5}, {"subscriptions": [1]}, {"routing-id": 5}],
)
def test_invalid_subscriptions_are_refused_without_closing(metadata: dict[str, Any]) -> None:
    with pytest.raises(SubscriptionError):
        parse_subscription(metadata)
    net = Net()
    net.take(net.router.connect("a"))
    net.send("a", {"event": "routing/subscribe", "id": "s", **metadata})
    [error] = net.pop("a")
    assert error["event"] == "error" and error["in-reply-to"] == "s"
    assert net.closed == {}
    info = net.router.peer("a")
    assert info is not None and not info.subscribed


def test_to_restricts_delivery_including_extra_routing_ids() -> None:
    net = Net()
    net.join("a")
    rid_b = net.join("b", **{"routing-ids": ["group-x"]})
    net.join("c")
    net.clear()
    net.send("a", {"event": "direct", "to": rid_b})
    net.send("a", {"event": "group", "to": "group-x"})
    net.send("a", {"event": "list", "to": ["nobody", rid_b]})
    assert net.events("b") == ["direct", "group", "list"]
    assert net.pop("c") == []


def test_subscribe_reply_and_notify_to_the_others() -> None:
    net = Net()
    net.join("a")
    net.take(net.router.connect("b"))
    net.send("b", {"event": "routing/subscribe", "routing-ids": ["x"]})
    [reply] = net.pop("b")
    assert "in-reply-to" not in reply  # the request had no id
    assert reply["routing-ids"] == ["x"]
    # The seed's notice and Objectoplex's (which its client registry reads), same content.
    notices = net.pop("a")
    assert [n["event"] for n in notices] == [
        "routing/subscribe/notify",
        "routing/subscribe/notification",
    ]
    for notify in notices:
        assert notify["routing-id"] == reply["routing-id"] and notify["routing-ids"] == ["x"]
        assert notify["route"] == [reply["routing-id"]]  # about b, so Objectoplex passes it on
        assert "role" not in notify


def test_disconnect_is_announced_only_for_subscribed_clients() -> None:
    net = Net()
    net.join("a")
    rid_b = net.join("b")
    net.take(net.router.connect("c"))
    net.clear()
    net.take(net.router.disconnect("c"))
    assert net.pop("a") == []
    net.take(net.router.disconnect("b"))
    [notice] = net.pop("a")
    assert notice == {**notice, "event": "routing/disconnect", "routing-id": rid_b}
    assert net.take(net.router.disconnect("b")) == []  # idempotent


def test_ping_pong_and_neighbors() -> None:
    net = Net()
    rid_a = net.join("a")
    net.join("b")
    net.clear()
    net.send("a", {"event": "ping", "id": "p1"})
    [pong] = net.pop("a")
    assert pong["event"] == "pong" and pong["in-reply-to"] == "p1"
    assert net.pop("b") == []
    net.send("a", {"event": "routing/neighbors", "id": "n1"})
    [reply] = net.pop("a")
    assert reply["event"] == "routing/neighbors/reply" and reply["node"] == "server-1"
    assert reply["to"] == rid_a and reply["in-reply-to"] == "n1"
    assert {n["routing-id"] for n in reply["neighbors"]} >= {rid_a}
    assert len(reply["neighbors"]) == 2


def test_services_register_discovery_request_reply() -> None:
    net = Net()
    rid_svc = net.join("svc", **{"receive-mode": "all"})
    rid_cli = net.join("cli", **{"receive-mode": "no_echo"})
    net.clear()
    net.send("svc", {"event": "services/register", "name": "clock", "id": "r"})
    svc_got = net.pop("svc")
    assert svc_got[0]["event"] == "services/register/reply"
    net.pop("cli")
    net.send("cli", {"event": "services/discovery", "id": "d"})
    replies = [m for m in net.pop("cli") if m["event"] == "services/discovery/reply"]
    assert replies[0]["services"] == [{"name": "clock", "routing-id": rid_svc}]
    assert replies[0]["in-reply-to"] == "d"
    net.clear()
    net.send("cli", {"event": "services/request", "name": "clock", "id": "q"})
    [request] = net.pop("svc")
    assert request["route"][0] == rid_cli
    net.send(
        "svc",
        {"event": "services/reply", "in-reply-to": "q", "to": request["route"][0], **TEXT},
        b"12:00",
    )
    [reply] = net.pop("cli")
    assert reply["in-reply-to"] == "q" and reply["_payload"] == b"12:00"
    # a service that goes away leaves the registry
    net.take(net.router.disconnect("svc"))
    assert net.router.services() == []


def test_reject_sends_error_object_closes_and_announces() -> None:
    net = Net()
    net.join("a")
    rid_b = net.join("b")
    net.clear()
    net.take(net.router.reject("b", LimitError("max_metadata_size", 9000, 8192)))
    [error] = net.pop("b")
    assert error["event"] == "error" and error["code"] == "limit"
    assert "max_metadata_size" in error["error"]
    assert "b" in net.closed
    [notice] = net.pop("a")
    assert notice["event"] == "routing/disconnect" and notice["routing-id"] == rid_b
    net.take(net.router.reject("a", DecodeError("bad json", 3)))
    assert "a" in net.closed


# ---------------------------------------------------------------------- linked servers


class Network:
    """Several routers joined by in-memory links; outputs are carried until quiet."""

    def __init__(self, names: list[str]) -> None:
        self.nets = {name: Net(Router(name)) for name in names}
        self.links: dict[tuple[str, Hashable], tuple[str, Hashable]] = {}
        self.carried: list[tuple[str, BusinessObject]] = []  # (to server, object) over links

    def link(self, a: str, b: str) -> None:
        ca, cb = f"link-{b}", f"link-{a}"
        self.links[(a, ca)] = (b, cb)
        self.links[(b, cb)] = (a, ca)
        self.nets[b].take(self.nets[b].router.connect(cb, trusted=True))  # a configured peer
        self.pump(a, self.nets[a].router.connect(ca, link=True))

    def pump(self, at: str, outputs: list[Output]) -> None:
        pending = [(at, outputs)]
        while pending:
            where, outs = pending.pop(0)
            for out in outs:
                target = self.links.get((where, out.conn))
                if target is None:
                    self.nets[where].take([out])
                elif isinstance(out, Deliver):
                    there, conn = target
                    self.carried.append((there, out.obj))
                    pending.append(
                        (there, self.nets[there].router.receive(conn, decode_object(out.data)))
                    )

    def join(self, at: str, conn: str, **sub: Any) -> str:
        net = self.nets[at]
        net.take(net.router.connect(conn))
        self.send(at, conn, {"event": "routing/subscribe", **sub})
        return str(net.pop(conn)[0]["routing-id"])

    def send(self, at: str, conn: str, metadata: dict[str, Any]) -> None:
        self.pump(at, self.nets[at].router.receive(conn, BusinessObject(metadata)))

    def drop(self, at: str, conn: Hashable) -> None:
        self.pump(at, self.nets[at].router.disconnect(conn))

    def events(self, at: str, conn: str) -> list[Any]:
        return [m.get("event") for m in self.nets[at].pop(conn)]


def test_linked_servers_subscribe_to_each_other() -> None:
    net = Network(["A", "B"])
    net.link("A", "B")
    a_view = net.nets["A"].router.peer("link-B")
    b_view = net.nets["B"].router.peer("link-A")
    assert a_view is not None and a_view.server and a_view.subscribed and a_view.routing_id == "B"
    assert b_view is not None and b_view.server and b_view.subscribed and b_view.routing_id == "A"


def test_objects_disconnects_and_services_cross_a_loop_exactly_once() -> None:
    net = Network(["A", "B", "C"])
    net.link("A", "B")
    net.link("B", "C")
    net.link("C", "A")  # a loop
    rid_x = net.join("A", "x")
    net.join("B", "y")
    net.join("C", "z", **{"receive-mode": "events_only"})
    for at, conn in (("A", "x"), ("B", "y"), ("C", "z")):
        net.nets[at].pop(conn)
    net.send("A", "x", {"event": "hello", "id": "h1"})
    assert net.events("B", "y") == ["hello"]
    assert net.events("C", "z") == ["hello"]
    assert net.events("A", "x") == ["hello"]  # receive mode all: echo, once
    # `to` across servers
    net.send("B", "y", {"event": "direct", "to": rid_x})
    assert net.events("A", "x") == ["direct"]
    assert net.events("C", "z") == []
    # a service on C, discovered from A, registered before or after linking
    net.send("C", "z", {"event": "services/register", "name": "clock"})
    net.nets["C"].pop("z")
    net.send("A", "x", {"event": "services/discovery", "id": "d"})
    got = net.nets["A"].pop("x")
    [reply] = [m for m in got if m.get("event") == "services/discovery/reply"]
    assert [s["name"] for s in reply["services"]] == ["clock"]
    # routing/disconnect crosses servers once
    assert net.events("B", "y") == ["services/register", "services/discovery"]
    net.nets["C"].pop("z")
    net.drop("A", "x")
    assert net.events("B", "y") == ["routing/disconnect"]
    assert net.events("C", "z") == ["routing/disconnect"]


def test_a_server_linked_later_learns_existing_services() -> None:
    net = Network(["A", "B"])
    net.join("A", "svc")
    net.send("A", "svc", {"event": "services/register", "name": "late"})
    net.link("B", "A")
    assert [name for name, _ in net.nets["B"].router.services()] == ["late"]


def test_remote_ping_and_neighbors_answered_across_link() -> None:
    net = Network(["A", "B"])
    net.link("A", "B")
    rid = net.join("A", "x")
    net.nets["A"].pop("x")
    net.send("A", "x", {"event": "routing/neighbors", "id": "n", "to": "B"})
    got = net.nets["A"].pop("x")
    [reply] = [m for m in got if m.get("event") == "routing/neighbors/reply"]
    assert reply["node"] == "B" and reply["to"] == rid
    assert [n["role"] for n in reply["neighbors"]] == ["server"]
    net.send("A", "x", {"event": "ping", "id": "p", "to": "B"})
    got = net.nets["A"].pop("x")
    assert [m["event"] for m in got if m.get("in-reply-to") == "p"] == ["pong"]


def test_keepalive_ping_from_router_is_answered_by_a_linked_server() -> None:
    net = Network(["A", "B"])
    net.link("A", "B")
    outputs = net.nets["A"].router.ping("link-B")
    assert len(outputs) == 1
    net.pump("A", outputs)  # B answers with pong straight back; A ends it there
    assert net.nets["A"].inbox == {}


def test_doc_examples_of_routing() -> None:
    found = examples("objects-routing")
    assert found, "docs/PROTOCOL.md section 6 has no routing examples"
    for example in found:
        net = Net()
        request = orjson.loads(example.body["from"])
        net.take(net.router.connect("c"))
        expected = orjson.loads(example.body["reply"])
        if example.body.get("before") == "yes":  # before subscribing: its id is assigned
            info = net.router.peer("c")
            assert info is not None
            expected["routing-id"] = info.routing_id
        elif request["event"] != "routing/subscribe":
            net.send("c", {"event": "routing/subscribe", "routing-id": "c1"})
            net.pop("c")
        net.send("c", request)
        first = net.pop("c")[0]
        first.pop("_payload")
        assert first == expected, example.id


@given(
    size=st.integers(2, 5),
    extra=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=6),
    origin=st.integers(0, 4),
)
@settings(max_examples=60, deadline=None)
def test_any_linked_topology_delivers_exactly_once(
    size: int, extra: list[tuple[int, int]], origin: int
) -> None:
    names = [f"S{i}" for i in range(size)]
    net = Network(names)
    edges = {(i, i + 1) for i in range(size - 1)}  # a chain keeps it connected
    edges |= {(min(a, b), max(a, b)) for a, b in extra if a != b and max(a, b) < size}
    for a, b in sorted(edges):
        net.link(names[a], names[b])
    for name in names:
        net.join(name, f"c-{name}", **{"receive-mode": "no_echo"})
    for name in names:
        net.nets[name].pop(f"c-{name}")
    sender = names[origin % size]
    net.send(sender, f"c-{sender}", {"event": "hello"})
    for name in names:
        got = [e for e in net.events(name, f"c-{name}") if e == "hello"]
        assert got == ([] if name == sender else ["hello"]), (name, sorted(edges))
    net.drop(sender, f"c-{sender}")
    for name in names:
        if name != sender:
            assert net.events(name, f"c-{name}") == ["routing/disconnect"]


json_leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
attribute = st.sampled_from(
    ["event", "type", "to", "route", "id", "natures", "name", "routing-id", "routing-ids",
     "receive_mode", "types", "subscriptions", "role", "in-reply-to"]
)  # fmt: skip
event_name = st.sampled_from(
    ["routing/subscribe", "ping", "routing/neighbors", "routing/disconnect", "services/register",
     "services/unregister", "services/discovery", "services/request", "chat"]
)  # fmt: skip


@given(
    st.lists(st.tuples(event_name, st.dictionaries(attribute, json_any, max_size=5)), max_size=8)
)
@settings(max_examples=150, deadline=None)
def test_router_never_raises_on_any_metadata(objects: list[tuple[str, dict[str, Any]]]) -> None:
    net = Network(["A", "B"])
    net.link("A", "B")
    net.join("A", "good")
    net.join("B", "other")
    for event, metadata in objects:
        net.send("A", "good", {**metadata, "event": event})
    net.send("A", "good", {"event": "ping", "id": "still-alive"})
    assert any(m.get("in-reply-to") == "still-alive" for m in net.nets["A"].pop("good"))


def test_a_client_cannot_take_the_servers_own_id() -> None:
    net = Net()
    net.take(net.router.connect("c"))
    net.send("c", {"event": "routing/subscribe", "id": "s", "routing-id": "server-1"})
    [error] = net.pop("c")
    assert error["event"] == "error"


def test_neighbor_announcements_reach_servers_only() -> None:
    net = Network(["A", "B", "C"])
    net.link("A", "B")
    net.link("B", "C")
    net.join("A", "x")
    net.join("B", "y")
    net.nets["A"].pop("x")
    net.nets["B"].pop("y")
    net.carried.clear()
    net.pump("A", net.nets["A"].router.announce())
    seen = [
        (where, obj) for where, obj in net.carried if (obj.event or "").startswith("routing/ann")
    ]
    assert [where for where, _ in seen] == ["B", "C"]  # across B to C, once each
    assert seen[0][1].metadata["node"] == "A"
    assert {n["role"] for n in seen[0][1].metadata["neighbors"]} == {"server", "client"}
    assert net.nets["A"].pop("x") == [] and net.nets["B"].pop("y") == []


def test_a_pong_to_the_servers_own_ping_ends_there_and_marks_the_client() -> None:
    net = Net()
    a = net.join("a")
    net.join("b")
    net.clear()
    [ping] = net.take(net.router.ping("a"))
    assert isinstance(ping, Deliver)
    info = net.router.peer("a")
    assert info is not None and not info.answers_pings
    # another client's pong (or a stale one) is an ordinary object: routed
    net.send("a", {"event": "pong", "in-reply-to": "something-else"})
    assert net.events("b") == ["pong"]
    net.send("a", {"event": "pong", "in-reply-to": ping.obj.id})
    assert net.events("b") == []  # answered to the server: routed nowhere
    info = net.router.peer("a")
    assert info is not None and info.answers_pings and info.routing_id == a


def _two_links(router: Router) -> Net:
    net = Net(router)
    for link in ("L1", "L2"):
        net.take(router.connect(link, trusted=True))
        net.send(link, {"event": "routing/subscribe", "role": "server", "routing-id": link})
    net.join("c")
    net.clear()
    return net


def test_a_copy_by_another_link_is_dropped_a_reused_id_by_the_same_link_is_not() -> None:
    net = _two_links(Router("srv"))
    first = {"event": "e", "id": "1", "route": ["far", "F"]}
    net.send("L1", first)
    net.send("L2", {**first, "route": ["far", "F", "G"]})  # the loop's second copy
    assert net.events("c") == ["e"]
    net.send("L1", {"event": "again", "id": "1", "route": ["far", "F"]})  # the sender reused "1"
    assert net.events("c") == ["again"]
    net.send("L2", {"event": "again", "id": "1", "route": ["far", "F", "G"]})
    assert net.events("c") == []


def test_id_less_objects_of_a_foreign_server_are_deduplicated_by_content() -> None:
    net = _two_links(Router("srv"))
    obj = {"event": "e", "route": ["far", "F"]}
    net.send("L1", obj, b"p")
    net.send("L2", {**obj, "route": ["far", "F", "G"]}, b"p")
    [got] = net.pop("c")
    assert got["id"]  # every copy gets the same id on every server
    net.send("L1", {**obj}, b"other payload")
    assert net.events("c") == ["e"]


# Issue 14: what Objectoplex and its clients send ---------------------------------------------


def test_a_rule_list_with_echo_true_delivers_the_clients_own_objects() -> None:
    net = Net()
    net.join("a", subscriptions=["!*", "@chat"], echo=True)
    net.join("b", subscriptions=["@chat"], echo=False)
    net.join("c", subscriptions=["@chat"])  # no echo attribute: a rule list does not echo
    net.clear()
    for conn in ("a", "b", "c"):
        net.send(conn, {"event": "chat", "id": f"from-{conn}"})
    assert [m["id"] for m in net.pop("a") if m.get("event") == "chat"] == [
        "from-a",
        "from-b",
        "from-c",
    ]
    assert [m["id"] for m in net.pop("b")] == ["from-a", "from-c"]
    assert [m["id"] for m in net.pop("c")] == ["from-a", "from-b"]


@pytest.mark.parametrize(
    ("wanted", "rules"),
    [
        ("all", ("*",)),
        ("none", ()),
        ("@*", ("@*",)),
        ("text/*, @*, !#hasselhoff", ("text/*", "@*", "!#hasselhoff")),
    ],
)
def test_subscriptions_given_as_a_string(wanted: str, rules: tuple[str, ...]) -> None:
    assert parse_subscription({"subscriptions": wanted}).rules == rules


def test_echo_must_be_a_boolean() -> None:
    with pytest.raises(SubscriptionError):
        parse_subscription({"subscriptions": ["*"], "echo": "yes"})


def test_a_nature_given_as_a_bare_string() -> None:
    assert passes_rules(BusinessObject({"natures": "hasselhoff"}), ["#hasselhoff"])
    assert not passes_rules(BusinessObject({"natures": "hasselhoff"}), ["#hassel"])


def test_a_ping_before_subscribing_is_answered_with_pong_other_objects_with_an_error() -> None:
    net = Net()
    net.take(net.router.connect("early"))
    net.send("early", {"event": "ping", "id": "p0"})
    [pong] = net.pop("early")
    assert pong["event"] == "pong" and pong["in-reply-to"] == "p0"
    net.send("early", {"event": "chat", "id": "c0"})
    [error] = net.pop("early")
    assert error["event"] == "error" and error["in-reply-to"] == "c0"


def test_notices_are_about_the_connection_so_foreign_servers_pass_them_on() -> None:
    net = Net()
    net.join("watcher")
    rid = net.join("x")
    notices = net.pop("watcher")
    assert [n["event"] for n in notices] == list(NOTIFY_EVENTS)
    assert all(n["route"] == [rid] for n in notices)
    net.take(net.router.disconnect("x"))
    [gone] = net.pop("watcher")
    assert gone["event"] == "routing/disconnect" and gone["route"] == [rid]


def test_a_notice_a_foreign_server_sends_back_is_dropped() -> None:
    net = _two_links(Router("srv"))  # L1: a foreign server that forwards everything back
    net.join("watcher")
    rid = net.join("x")
    net.clear()
    net.take(net.router.disconnect("x"))
    [(obj_id, route)] = [
        (m["id"], m["route"]) for m in net.pop("L1") if m["event"] == "routing/disconnect"
    ]
    assert route == [rid]  # no "srv": Objectoplex would not pass it on otherwise
    assert [m["event"] for m in net.pop("watcher")] == ["routing/disconnect"]
    echo = {"event": "routing/disconnect", "routing-id": rid, "id": obj_id, "route": [rid, "L1"]}
    net.send("L1", echo)
    assert net.pop("watcher") == []  # heard once, from us; the copy sent back is dropped


def test_nothing_goes_back_to_the_server_it_came_from() -> None:
    # L1 and L2 are two servers; L1 twice (a double link). What L1 brings (a notice it made
    # about its client, routed as [client], and a content object) reaches our client and L2,
    # and never L1 by either of its links: it only came back to be dropped as a copy (6.6)
    net = _two_links(Router("srv"))
    net.take(net.router.connect("L1b", trusted=True))
    net.send("L1b", {"event": "routing/subscribe", "role": "server", "routing-id": "L1"})
    net.clear()
    notice = {"event": "routing/subscribe/notify", "routing-id": "far", "id": "n1"}
    net.send("L1", {**notice, "route": ["far"]})
    net.send("L1", {"event": "e", "id": "e1", "route": ["far", "L1"]})
    assert net.events("c") == ["routing/subscribe/notify", "e"]
    assert net.events("L2") == ["routing/subscribe/notify", "e"]
    assert net.pop("L1") == [] and net.pop("L1b") == []


def test_our_server_subscription_is_one_objectoplex_takes_for_a_server() -> None:
    router = Router("A")
    [out] = router.connect("link", link=True)
    assert isinstance(out, Deliver)
    sub = out.obj.metadata
    assert sub["role"] == "server" and sub["types"] == "all" and sub["subscriptions"] == ["*"]
    assert "receive-mode" not in sub and "receive_mode" not in sub


def test_accepting_a_server_we_subscribe_back_before_replying() -> None:
    net = Net(Router("A"))
    net.take(net.router.connect("b", trusted=True))
    net.send("b", {"event": "routing/subscribe", "role": "server", "routing-id": "B", "id": "s"})
    assert [m["event"] for m in net.pop("b")] == ["routing/subscribe", "routing/subscribe/reply"]


# Issue 19: the server role is granted, not claimed --------------------------------------------


def test_a_plain_client_claiming_the_server_role_is_refused_and_sees_nothing_of_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    net = Net()
    a = net.join("a")
    b = net.join("b")
    net.take(net.router.connect("spy"))
    net.send("spy", {"event": "routing/subscribe", "id": "s", "role": "server", "routing-id": "x"})
    [error] = net.pop("spy")
    assert error["event"] == "error" and error["code"] == "forbidden"
    assert error["in-reply-to"] == "s"
    assert any("refused role: server" in r.getMessage() for r in caplog.records)
    info = net.router.peer("spy")
    assert info is not None and not info.server and not info.subscribed
    net.clear()
    net.send("a", {"event": "secret", "to": b, "type": "text/plain"}, b"for b only")
    net.send("b", {"event": "services/reply", "to": a, "in-reply-to": "q1"})
    assert net.pop("spy") == []
    assert net.events("b") == ["secret"]


def test_a_configured_server_link_still_gets_everything_both_ways() -> None:
    net = Network(["A", "B"])
    net.link("A", "B")
    rid_x = net.join("A", "x")
    rid_y = net.join("B", "y")
    net.nets["A"].pop("x")
    net.nets["B"].pop("y")
    net.send("A", "x", {"event": "private", "to": rid_y})
    net.send("B", "y", {"event": "answer", "to": rid_x})
    assert net.events("B", "y") == ["private"]
    assert net.events("A", "x") == ["answer"]


# Double links --------------------------------------------------------------------------------


def test_a_double_link_carries_one_copy_and_announces_the_server_once() -> None:
    net = Network(["A", "B"])
    net.link("A", "B")
    net.join("A", "watcher")
    net.nets["A"].pop("watcher")
    # B also links to A: a second connection between the same two servers.
    ca, cb = "link2-B", "link2-A"
    net.links[("A", ca)] = ("B", cb)
    net.links[("B", cb)] = ("A", ca)
    net.nets["A"].take(net.nets["A"].router.connect(ca, trusted=True))
    net.pump("B", net.nets["B"].router.connect(cb, link=True))
    assert net.events("A", "watcher") == []  # B was announced already
    net.join("B", "y")
    net.nets["B"].pop("y")
    net.carried.clear()
    net.send("A", "watcher", {"event": "hello"})
    assert [where for where, obj in net.carried if obj.event == "hello"] == ["B"]
    assert net.events("B", "y") == ["hello"]
    net.send("B", "y", {"event": "services/register", "name": "svc"})
    net.drop("A", "link-B")  # the first link goes: B is still there, its service too
    assert "routing/disconnect" not in net.events("A", "watcher")
    assert [name for name, _ in net.nets["A"].router.services()] == ["svc"]
    net.drop("A", ca)
    [gone] = net.nets["A"].pop("watcher")
    assert (gone["event"], gone["routing-id"]) == ("routing/disconnect", "B")


def test_a_link_secret_is_a_credential_for_the_server_role() -> None:
    """The third way issue 19 names: one operator's servers share a secret."""
    net = Net(Router("A", link_secret="s3cret"))
    for conn, secret in (("wrong", "guess"), ("right", "s3cret")):
        net.take(net.router.connect(conn))
        net.send(
            conn,
            {
                "event": "routing/subscribe",
                "role": "server",
                "routing-id": conn,
                "link-secret": secret,
            },
        )
    assert net.pop("wrong")[0]["code"] == "forbidden"
    info = net.router.peer("right")
    assert info is not None and info.server and info.subscribed
    # Our own server subscriptions carry it, so the other side may check it.
    [sub] = [m for m in net.pop("right") if m["event"] == "routing/subscribe"]
    assert sub["link-secret"] == "s3cret"
    [out] = Router("B").connect("x", link=True)
    assert isinstance(out, Deliver) and "link-secret" not in out.obj.metadata
