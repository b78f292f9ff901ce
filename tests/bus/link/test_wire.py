"""Wire frames (bus/link/wire.py) against docs/PROTOCOL.md section 3, plus chunking and fuzzing."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.errors import ConfigError, EncodeError, ProtocolError
from bus.frame.enums import CloseReason, CommandKind
from bus.link import wire
from bus.link.wire import (
    DEFAULT_MAX_FRAME,
    DEFAULT_MAX_MESSAGE,
    NEED_DATA,
    CommandReceived,
    DisconnectReceived,
    MessageReceived,
    PingReceived,
    WireDecoder,
    WireEvent,
    encode_command,
    encode_disconnect,
    encode_message,
    encode_ping,
)
from tests.docexamples import Example, examples

# Every test runs on the reference decoder and, when it was built, on the C accelerator's scan
# of one-frame messages (bus/native/_hotpath.c), which hands everything else to the reference.
SCANS = [False] + ([True] if wire.use_accelerator(True) else [])


@pytest.fixture(autouse=True, params=SCANS, ids=lambda on: "c-scan" if on else "python")
def scan(request: pytest.FixtureRequest) -> Iterator[bool]:
    wire.use_accelerator(request.param)
    yield bool(request.param)
    wire.use_accelerator(True)


EXAMPLES = examples("wire")
EVENT_EXAMPLES = [ex for ex in EXAMPLES if "events" in ex.body]
ERROR_EXAMPLES = [ex for ex in EXAMPLES if "error" in ex.body]
BOTH_WAYS = [ex for ex in EVENT_EXAMPLES if ex.attrs.get("direction") != "decode"]


# --- helpers -------------------------------------------------------------------------------------


def parse_events(text: str) -> list[WireEvent]:
    """The events of an example's ``events:`` line (PROTOCOL.md section 3 notation)."""
    events: list[WireEvent] = []
    for item in json.loads(text):
        match item:
            case ["message", data]:
                events.append(MessageReceived(bytes.fromhex(data)))
            case ["ping"]:
                events.append(PingReceived())
            case ["disconnect", reason]:
                events.append(DisconnectReceived(CloseReason[reason]))
            case ["command", kind, data]:
                events.append(CommandReceived(CommandKind[kind], bytes.fromhex(data)))
            case _:
                raise AssertionError(f"unknown event notation {item!r}")
    return events


