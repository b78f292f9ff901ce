"""One broker connection's sans-I/O state machine (``bus/broker/protocol.py``, PROTOCOL.md 4)."""

from __future__ import annotations

import shlex

import pytest

from bus.broker.protocol import (
    TRANSITIONS,
    Authenticated,
    AuthMode,
    Authority,
    BrokerConnection,
    Closed,
    Inbound,
    State,
    Step,
)
from bus.frame.enums import CloseReason
from bus.link import auth, wire
from bus.message.message import Message, decode_message, encode_message
from tests.docexamples import Example, examples

CONNECT_EXAMPLES = examples("connect")


def _one_line(text: str) -> str:
    return " ".join(text.split("\n"))


def _frame(text: str) -> bytes:
    """A JSON message as the wire frames a JSON client sends."""
    return wire.encode_message(_one_line(text).encode("latin-1"))


def _run(conn: BrokerConnection, data: bytes, now: float = 0.0) -> list[object]:
    """Feed bytes; accept every Authenticated (as the server does); return the events."""
    conn.receive_data(data, now)
    events: list[object] = []
    while (event := conn.next_event()) is not wire.NEED_DATA:
        events.append(event)
        if isinstance(event, Authenticated):
            conn.accept()
    return events


def _output(conn: BrokerConnection) -> tuple[list[Message], CloseReason | None]:
    """Decode what the connection wants to send: messages, and the Disconnect reason if any."""
    decoder = wire.WireDecoder()
    decoder.receive_data(conn.data_to_send())
    messages: list[Message] = []
    reason = None
    for event in decoder.events():
        if isinstance(event, wire.MessageReceived):
            messages.append(decode_message(event.data))
        elif isinstance(event, wire.DisconnectReceived):
            reason = event.reason
    return messages, reason


def _check(message: Message, spec: str) -> None:
    typ, *pairs = shlex.split(_one_line(spec))
    assert message.typ == typ, message
    for pair in pairs:
        key, _, want = pair.partition("=")
        value = message.frame.get(key) if key.isupper() else message.payload.get(key)
        assert str(value) == want, (key, value, want)


def _connection(example: Example, authority: Authority) -> BrokerConnection:
    server_nonce = bytes.fromhex(example.body["ns"]) if "ns" in example.body else None
    return BrokerConnection(
        authority, 0.0, nonce=(lambda: server_nonce) if server_nonce else auth.new_nonce
    )


def test_the_document_has_connect_examples() -> None:
    assert {e.id for e in CONNECT_EXAMPLES} >= {
        "sha256-accept",
        "sha256-replay",
        "sha256-wrong-secret",
        "message-before-auth",
        "hmac-accept",
        "hmac-wrong-secret",
    }


@pytest.mark.parametrize("example", CONNECT_EXAMPLES, ids=lambda e: e.id)
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "byte-by-byte"])
def test_connect_examples_of_the_document(example: Example, chunked: bool) -> None:
    authority = Authority({"test1": "secret"})
    if "replay" in example.body:  # a first link uses the id; this one replays it
        first = _connection(example, authority)
        _run(first, _frame(example.body["send"]))
        assert first.ready
    conn = _connection(example, authority)
    data = _frame(example.body["send"])
    if chunked:
        for index in range(len(data)):
            _run(conn, data[index : index + 1])
    else:
        _run(conn, data)
    messages, reason = _output(conn)
    _check(messages[0], example.body["reply"])
    if "auth" in example.body:
        _run(conn, _frame(example.body["auth"]))
        messages, reason = _output(conn)
        _check(messages[0], example.body["accept"])
    if "close" in example.body:
        assert reason is CloseReason[example.body["close"]]
        assert conn.state is State.CLOSED
    else:
        assert reason is None and conn.ready


