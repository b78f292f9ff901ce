"""The client's side of a link (bus/link/connection.py), sans-I/O: wired to the broker's own
sans-I/O
side (bus/broker/protocol.py) byte for byte in memory, and fed hostile answers."""

from __future__ import annotations

import pytest

from bus.broker.protocol import Authenticated, Authority, BrokerConnection, Inbound
from bus.errors import AuthError, ConnectError
from bus.frame.enums import CloseReason
from bus.link import auth, wire
from bus.link.connection import (
    TRANSITIONS,
    Accepted,
    ClientConnection,
    ClientEvent,
    ClientState,
    Closed,
    Received,
)
from bus.link.wire import NEED_DATA
from bus.message.message import Message, decode_message, encode_message

INBOX = "_INBOX.c0ffee"


def _client_events(client: ClientConnection) -> list[ClientEvent]:
    events = []
    while (event := client.next_event()) is not NEED_DATA:
        events.append(event)
    return events


def _pump(client: ClientConnection, broker: BrokerConnection, now: float = 0.0) -> list[object]:
    """Carry bytes both ways until neither side has more; the broker accepts what authenticates."""
    seen: list[object] = []
    for _ in range(10):
        out = client.data_to_send()
        if out:
            broker.receive_data(out, now)
        while (event := broker.next_event()) is not NEED_DATA:
            seen.append(event)
            if isinstance(event, Authenticated):
                broker.accept()
        back = broker.data_to_send()
        if back:
            client.receive_data(back, now)
        seen.extend(_client_events(client))
        if not out and not back:
            break
    return seen


def _pair(
    secret: str | None, offices: dict[str, str], open_mode: bool = False, **kw: object
) -> tuple[ClientConnection, BrokerConnection]:
    client = ClientConnection(name="alice", secret=secret, inbox=INBOX, now=0.0, **kw)  # type: ignore[arg-type]
    broker = BrokerConnection(Authority(offices, open_mode), 0.0)
    client.start()
    return client, broker


@pytest.mark.parametrize("mode", ["hmac-sha256", "sha256"])
def test_a_client_authenticates_and_messages_flow_both_ways(mode: str) -> None:
    client, broker = _pair("s3cret", {"alice": "s3cret"}, mode=mode)
    seen = _pump(client, broker)
    accepted = [e for e in seen if isinstance(e, Accepted)]
    assert client.state is ClientState.READY and broker.ready
    assert accepted and accepted[0].info.name == "alice" and accepted[0].info.inbox == INBOX
    message = Message.request("demo", "echo", {"x": 1}, reply_to=INBOX)
    message.src = "alice"  # the broker forwards a request naming its own sender as it came
    request = encode_message(message)
    broker.receive_data(wire.encode_message(request), 1.0)
    inbound = broker.next_event()
    assert isinstance(inbound, Inbound) and inbound.raw == request
    client.receive_data(wire.encode_message(request), 1.0)
    assert _client_events(client) == [Received(request)]


def test_messages_taken_in_batches_are_the_received_events() -> None:
    client, broker = _pair(None, {}, open_mode=True)
    bodies = [encode_message(Message.event("sensor.temp", {"n": n})) for n in range(3)]
    assert client.next_messages() == []  # not READY yet: next_event has the handshake
    _pump(client, broker)
    assert client.state is ClientState.READY
    client.receive_data(b"".join(wire.encode_message(body) for body in bodies), 1.0)
    taken = client.next_messages()
    if wire.use_accelerator(True):
        assert taken == bodies
    else:  # no accelerator: next_event gives them
        assert taken == [] and _client_events(client) == [Received(body) for body in bodies]
    client.receive_data(wire.encode_message(bodies[0]) + b"\x00", 1.0)  # then garbage
    taken = client.next_messages()
    events = _client_events(client)
    assert [Received(raw) for raw in taken] + events[:-1] == [Received(bodies[0])]
    assert isinstance(events[-1], Closed) and client.next_messages() == []


def test_a_wrong_secret_closes_with_the_reason_and_the_error_to_raise() -> None:
    client, broker = _pair("wrong", {"alice": "s3cret"})
    seen = _pump(client, broker)
    closed = [e for e in seen if isinstance(e, Closed)]
    assert client.state is ClientState.CLOSED
    assert closed and isinstance(closed[0].error, AuthError)
    assert "wrong secret" in str(closed[0].error)