def encode_event(event: WireEvent, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    match event:
        case MessageReceived(data):
            return encode_message(data, max_frame)
        case PingReceived():
            return encode_ping()
        case DisconnectReceived(reason):
            return encode_disconnect(reason)
        case CommandReceived(kind, data):
            return encode_command(kind, data, max_frame)
    raise AssertionError(event)


def decoder_for(ex: Example) -> WireDecoder:
    return WireDecoder(
        max_frame=int(ex.attrs.get("max_frame", DEFAULT_MAX_FRAME)),
        max_message=int(ex.attrs.get("max_message", DEFAULT_MAX_MESSAGE)),
    )


def feed(decoder: WireDecoder, chunks: list[bytes]) -> list[WireEvent]:
    """Feed chunks one by one, draining events after each."""
    events: list[WireEvent] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        events.extend(decoder.events())
    return events


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def random_chunks(data: bytes, rng: random.Random) -> list[bytes]:
    chunks, at = [], 0
    while at < len(data):
        size = rng.randint(1, 64)
        chunks.append(data[at : at + size])
        at += size
    return chunks


# --- the document's examples, both directions ----------------------------------------------------


def test_document_has_examples() -> None:
    assert len(BOTH_WAYS) >= 8
    assert len(ERROR_EXAMPLES) >= 6


@pytest.mark.parametrize("ex", BOTH_WAYS, ids=lambda ex: ex.id)
def test_example_encodes_to_its_bytes(ex: Example) -> None:
    max_frame = int(ex.attrs.get("max_frame", DEFAULT_MAX_FRAME))
    encoded = b"".join(encode_event(e, max_frame) for e in parse_events(ex.body["events"]))
    assert encoded.hex(" ") == ex.hex().hex(" ")


@pytest.mark.parametrize("ex", EVENT_EXAMPLES, ids=lambda ex: ex.id)
@pytest.mark.parametrize("how", ["whole", "byte-by-byte", "random-chunks", "trailing"])
def test_example_decodes_to_its_events(ex: Example, how: str) -> None:
    data, decoder = ex.hex(), decoder_for(ex)
    if how == "whole":
        chunks = [data]
    elif how == "byte-by-byte":
        chunks = byte_by_byte(data)
    elif how == "random-chunks":
        chunks = random_chunks(data, random.Random(ex.id))
    else:
        chunks = [data + b"\x03\x03\x00ab"]  # a truncated frame after the example stays buffered
    assert feed(decoder, chunks) == parse_events(ex.body["events"])
    assert decoder.buffered == (5 if how == "trailing" else 0)
    assert decoder.idle is (how != "trailing")


@pytest.mark.parametrize("ex", ERROR_EXAMPLES, ids=lambda ex: ex.id)
@pytest.mark.parametrize("how", ["whole", "byte-by-byte"])
def test_error_example_raises_with_close_reason(ex: Example, how: str) -> None:
    decoder = decoder_for(ex)
    chunks = [ex.hex()] if how == "whole" else byte_by_byte(ex.hex())
    with pytest.raises(ProtocolError) as info:
        feed(decoder, chunks)
    assert info.value.close_reason is CloseReason[ex.body["error"]]
    # The decoder stays dead: the same error again, never a resynchronised event.
    decoder.receive_data(encode_ping())
    with pytest.raises(ProtocolError):
        decoder.next_event()


# --- truncation, chunking, trailing bytes ---------------------------------------------------------

SAMPLE_EVENTS: list[WireEvent] = [
    MessageReceived(b"hello"),
    MessageReceived(b""),
    MessageReceived(bytes(range(256)) * 200),  # 51200 bytes: More, More, More, Last
    PingReceived(),
    DisconnectReceived(CloseReason.SERVER_SHUTDOWN),
    CommandReceived(CommandKind.RPC_COMMAND, b"\x01\x02\x03"),
]


@pytest.mark.parametrize("event", SAMPLE_EVENTS, ids=lambda e: type(e).__name__)
def test_every_truncated_prefix_needs_data(event: WireEvent) -> None:
    data = encode_event(event)
    cuts = range(len(data)) if len(data) < 100 else [*range(40), *range(3, len(data), 997)]
    for cut in cuts:
        decoder = WireDecoder()
        decoder.receive_data(data[:cut])
        assert list(decoder.events()) == [], f"an event from a {cut}-byte prefix"
        decoder.receive_data(data[cut:])
        assert list(decoder.events()) == [event]


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 20])
def test_trailing_bytes_of_the_next_frame_are_kept(cut: int) -> None:
    whole = b"".join(encode_event(e) for e in SAMPLE_EVENTS)
    following = encode_event(MessageReceived(b"next message, not yet complete"))
    tail = following[:cut]
    for chunks in ([whole + tail], byte_by_byte(whole + tail)):
        decoder = WireDecoder()
        assert feed(decoder, chunks) == SAMPLE_EVENTS
        assert decoder.buffered == len(tail)
        decoder.receive_data(following[cut:])
        assert list(decoder.events()) == [MessageReceived(b"next message, not yet complete")]


def test_partial_frame_consumes_nothing() -> None:
    decoder = WireDecoder()
    decoder.receive_data(b"\x03\x05\x00hel")
    assert decoder.next_event() is NEED_DATA
    assert decoder.next_event() is NEED_DATA
    assert decoder.buffered == 6
    decoder.receive_data(b"lo\x06")
    assert decoder.next_event() == MessageReceived(b"hello")
    assert decoder.next_event() == PingReceived()
    assert decoder.next_event() is NEED_DATA


event_strategy = st.one_of(
    st.binary(max_size=300).map(MessageReceived),
    st.just(PingReceived()),
    st.sampled_from(CloseReason).map(DisconnectReceived),
    st.builds(
        CommandReceived,
        st.sampled_from([CommandKind.MQ_COMMAND, CommandKind.RPC_COMMAND]),
        st.binary(max_size=40),
    ),
)