def _ready(authority: Authority | None = None, **kwargs: float) -> BrokerConnection:
    authority = authority or Authority({"po": "pw"})
    conn = BrokerConnection(authority, 0.0, **kwargs)  # type: ignore[arg-type]
    connect = Message(
        {
            "MID": "AB.po",
            "TYP": "OAM",
            "CMD": "manage.connect",
            "SRC": "po",
            "PLD": {
                "mode": "sha256",
                "inbox": "_INBOX.x",
                "authenticator": auth.mop_authenticator(b"pw", "po", "AB.po"),
            },
        }
    )
    events = _run(conn, wire.encode_message(encode_message(connect)))
    assert events == [Authenticated("po", "_INBOX.x", AuthMode.SHA256)]
    conn.data_to_send()
    return conn


def test_after_the_handshake_messages_come_out_with_their_exact_bytes() -> None:
    conn = _ready()
    request = Message.request("demo", "echo", {"x": 1}, reply_to="_INBOX.x")
    request.src = "po.desk"  # its own post office: nothing to stamp (PROTOCOL.md 5.11)
    raw = encode_message(request)
    events = _run(conn, wire.encode_message(raw))
    assert len(events) == 1 and isinstance(events[0], Inbound)
    assert events[0].raw == raw and events[0].message.cmd == "echo"


def test_a_request_without_src_comes_out_with_the_post_office_appended() -> None:
    conn = _ready()
    raw = encode_message(Message.request("demo", "echo", {"x": 1}, reply_to="_INBOX.x"))
    events = _run(conn, wire.encode_message(raw))
    assert len(events) == 1 and isinstance(events[0], Inbound)
    assert events[0].raw.startswith(raw) and events[0].message.src == "po"
    assert decode_message(events[0].raw).src == "po"


def test_pings_every_interval_and_a_silent_peer_is_dropped_after_one_and_a_half() -> None:
    conn = _ready(ping_interval=5.0)
    conn.tick(5.0)
    assert conn.data_to_send() == wire.encode_ping()
    conn.receive_data(wire.encode_ping(), 6.0)
    assert conn.next_event() is wire.NEED_DATA
    conn.tick(6.0 + 7.4)
    assert conn.ready
    conn.tick(6.0 + 7.6)
    assert conn.next_event() == Closed(CloseReason.TIMEOUT, "silent for 1.5 ping intervals")
    assert conn.data_to_send().endswith(wire.encode_disconnect(CloseReason.TIMEOUT))


def test_no_connect_before_the_deadline_closes_with_timeout() -> None:
    conn = BrokerConnection(Authority({}), 0.0, connect_timeout=5.0)
    conn.tick(5.1)
    event = conn.next_event()
    assert isinstance(event, Closed) and event.reason is CloseReason.TIMEOUT
    assert conn.data_to_send() == wire.encode_disconnect(CloseReason.TIMEOUT)


def test_an_oversized_message_is_a_protocol_error() -> None:
    conn = _ready(max_message_size=1000)
    events = _run(conn, wire.encode_message(b"x" * 2000))
    assert len(events) == 1 and isinstance(events[0], Closed)
    assert events[0].reason is CloseReason.PROTOCOL_ERROR
    assert conn.data_to_send() == wire.encode_disconnect(CloseReason.PROTOCOL_ERROR)


def test_a_peer_disconnect_closes_without_answering() -> None:
    conn = _ready()
    events = _run(conn, wire.encode_disconnect(CloseReason.CLIENT_CLOSING))
    assert events == [
        Closed(CloseReason.CLIENT_CLOSING, "peer sent Disconnect CLIENT_CLOSING", True)
    ]
    assert conn.data_to_send() == b""


def _open_connect(name: str | None) -> bytes:
    frame: dict[str, object] = {
        "MID": "o1",
        "TYP": "OAM",
        "CMD": "manage.connect",
        "PLD": {"mode": "open", "inbox": "_INBOX.o"},
    }
    if name:
        frame["SRC"] = name
    return wire.encode_message(encode_message(Message(frame)))


