"""A MOP link's state machine and the admission rule (``bus/mop/protocol.py``, PROTOCOL.md 11.2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.errors import DecodeError, ProtocolError
from bus.link import auth
from bus.mop.codec import (
    NEED_DATA,
    FrameReceived,
    MopDeframer,
    MopMessage,
    decode_message,
    encode_frame,
)
from bus.mop.protocol import (
    TRANSITIONS,
    Admission,
    Closed,
    ConnectRequested,
    MopConnection,
    Received,
    Skipped,
    State,
    id_counter,
)
from tests.docexamples import examples

SECRETS = {"test1": b"secret"}


def _admission(open_mode: bool = False) -> Admission:
    return Admission(SECRETS.get, lambda: open_mode)


def _events(conn: MopConnection) -> list[object]:
    found = []
    while (event := conn.next_event()) is not NEED_DATA:
        found.append(event)
    return found


def _sent(conn: MopConnection) -> list[MopMessage]:
    deframer = MopDeframer()
    deframer.receive_data(conn.data_to_send())
    messages = []
    while isinstance(event := deframer.next_event(), FrameReceived):
        messages.append(decode_message(event.data))
    return messages


def _message(name: str, counter: int, secret: bytes = b"secret") -> MopMessage:
    message_id = f"{auth.b64_encode_int(counter)}.{name}"
    fields = {"authenticator": auth.mop_authenticator(secret, name, message_id)}
    return MopMessage(
        f"{name}.po", message_id, to="central.po", type="manage.connect", fields=fields
    )


def _connect(name: str, counter: int, secret: bytes = b"secret") -> bytes:
    return encode_frame(_message(name, counter, secret))


def _ready(admission: Admission, conn_id: object, counter: int = 1) -> MopConnection:
    conn = MopConnection(0.0, ping_interval=1.0)
    conn.receive_data(_connect("test1", counter), 0.0)
    [event] = _events(conn)
    assert isinstance(event, ConnectRequested)
    assert admission.check(event.message, conn_id) is None
    first, _ = admission.accepted(event.message, conn_id)
    conn.accept(first)
    conn.data_to_send()
    return conn


def test_the_document_connect_example() -> None:
    [example] = examples("mop")
    conn = MopConnection(0.0)
    send = example.body["send"]
    conn.receive_data(b"[[[" + _length(send) + b"]" + send.encode() + b"]]", 0.0)
    [event] = _events(conn)
    assert isinstance(event, ConnectRequested) and event.post_office == "test1"
    admission = Admission({"test1": example.body["secret"].encode()}.get, lambda: False)
    assert admission.check(event.message, "link") is None
    first, displaced = admission.accepted(event.message, "link")
    assert first and displaced is None
    conn.accept(first)
    raw = conn.data_to_send()
    accept = example.body["accept"].encode()
    assert raw == b"[[[" + _length(example.body["accept"]) + b"]" + accept + b"]]"
    assert conn.state is State.READY


def _length(text: str) -> bytes:
    return auth.b64_encode_int(len(text.encode())).encode()


def test_the_transition_table_covers_every_state() -> None:
    assert {state for state, _ in TRANSITIONS} == set(State) - {State.CLOSED}
    conn = MopConnection(0.0)
    with pytest.raises(ProtocolError):
        conn.accept(True)  # nothing asked to connect yet


@pytest.mark.parametrize(
    "first",
    [
        MopMessage("test1.io", "AB.test1", type="sensor.temp"),  # a publication
        MopMessage("test1.po", "AB.test1", to="central.po", type="manage.pong"),
        MopMessage("test1.po", "AB.test1", to="other.po", type="manage.connect"),
    ],
)
def test_anything_but_a_connect_first_closes_the_link(first: MopMessage) -> None:
    conn = MopConnection(0.0)
    conn.receive_data(encode_frame(first), 0.0)
    [event] = _events(conn)
    assert isinstance(event, Closed) and "manage.connect" in event.reason
    assert conn.state is State.CLOSED


def test_messages_wait_while_the_connect_is_decided() -> None:
    conn = MopConnection(0.0)
    publish = encode_frame(MopMessage("test1.io", "AC.test1", type="sensor.temp"))
    conn.receive_data(_connect("test1", 1) + publish, 0.0)
    assert [type(e) for e in _events(conn)] == [ConnectRequested]
    conn.accept(True)
    [event] = _events(conn)
    assert isinstance(event, Received) and event.message.type == "sensor.temp"


def test_a_refused_connect_closes_without_a_message() -> None:
    conn = MopConnection(0.0)
    conn.receive_data(_connect("test1", 1, secret=b"wrong"), 0.0)
    [event] = _events(conn)
    assert isinstance(event, ConnectRequested)
    assert _admission().check(event.message, "x") == auth.LOGIN_REFUSED
    conn.refuse(auth.LOGIN_REFUSED)
    [closed] = _events(conn)
    assert isinstance(closed, Closed) and auth.LOGIN_REFUSED in closed.reason
    assert conn.data_to_send() == b""


def test_pings_every_interval_pong_is_life_silence_closes() -> None:
    conn = _ready(_admission(), "link")
    conn.tick(0.5)
    assert _sent(conn) == []
    conn.tick(1.0)
    [ping] = _sent(conn)
    assert (ping.sender, ping.to, ping.type) == ("central.po", "test1.po", "manage.ping")
    pong = MopMessage("test1.po", "AC.test1", to="central.po", type="manage.pong")
    conn.receive_data(encode_frame(pong), 1.2)
    assert _events(conn) == []  # consumed by the connection
    conn.tick(2.0)
    [ping] = _sent(conn)
    conn.tick(2.6)
    assert conn.state is State.READY
    conn.tick(2.71)  # 1.5 intervals after the pong, the ping unanswered for 0.71
    [closed] = _events(conn)
    assert isinstance(closed, Closed) and "manage.pong" in closed.reason


def test_a_late_tick_pings_before_it_closes() -> None:
    # The driver's loop was busy past 1.5 intervals: the post office was never asked, so it
    # gets a ping and half an interval to answer (a CI run closed an unasked link).
    conn = _ready(_admission(), "link")
    conn.tick(3.0)
    [ping] = _sent(conn)
    assert ping.type == "manage.ping" and conn.state is State.READY
    conn.tick(3.49)
    assert conn.state is State.READY and _sent(conn) == []
    conn.tick(3.5)
    [closed] = _events(conn)
    assert isinstance(closed, Closed) and "manage.pong" in closed.reason


def test_no_connect_within_the_timeout_closes() -> None:
    conn = MopConnection(0.0, connect_timeout=5.0)
    conn.tick(5.1)
    [closed] = _events(conn)
    assert isinstance(closed, Closed)


def test_garbage_is_reported_and_the_link_goes_on() -> None:
    conn = _ready(_admission(), "link")
    conn.receive_data(
        b"junk[[[AC]{}]]" + encode_frame(MopMessage("test1.io", "AD.test1", type="a.b")), 0.1
    )
    events = _events(conn)
    assert [type(e) for e in events] == [Skipped, Skipped, Received]


def test_a_replayed_connect_is_refused_while_the_post_office_is_live() -> None:
    admission = _admission()
    live = _ready(admission, "live", counter=1)
    assert live.state is State.READY
    # The live link carries more messages (ids AC, AD, ...).
    admission.observe("test1", "live", "AE.test1")
    for counter in (1, 4):  # the recorded connect (AB), or any id the live link already used
        refusal = admission.check(_message("test1", counter), "attacker")
        assert refusal is not None and "replayed" in refusal
    assert admission.live("test1")  # the live link stays
    newer = _message("test1", 9)  # the post office itself, reconnecting with its next id
    assert admission.check(newer, "new") is None
    first, displaced = admission.accepted(newer, "new")
    assert not first and displaced == "live"


def test_a_restarted_post_office_is_not_locked_out() -> None:
    admission = _admission()
    _ready(admission, "old", counter=1)
    admission.observe("test1", "old", "Bk.test1")
    admission.gone("test1", "old")  # the old link died with the process
    restarted = _message("test1", 1)  # AB.test1 again
    assert admission.check(restarted, "new") is None


def test_open_mode_admits_post_offices_without_a_secret_only() -> None:
    message = _message("stranger", 1)
    # the same words as a wrong secret: a stranger cannot list the post offices
    assert _admission(open_mode=False).check(message, "x") == auth.LOGIN_REFUSED
    assert _admission(open_mode=True).check(message, "x") is None
    wrong = _message("test1", 1, secret=b"nope")
    assert _admission(open_mode=True).check(wrong, "x") == auth.LOGIN_REFUSED


def test_id_counters() -> None:
    assert id_counter("AB.test1", "test1") == 1
    assert id_counter("Bk.test1", "test1") == 100
    for bad in ("AB.other", "AB", ".test1", "!!.test1"):
        with pytest.raises(DecodeError):
            id_counter(bad, "test1")


def test_a_flood_of_garbage_closes_the_link() -> None:
    conn = _ready(_admission(), "link")
    conn.max_message_size = 100
    events = []
    for _ in range(20):
        conn.receive_data(b"x" * 10_000, 0.1)
        events += _events(conn)
        if conn.state is State.CLOSED:
            break
    assert isinstance(events[-1], Closed) and "without a usable frame" in events[-1].reason
    assert sum(e.size for e in events if isinstance(e, Skipped)) <= 80_000


@given(st.lists(st.binary(max_size=200), max_size=10), st.booleans())
@settings(max_examples=200, deadline=None)
def test_any_bytes_give_events_never_exceptions(chunks: list[bytes], ready: bool) -> None:
    admission = _admission()
    conn = _ready(admission, "link") if ready else MopConnection(0.0)
    for at, chunk in enumerate(chunks):
        conn.receive_data(chunk, at * 0.1)
        for event in _events(conn):
            assert isinstance(event, ConnectRequested | Received | Skipped | Closed)
            if isinstance(event, ConnectRequested):
                admission.check(event.message, "fuzz")  # never raises either
                conn.refuse("fuzz")
        conn.tick(at * 0.1)
        conn.data_to_send()