@settings(deadline=None)  # no timing in tests: shared CPUs
@given(
    events=st.lists(event_strategy, max_size=12),
    max_frame=st.integers(min_value=50, max_value=120),
    seed=st.integers(),
)
def test_any_event_sequence_round_trips_in_any_chunking(
    events: list[WireEvent], max_frame: int, seed: int
) -> None:
    data = b"".join(encode_event(e, max_frame) for e in events)
    rng = random.Random(seed)
    assert feed(WireDecoder(max_frame=max_frame), [data]) == events
    assert feed(WireDecoder(max_frame=max_frame), random_chunks(data, rng)) == events
    assert feed(WireDecoder(max_frame=max_frame), byte_by_byte(data)) == events


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=200), seed=st.integers())
def test_fuzz_random_bytes_only_protocol_error(garbage: bytes, seed: int) -> None:
    whole = WireDecoder(max_frame=64, max_message=256)
    chunked = WireDecoder(max_frame=64, max_message=256)
    outcomes = []
    for decoder, chunks in (
        (whole, [garbage]),
        (chunked, random_chunks(garbage, random.Random(seed))),
    ):
        try:
            outcomes.append(("events", feed(decoder, chunks), decoder.buffered))
        except ProtocolError as exc:
            assert isinstance(exc.close_reason, CloseReason)
            outcomes.append(("error", [], 0))
    # Chunking never changes the verdict.
    assert outcomes[0][0] == outcomes[1][0]
    if outcomes[0][0] == "events":
        assert outcomes[0] == outcomes[1]


# --- splitting at the exact max-frame boundaries --------------------------------------------------


def frame_headers(data: bytes) -> list[tuple[int, int]]:
    """(type, length) of each frame in encoder output (no single-byte frames but EmptyLast)."""
    headers, at = [], 0
    while at < len(data):
        if data[at] == 4:
            headers.append((4, 0))
            at += 1
            continue
        length = int.from_bytes(data[at + 1 : at + 3], "little")
        headers.append((data[at], length))
        at += 3 + length
    return headers


M = DEFAULT_MAX_FRAME


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, [(4, 0)]),
        (1, [(3, 1)]),
        (M - 1, [(3, M - 1)]),
        (M, [(3, M)]),
        (M + 1, [(2, M), (3, 1)]),
        (2 * M, [(2, M), (3, M)]),
        (2 * M + 1, [(2, M), (2, M), (3, 1)]),
        (3 * M, [(2, M), (2, M), (3, M)]),
    ],
)
def test_split_at_max_frame_boundaries(size: int, expected: list[tuple[int, int]]) -> None:
    data = random.Random(size).randbytes(size)
    encoded = encode_message(data)
    assert frame_headers(encoded) == expected
    assert feed(WireDecoder(), random_chunks(encoded, random.Random(1))) == [MessageReceived(data)]


def test_frame_of_exactly_max_frame_accepted_and_one_more_refused() -> None:
    decoder = WireDecoder(max_frame=10)
    decoder.receive_data(b"\x03\x0a\x00" + b"x" * 10)
    assert decoder.next_event() == MessageReceived(b"x" * 10)
    decoder.receive_data(b"\x03\x0b\x00")
    with pytest.raises(ProtocolError, match="length 11"):
        decoder.next_event()


def test_message_of_exactly_max_message_accepted_and_one_more_refused() -> None:
    ok = WireDecoder(max_frame=4, max_message=8)
    ok.receive_data(encode_message(b"12345678", max_frame=4))
    assert ok.next_event() == MessageReceived(b"12345678")
    too_big = WireDecoder(max_frame=4, max_message=8)
    # Refused at the header of the crossing frame, before its data arrives.
    too_big.receive_data(encode_message(b"123456789", max_frame=4)[:17])
    with pytest.raises(ProtocolError, match="max_message 8") as info:
        too_big.next_event()
    assert info.value.close_reason is CloseReason.PROTOCOL_ERROR


def test_large_message_in_small_chunks_is_whole_and_buffer_is_compacted() -> None:
    data = random.Random(7).randbytes(2_000_000)
    encoded = encode_message(data)
    decoder = WireDecoder()
    got: list[WireEvent] = []
    for at in range(0, len(encoded), 1000):
        decoder.receive_data(encoded[at : at + 1000])
        got.extend(decoder.events())
        # Consumed bytes are dropped as we go: the buffer never holds the whole stream.
        assert len(decoder._buffer) < 200_000
    assert got == [MessageReceived(data)]


# --- encoder arguments ---------------------------------------------------------------------------


def test_encoders_refuse_bad_arguments() -> None:
    with pytest.raises(ConfigError):
        encode_message(b"abc", max_frame=0)
    with pytest.raises(ConfigError):
        WireDecoder(max_frame=65536)
    with pytest.raises(ConfigError):
        WireDecoder(max_message=-1)
    with pytest.raises(EncodeError):
        encode_command(CommandKind.DISCONNECT, b"\x02")
    with pytest.raises(EncodeError):
        encode_command(CommandKind.MQ_COMMAND, b"x" * 10, max_frame=10)
    assert encode_command(CommandKind.MQ_COMMAND, b"x" * 9, max_frame=10)[:3] == b"\x05\x0a\x00"


