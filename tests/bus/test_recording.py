"""What the NATS recorder decides (``bus/recording.py``, PROTOCOL.md 10.2), without I/O."""

from __future__ import annotations

import pytest

from bus.frame.enums import Encoding
from bus.message.header import accelerated, use_accelerator
from bus.message.message import Message, decode_message, encode_message
from bus.recording import (
    AckWindow,
    StreamCursor,
    Take,
    delivery,
    plain_record,
    recorded_subject,
    stream_record,
)
from tests.docexamples import examples


@pytest.fixture(params=[True, False], ids=["accelerated", "pure"])
def header_reader(request: pytest.FixtureRequest) -> object:
    """Both header readers: the C accelerator and the reference decoder."""
    was = accelerated()  # use_accelerator returns the new state, not the one before
    use_accelerator(request.param)
    yield request.param
    use_accelerator(was)


def _event(enc: Encoding = Encoding.FRAM, **extra: object) -> Message:
    message = Message.event("sensor.temp", {"c": 18.5, "where": "hall"})
    message.mid = "m-1"
    for name, value in extra.items():
        message.frame[name] = value
    if enc is not Encoding.FRAM:
        message.frame["ENC"] = enc.value
    return message


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_a_stream_event_is_recorded_as_published_with_its_stream_sequence(
    header_reader: object, enc: Encoding
) -> None:
    published = _event(enc)
    raw = encode_message(published)
    body = stream_record(raw, 41)
    assert body is not None
    recorded = decode_message(body)
    assert recorded.seq == 41
    assert recorded.payload.to_dict() == {"c": 18.5, "where": "hall"}
    assert (recorded.mid, recorded.grp, recorded.typ, recorded.enc) == (
        "m-1",
        "sensor.temp",
        "EVT",
        enc,
    )
    if enc is Encoding.FRAM:
        assert body.startswith(raw)  # spliced on, not re-encoded


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_a_sequence_the_publisher_put_in_is_replaced(header_reader: object, enc: Encoding) -> None:
    raw = encode_message(_event(enc, SEQ=7, RPL="sensor.*"))
    body = stream_record(raw, 1200)
    assert body is not None
    recorded = decode_message(body)
    assert recorded.frame.get_all("SEQ") == [1200]
    assert recorded.rpl == "sensor.*"


NO_EVENTS = [
    b"plain text",
    b"\xff\x00\x01 bytes",
    b"",  # an empty data frame: no TYP
    b"[1, 2",
    encode_message(Message.request("demo", "echo", {"x": 1})),  # a request on an event subject
]


@pytest.mark.parametrize("raw", NO_EVENTS)
def test_what_is_no_bus_event_is_not_recorded_from_the_stream(
    header_reader: object, raw: bytes
) -> None:
    assert stream_record(raw, 3) is None


def test_the_plain_subscription_records_messages_as_they_came(header_reader: object) -> None:
    request = encode_message(Message.request("demo", "echo", {"x": 1}))
    assert plain_record(request) is request
    text = b"not a frame"
    assert plain_record(text) is text
    # a request may carry any field: only an event's SEQ would mislead the journal's tail
    odd = Message.request("demo", "echo", {"x": 1})
    odd.frame["SEQ"] = 5
    assert plain_record(encode_message(odd)) == encode_message(odd)


@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_an_event_outside_the_stream_loses_a_sequence_of_its_own(
    header_reader: object, enc: Encoding
) -> None:
    body = plain_record(encode_message(_event(enc, SEQ=99)))
    recorded = decode_message(body)
    assert recorded.seq is None and recorded.mid == "m-1"
    assert recorded.payload.to_dict() == {"c": 18.5, "where": "hall"}


@pytest.mark.parametrize(
    ("subject", "from_stream", "recorded"),
    [
        ("bus.evt.sensor.temp", True, False),  # the stream brings it, with its sequence
        ("bus.evt.sensor.temp", False, True),  # no JetStream: the plain subscription does
        ("bus.grp.demo", True, True),
        ("bus.all.demo", True, True),
        ("bus.po.bob", True, True),
        ("bus._INBOX.abc", True, True),  # a response
        ("bus._INBOX.abc.js.17", True, False),  # JetStream's PubAck to a confirmed publish
        ("bus._INBOX.abc.r.FRAM.m-1", True, False),  # NATS's no-responders status
        ("prod.evt.x", True, False),  # under prefix "prod"
        ("prod.grp.x", True, True),
    ],
)
def test_which_subjects_the_plain_subscription_records(
    subject: str, from_stream: bool, recorded: bool
) -> None:
    prefix = subject.split(".")[0]
    assert recorded_subject(subject, prefix, from_stream) is recorded


def test_the_cursor_takes_each_stream_message_once_in_order() -> None:
    cursor = StreamCursor(position=10)
    steps = [
        ((9, 1), Take.SKIP),  # the journal has it (the consumer began before the tail)
        ((10, 2), Take.SKIP),
        ((11, 3), Take.APPEND),
        ((14, 4), Take.APPEND),  # a gap in the stream (another prefix, a deleted message)
        ((14, 5), Take.SKIP),  # delivered again
        ((16, 7), Take.RESTART),  # delivery 6 never came
    ]
    for (stream_seq, number), expected in steps:
        assert cursor.take(stream_seq, number) is expected, (stream_seq, number)
    assert (cursor.position, cursor.delivered) == (14, 5)
    cursor.restarted()
    assert cursor.take(15, 1) is Take.APPEND


def test_acknowledgements_wait_for_their_records_to_be_durable() -> None:
    window: AckWindow[str] = AckWindow()
    window.add(1, "a")
    window.add(2, "b")
    window.add(2, "skipped after b")  # made no record: waits for the journal's last one
    window.add(3, "c")
    assert window.ready(0) is None
    assert window.ready(2) == "skipped after b"
    assert len(window) == 1
    assert window.ready(2) is None
    window.clear()
    assert window.ready(10) is None


def test_the_documented_records(header_reader: object) -> None:
    found = {example.id: example for example in examples("recorder")}
    assert set(found) == {"stream-record", "stream-record-json"}, "PROTOCOL.md 10.2"
    binary = found["stream-record"]
    seq = int(binary.body["stream_seq"])
    assert stream_record(binary.hex("published"), seq) == binary.hex("body")
    text = found["stream-record-json"]
    body = stream_record(text.body["published"].encode(), int(text.body["stream_seq"]))
    assert body == text.body["body"].encode()


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("$JS.ACK.BUSGATE.busgate-bus-journal.1.42.7.1764345600123456789.100", (42, 7)),
        ("$JS.ACK.hub.ACC.BUSGATE.busgate-bus-journal.2.42.7.1764345600123456789.100.x", (42, 7)),
        ("$JS.ACK.BUSGATE.c.1.x.7.1.0", None),
        ("$JS.ACK.BUSGATE.c.1.42", None),
        ("bus._INBOX.abc", None),
        (None, None),
    ],
)
def test_a_delivery_is_read_from_its_acknowledgement_subject(
    reply: str | None, expected: tuple[int, int] | None
) -> None:
    found = delivery(reply)
    if expected is None:
        assert found is None
    else:
        assert found is not None and (found.stream_seq, found.delivery) == expected
        assert found.stored == pytest.approx(1764345600.123456789)
