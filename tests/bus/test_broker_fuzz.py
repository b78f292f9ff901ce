"""Property tests: a broker connection survives any bytes; the router stays balanced."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from bus.broker.protocol import Authority, BrokerConnection, Closed, Inbound, State
from bus.broker.routing import Router
from bus.frame.enums import CloseReason
from bus.link import wire


def _drain(conn: BrokerConnection) -> list[object]:
    events: list[object] = []
    while (event := conn.next_event()) is not wire.NEED_DATA:
        events.append(event)
    return events


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=12))
def test_any_bytes_before_authentication_never_route_and_never_raise(chunks: list[bytes]) -> None:
    conn = BrokerConnection(Authority({"po": "pw"}), 0.0, max_message_size=4096)
    events: list[object] = []
    for chunk in chunks:
        if chunk:
            conn.receive_data(chunk, 0.0)
            events += _drain(conn)
    assert not [event for event in events if isinstance(event, Inbound)]
    assert conn.state in (State.AWAIT_CONNECT, State.CLOSED)
    closes = [event for event in events if isinstance(event, Closed)]
    assert len(closes) <= 1
    if closes:
        assert closes[0].reason in (
            CloseReason.PROTOCOL_ERROR,
            CloseReason.AUTHENTICATION_FAILURE,
        )


@settings(max_examples=200, deadline=None)
@given(
    consumers=st.integers(min_value=1, max_value=6),
    operations=st.lists(st.sampled_from(["choose", "join", "leave"]), max_size=60),
)
def test_round_robin_stays_within_one_of_even(consumers: int, operations: list[str]) -> None:
    router = Router()
    members = list(range(1, consumers + 1))
    for conn in members:
        router.add_connection(conn, f"po{conn}", f"_INBOX.{conn}")
        router.consume(conn, "g")
    next_conn = consumers + 1
    counts: Counter[int] = Counter()
    for operation in operations:
        if operation == "join":
            router.add_connection(next_conn, "po", f"_INBOX.{next_conn}")
            router.consume(next_conn, "g")
            members.append(next_conn)
            next_conn += 1
            counts.clear()
        elif operation == "leave" and len(members) > 1:
            router.leave(members.pop(0), "g")
            counts.clear()
        else:
            chosen = router.choose("g")
            assert chosen in members
            counts[chosen] += 1
    # Between membership changes, no consumer gets more than one request above another.
    if counts:
        assert max(counts.values()) - min(counts.get(m, 0) for m in members) <= 1