def test_encode_message_accepts_bytearray_and_memoryview() -> None:
    data = bytes(range(100))
    expected = encode_message(data, max_frame=30)
    assert encode_message(bytearray(data), max_frame=30) == expected
    assert encode_message(memoryview(data), max_frame=30) == expected


#: Valid frames of every kind (short messages cut at 16 bytes, Pings, Disconnects, commands).
ANY_FRAMES: Final = st.lists(
    st.one_of(
        st.binary(max_size=40).map(lambda data: encode_message(data, max_frame=16)),
        st.just(encode_ping()),
        st.sampled_from(list(CloseReason)).map(encode_disconnect),
        st.binary(min_size=1, max_size=8).map(
            lambda data: encode_command(CommandKind.MQ_COMMAND, data)
        ),
    ),
    max_size=12,
)


def take_events(decoder: WireDecoder, events: list[object]) -> None:
    """Every buffered event into ``events``, one by one."""
    events.extend(decoder.events())


def read_in_random_steps(
    data: bytes, rnd: random.Random, take: Callable[[WireDecoder, list[object]], None]
) -> tuple[list[object], WireDecoder]:
    """``data`` fed to a small decoder in random steps, ``take`` reading it after each; what
    it gave, then the error that ended it (if any) and its state at the end."""
    decoder = WireDecoder(max_frame=16, max_message=64)
    out: list[object] = []
    at = 0
    try:
        while at < len(data):
            step = rnd.randint(1, 20)
            decoder.receive_data(data[at : at + step])
            at += step
            take(decoder, out)
    except ProtocolError as exc:
        out.append(("error", str(exc)))
    out.append(("idle", decoder.idle, decoder.buffered))
    return out, decoder


@settings(max_examples=200, deadline=None)
@given(ANY_FRAMES, st.randoms(), st.binary(max_size=6))
def test_the_scan_and_the_reference_cut_any_input_alike(
    frames: list[bytes], rnd: random.Random, tail: bytes
) -> None:
    # Valid frames of every kind, then maybe garbage: the same events, then the same error.
    data = b"".join(frames) + tail

    def run(scan: bool) -> list[object]:
        wire.use_accelerator(scan)
        return read_in_random_steps(data, rnd, take_events)[0]

    seed = rnd.random()
    rnd.seed(seed)
    reference = run(False)
    rnd.seed(seed)
    assert run(bool(SCANS[-1])) == reference


def take_batched(decoder: WireDecoder, events: list[object]) -> None:
    """Every buffered event into ``events``, the messages taken with next_messages where it
    gives them (what came before an error stays in ``events``)."""
    while True:
        events.extend(MessageReceived(data) for data in decoder.next_messages())
        event = decoder.next_event()
        if event is NEED_DATA:
            return
        events.append(event)


@settings(max_examples=200, deadline=None)
@given(ANY_FRAMES, st.randoms(), st.binary(max_size=6))
def test_messages_taken_in_batches_are_the_events_in_order(
    frames: list[bytes], rnd: random.Random, tail: bytes
) -> None:
    # next_messages between next_event calls: the same events, then the same error.
    data = b"".join(frames) + tail

    def run(batched: bool) -> list[object]:
        out, decoder = read_in_random_steps(data, rnd, take_batched if batched else take_events)
        if any(isinstance(item, tuple) and item[0] == "error" for item in out):
            assert decoder.next_messages() == []  # a dead decoder gives nothing more
        return out

    seed = rnd.random()
    rnd.seed(seed)
    reference = run(False)
    rnd.seed(seed)
    assert run(True) == reference


def test_next_messages_stops_before_a_ping_and_is_empty_without_the_accelerator(
    scan: bool,
) -> None:
    decoder = WireDecoder()
    decoder.receive_data(encode_message(b"a") + encode_message(b"b") + encode_ping())
    decoder.receive_data(encode_message(b"c"))
    if not scan:
        assert decoder.next_messages() == []
        assert list(decoder.events()) == [MessageReceived(b"a"), MessageReceived(b"b"),
                                          PingReceived(), MessageReceived(b"c")]  # fmt: skip
        return
    assert decoder.next_messages() == [b"a", b"b"]
    assert decoder.next_messages() == []  # the Ping is next_event's
    assert decoder.next_event() == PingReceived()
    assert decoder.next_messages() == [b"c"]
    assert decoder.next_event() is NEED_DATA and decoder.idle