def test_a_broker_that_cannot_prove_the_secret_is_refused() -> None:
    # The broker's accept carries a proof made with another secret: an impostor.
    client, broker = _pair("s3cret", {"alice": "s3cret"})
    broker.receive_data(client.data_to_send(), 0.0)
    while broker.next_event() is not NEED_DATA:
        pass
    client.receive_data(broker.data_to_send(), 0.0)  # the challenge
    assert _client_events(client) == [] and client.state is ClientState.CHALLENGED
    broker.receive_data(client.data_to_send(), 0.0)
    assert isinstance(broker.next_event(), Authenticated)
    broker.authority.offices["alice"] = "another"  # the broker signs with a secret it made up
    broker.accept()
    client.receive_data(broker.data_to_send(), 0.0)
    events = _client_events(client)
    assert isinstance(events[-1], Closed) and isinstance(events[-1].error, AuthError)
    assert "failed to prove" in str(events[-1].error)
    assert client.data_to_send().endswith(
        wire.encode_disconnect(CloseReason.AUTHENTICATION_FAILURE)
    )


def test_open_mode_and_a_refused_connection() -> None:
    client, broker = _pair(None, {}, open_mode=True)
    _pump(client, broker)
    assert client.state is ClientState.READY and client.mode == "open"
    refused = ClientConnection(name="", secret=None, inbox=INBOX, now=0.0)
    refused.start()
    refused.receive_data(wire.encode_disconnect(CloseReason.CONNECTION_REFUSED), 0.0)
    event = refused.next_event()
    assert isinstance(event, Closed) and isinstance(event.error, ConnectError)
    assert event.by_peer


def test_keepalive_pings_and_closes_after_silence() -> None:
    client, broker = _pair(None, {}, open_mode=True)
    _pump(client, broker)
    interval = client.ping_interval
    client.tick(interval / 2)
    assert client.data_to_send() == wire.encode_ping()
    client.tick(interval / 2 + 0.01)  # not yet another
    assert client.data_to_send() == b""
    client.receive_data(wire.encode_ping(), interval)  # the broker's ping is life
    client.tick(interval * 2.4)
    assert client.state is ClientState.READY
    client.tick(interval * 2.6)  # 1.6 intervals of silence
    event = client.next_event()
    assert isinstance(event, Closed) and event.reason is CloseReason.TIMEOUT
    assert client.data_to_send().endswith(wire.encode_disconnect(CloseReason.TIMEOUT))


def test_garbage_from_the_broker_is_a_protocol_error_close() -> None:
    client, broker = _pair(None, {}, open_mode=True)
    _pump(client, broker)
    client.receive_data(b"\x09\x09", 1.0)
    event = client.next_event()
    assert isinstance(event, Closed) and event.reason is CloseReason.PROTOCOL_ERROR
    assert "bad frame type" in event.detail and event.error is None  # READY: a lost link


def test_every_state_can_close_and_closed_is_final() -> None:
    states = {state for state, _ in TRANSITIONS}
    assert ClientState.CLOSED not in states
    assert {target for target in TRANSITIONS.values()} >= {ClientState.READY, ClientState.CLOSED}


def test_the_hmac_proof_is_the_documented_one() -> None:
    # The manage.auth proof the client sends is auth.client_proof over both nonces.
    nonces = iter([b"\x01" * auth.NONCE_SIZE])
    client = ClientConnection(
        name="alice", secret="s3cret", inbox=INBOX, now=0.0, nonce=lambda: next(nonces)
    )
    broker = BrokerConnection(
        Authority({"alice": "s3cret"}), 0.0, nonce=lambda: b"\x02" * auth.NONCE_SIZE
    )
    client.start()
    broker.receive_data(client.data_to_send(), 0.0)
    broker.next_event()
    client.receive_data(broker.data_to_send(), 0.0)
    client.next_event()
    decoder = wire.WireDecoder()
    decoder.receive_data(client.data_to_send())
    sent = decoder.next_event()
    assert isinstance(sent, wire.MessageReceived)
    proof = decode_message(sent.data).payload["proof"]
    expected = auth.client_proof(
        b"s3cret", "alice", b"\x01" * auth.NONCE_SIZE, b"\x02" * auth.NONCE_SIZE
    )
    assert proof == expected