def test_open_mode_only_when_enabled_and_never_for_a_name_with_a_secret() -> None:
    refused = BrokerConnection(Authority({"po": "pw"}, open_mode=False), 0.0)
    _run(refused, _open_connect(None))
    messages, reason = _output(refused)
    assert messages[0].rcd == 401 and "open mode" in (messages[0].msg or "")
    assert reason is CloseReason.AUTHENTICATION_FAILURE

    taken = BrokerConnection(Authority({"po": "pw"}, open_mode=True), 0.0)
    _run(taken, _open_connect("po"))
    assert _output(taken)[1] is CloseReason.AUTHENTICATION_FAILURE

    allowed = BrokerConnection(Authority({"po": "pw"}, open_mode=True), 0.0)
    events = _run(allowed, _open_connect(None))
    assert events == [Authenticated("anonymous", "_INBOX.o", AuthMode.OPEN)]
    assert allowed.ready


def test_the_accept_says_reconnect_for_a_post_office_seen_before() -> None:
    authority = Authority({"po": "pw"})
    _ready(authority)
    conn = BrokerConnection(authority, 0.0)
    connect = Message(
        {
            "MID": "AC.po",
            "TYP": "OAM",
            "CMD": "manage.reconnect",
            "SRC": "po",
            "PLD": {
                "mode": "sha256",
                "inbox": "_INBOX.y",
                "authenticator": auth.mop_authenticator(b"pw", "po", "AC.po"),
            },
        }
    )
    _run(conn, wire.encode_message(encode_message(connect)))
    messages, _ = _output(conn)
    assert messages[0].typ == "ACK" and messages[0].cmd == "manage.reconnect"


def test_the_transition_table_closes_from_every_state_and_nothing_leaves_closed() -> None:
    for state in State:
        if state is not State.CLOSED:
            assert TRANSITIONS[(state, Step.CLOSE)] is State.CLOSED
    assert not [key for key in TRANSITIONS if key[0] is State.CLOSED]
    assert (State.AWAIT_CONNECT, Step.MESSAGE) not in TRANSITIONS


def test_a_ping_is_echoed_as_dtronixmq_servers_do() -> None:
    # Seed 002's server answers a client's Ping with a Ping (issue 14).
    conn = BrokerConnection(Authority({"test1": "secret"}), 0.0, ping_interval=5.0)
    assert _run(conn, wire.encode_ping(), now=1.0) == []
    assert conn.data_to_send() == wire.encode_ping()
    # A Ping arriving within half an interval of the last echo is not echoed again, so two
    # peers that both echo cannot bounce one between them forever.
    _run(conn, wire.encode_ping(), now=1.1)
    assert conn.data_to_send() == b""
    _run(conn, wire.encode_ping(), now=3.6)
    assert conn.data_to_send() == wire.encode_ping()


def _run_batched(conn: BrokerConnection, data: bytes) -> list[object]:
    """As _run on a READY connection, the messages taken with next_messages where it gives
    them (as bus/broker/link.py does)."""
    conn.receive_data(data, 0.0)
    events: list[object] = []
    while True:
        for raw in conn.next_messages():
            routable = conn.read_routable(raw)
            if routable is None:
                break
            events.append(Inbound(*routable))
        event = conn.next_event()
        if event is wire.NEED_DATA:
            return events
        events.append(event)


def test_messages_taken_in_batches_are_the_inbound_events_then_the_close() -> None:
    args = {"x": "y" * 300}  # larger than the handshake's messages
    request = encode_message(Message.request("demo", "echo", args, reply_to="_INBOX.x"))
    size = len(request) + 5  # the request fits, but not once SRC is stamped on it
    bodies = [encode_message(Message.event("sensor.temp", {"n": n})) for n in range(3)] + [request]
    data = b"".join(wire.encode_message(body) for body in bodies[:2]) + wire.encode_ping()
    data += b"".join(wire.encode_message(body) for body in bodies[2:])
    data += wire.encode_message(bodies[0])  # after the close: never read
    one, other = _ready(max_message_size=size), _ready(max_message_size=size)
    expected = _run(one, data)
    assert [type(event) for event in expected] == [Inbound] * 3 + [Closed]
    assert _run_batched(other, data) == expected
    assert other.data_to_send() == one.data_to_send()
    assert other.next_messages() == [] and other.read_routable(bodies[0]) is None
