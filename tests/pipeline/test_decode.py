"""pipeline/decode.py: the column-wise decoder gives the rows the full decoder gives.

Every test runs twice: with the C accelerator ``bus.native._journalscan`` (when it was built) and
with the numpy path it falls back to; both must give the full decoder's rows and the same
records and errors as :func:`bus.journal.scan_records`.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeline.decode as decode_module
from bus.errors import DecodeError
from bus.frame.frame import S8, S16, U8, U64, DataFrame, Float32, Uri
from bus.journal import encode_record, scan_records
from bus.journal.segments import scan_fast
from bus.message.message import Message, encode_message
from pipeline import decode_c, decode_numpy
from pipeline.decode import ARROW_SCHEMA, _slow_row, decode_at, decode_records, find_records

T0 = 1_700_000_000.0

PATHS = ["c", "numpy"]


@pytest.fixture(params=PATHS, autouse=True)
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Selects the C accelerator or the numpy path for the test."""
    if request.param == "c":
        if not decode_module.accelerated():
            pytest.skip("the C accelerator bus.native._journalscan was not built")
    else:
        monkeypatch.setattr(decode_module, "_accel", None)
    yield request.param


def batch_of(raws: list[bytes]) -> list[dict[str, Any]]:
    data = b"".join(encode_record(raw, T0 + i, i + 1) for i, raw in enumerate(raws))
    offsets = scan_records(data).offsets
    lengths = [len(raw) for raw in raws]
    starts = [o + 28 for o in offsets]
    stamps = [round((T0 + i) * 1e6) for i in range(len(raws))]
    batch = decode_records(
        data, starts, lengths, stamps, offsets, "journal-1.seg", seqs=range(1, len(raws) + 1)
    )
    assert batch.schema == ARROW_SCHEMA
    batch.validate(full=True)
    rows: list[dict[str, Any]] = batch.to_pylist()
    return rows


def assert_same_as_full_decoder(raws: list[bytes]) -> None:
    rows = batch_of(raws)
    assert len(rows) == len(raws)
    for raw, row in zip(raws, rows, strict=True):
        expected = _slow_row(raw)
        for key, value in expected.items():
            if key == "payload_map":
                got = row[key]
                assert (None if value is None else list(value)) == (
                    None if got is None else list(got)
                ), raw
            else:
                assert row[key] == value, (key, raw)


def test_request_ack_nak_event_rows() -> None:
    req = Message.request(
        "demo", "echo", {"x": 1, "f": 2.5, "s": "hi", "b": True}, reply_to="inbox.7"
    )
    rows = batch_of(
        [
            encode_message(req),
            encode_message(req.ack({"y": 2})),
            encode_message(req.nak("no such thing", rcd=404)),
            encode_message(Message.event("sensor.temp", {"c": 18.2})),
        ]
    )
    assert [r["TYP"] for r in rows] == ["RQS", "ACK", "NAK", "EVT"]
    assert rows[0]["CMD"] == "echo" and rows[0]["RPY"] == "inbox.7" and rows[0]["GRP"] == "demo"
    assert orjson.loads(rows[0]["payload"]) == {
        "CMD": "echo",
        "x": 1,
        "f": 2.5,
        "s": "hi",
        "b": True,
    }
    assert dict(rows[0]["payload_map"]) == {
        "CMD": "echo",
        "x": "1",
        "f": "2.5",
        "s": "hi",
        "b": "true",
    }
    assert rows[1]["RID"] == req.mid and rows[2]["RID"] == req.mid
    assert rows[2]["RCD"] == 404 and rows[2]["MSG"] == "no such thing"
    assert rows[3]["GRP"] == "sensor.temp" and rows[3]["payload"] == '{"c":18.2}'
    assert [r["offset"] for r in rows][0] == 0 and rows[0]["segment"] == "journal-1.seg"
    assert all(r["ENC"] == "FRAM" for r in rows)


TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_caller_and_trace_are_columns_and_an_answer_keeps_its_requests_trace() -> None:
    req = Message.request(
        "demo", "echo", {"x": 1}, reply_to="inbox.7", caller="key:ops", trace=TRACE
    )
    odd = DataFrame({"GRP": "demo", "TYP": "EVT", "CLR": 5, "TRC": "t\u00e9", "PLD": {}})
    raws = [
        encode_message(req),
        encode_message(req.ack({"y": 2})),
        encode_message(req.nak("no", rcd=409)),
        encode_message(Message.request("demo", "echo", caller="jwt:zo\u00eb")),  # Latin-1 text
        encode_message(Message.request("demo", "echo", {"deep": {"a": 1}}, caller="key:deep")),
        encode_message(Message(odd)),  # CLR not text: the full decoder's row
        b'{"GRP":"demo","TYP":"RQS","CLR":"key:json","TRC":"00-json"}',
        encode_message(Message.event("sensor.temp", {"c": 1})),
    ]
    rows = batch_of(raws)
    assert [r["CLR"] for r in rows] == [
        "key:ops",
        None,  # an answer names no caller
        None,
        "jwt:zo\u00eb",
        "key:deep",
        "5",
        "key:json",
        None,
    ]
    assert [r["TRC"] for r in rows[:3]] == [TRACE] * 3  # the RQS's trace on its ACK and NAK
    assert [r["TRC"] for r in rows[3:]] == [None, None, "t\u00e9", "00-json", None]
    assert list(ARROW_SCHEMA.names[4:16]) == [
        *("MID", "RID", "GRP", "RPY", "TYP", "CMD", "ENC", "MSG", "SRC", "TGT", "CLR", "TRC")
    ]
    assert_same_as_full_decoder(raws)
    # the request and its answers are the fast path's own rows, not the full decoder's
    columns, bad = fast_columns(raws[:3])
    assert not bad.any()
    assert columns["CLR"].to_pylist() == ["key:ops", None, None]
    assert columns["TRC"].to_pylist() == [TRACE] * 3


def fast_columns(raws: list[bytes]) -> tuple[dict[str, Any], Any]:
    """The columns of the path under test (C or numpy) before the full decoder mends any."""
    data = b"".join(raws) + bytes(8)
    starts = np.cumsum([0] + [len(r) for r in raws[:-1]]).astype(np.int64)
    lengths = np.array([len(r) for r in raws], dtype=np.int64)
    if decode_module.accelerated():
        found = decode_c.decode_columns(decode_module._accel, data, starts, lengths)
        assert found is not None
        return found
    return decode_numpy.decode_columns(np.frombuffer(data, dtype=np.uint8), starts, lengths)


def test_slow_path_rows_keep_their_place() -> None:
    req = Message.request("demo", "echo", {"nested": {"a": [1, 2]}, "t": 'quote " and é'})
    raws = [
        encode_message(Message.request("demo", "a")),
        encode_message(req),  # nested payload: full decoder
        b'{"GRP":"demo","TYP":"RQS","MID":"j1","PLD":{"CMD":"json"}}',  # a JSON message
        b"plain text body",
        encode_message(Message.request("demo", "b")),
    ]
    rows = batch_of(raws)
    assert [r["CMD"] for r in rows] == ["a", "echo", "json", None, "b"]
    assert [r["ENC"] for r in rows] == ["FRAM", "FRAM", "JSON", "STR", "FRAM"]
    assert orjson.loads(rows[1]["payload"])["t"] == 'quote " and é'
    assert_same_as_full_decoder(raws)


def test_text_numbers_and_oddities_render_as_the_full_decoder_does() -> None:
    payload = DataFrame(
        {
            "esc": 'a"b\\c\n\t\x00\x1f\x7f é ÿ',
            "lat": "café",
            "big": U64(2**64 - 1),
            "neg": S8(-128),
            "s16": S16(-300),
            "u8": U8(255),
            "f32": Float32(0.1),
            "tiny": 1e-7,
            "huge": 1e16,
            "third": 1 / 3,
            "whole": 3.0,
            "negz": -0.0,
            "nan": float("nan"),
            "inf": float("-inf"),
            "none": None,
            "uri": Uri("bus://x/é"),
            'q"k': "key needs escaping",
        }
    )
    raws = [
        encode_message(Message.request("demo", "odd", payload, reply_to="in\tbox")),
        encode_message(Message.event("grp.é", {"x": 1})),
        encode_message(Message.request("demo", "e", DataFrame())),  # an empty payload: {}
    ]
    rows = batch_of(raws)
    assert orjson.loads(rows[0]["payload"])["esc"] == 'a"b\\c\n\t\x00\x1f\x7f é ÿ'
    assert dict(rows[0]["payload_map"])["big"] == str(2**64 - 1)
    assert rows[1]["GRP"] == "grp.é" and rows[2]["payload"] == '{"CMD":"e"}'
    assert_same_as_full_decoder(raws)


def test_boolean_bytes_read_as_java_signed_bytes() -> None:
    frame = DataFrame({"GRP": "demo", "TYP": "EVT", "PLD": {"b": True}})
    raw = bytearray(encode_message(Message(frame)))
    at = raw.index(b"\x01b\x0e") + 3
    for byte, expected in ((0x01, "true"), (0x7F, "true"), (0x00, "false"), (0x80, "false")):
        raw[at] = byte
        row = batch_of([bytes(raw)])[0]
        assert row["payload"] == f'{{"b":{expected}}}'
        assert_same_as_full_decoder([bytes(raw)])


scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(alphabet=st.characters(max_codepoint=255), max_size=12),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["demo", "a.b", "x"]),
            st.text(alphabet="abcdefgh", min_size=1, max_size=6),
            st.dictionaries(
                st.text(alphabet='xyzXYZ_"\\\n', min_size=1, max_size=4), scalars, max_size=5
            ),
            st.sampled_from([None, "key:ops", "jwt:alice", "jwt:zo\u00eb", ""]),
            st.sampled_from([None, TRACE, "00-x"]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_fast_and_full_decoders_agree(
    messages: list[tuple[str, str, dict[str, object], str | None, str | None]],
) -> None:
    raws = []
    for group, cmd, args, caller, trace in messages:
        msg = Message.request(
            group, cmd, DataFrame(args), reply_to="inbox.1", caller=caller, trace=trace
        )
        raws.append(encode_message(msg))
        raws.append(encode_message(msg.ack({"ok": True})))
    assert_same_as_full_decoder(raws)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_damaged_bodies_give_the_full_decoders_rows(data: st.DataObject) -> None:
    """Flipped, cut and random bytes: never a crash, always the full decoder's row."""
    req = Message.request(
        "demo", "echo", {"i": 7, "f": 1.5, "s": "text", "b": False}, reply_to="inbox.9"
    )
    raws = [encode_message(req), encode_message(req.nak("gone", rcd=410))]
    raw = bytearray(data.draw(st.sampled_from(raws)))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    noise = data.draw(st.binary(max_size=40))
    assert_same_as_full_decoder([bytes(raw), bytes(raw[:cut]), noise, raws[0]])


def test_empty_batch_has_the_schema() -> None:
    batch = decode_records(b"", [], [], [], [], "s")
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA


def test_ranges_outside_the_buffer_are_refused() -> None:
    raw = encode_message(Message.request("demo", "a"))
    data = raw + b"\x00" * 4
    for start, length in ((2, 10**9), (10**9, 3), (-1, 2), (0, -5)):
        with pytest.raises(DecodeError, match="outside the buffer"):
            decode_records(data, [0, start], [len(raw), length], [0, 0], [0, 0], "s")
    assert decode_records(data, [0], [len(raw)], [0], [0], "s").to_pylist()[0]["CMD"] == "a"


def segment_of(count: int, seed: int, version: int = 2, fakes: bool = True) -> bytes:
    rnd = random.Random(seed)
    out = bytearray()
    for i in range(count):
        body = encode_message(Message.event("demo", {"i": i, "pad": "x" * rnd.randrange(40)}))
        if fakes and i % 9 == 4:  # bodies that hold the magic, and a whole record: never a record
            body += b"BJR2BJR1" + encode_record(b"fake", T0, 10**6, version=version)
        out += encode_record(body, T0 + i, i + 1, version=version)
    return bytes(out)


def offsets_of(data: bytes, version: int) -> list[int]:
    return list(scan_records(data, version=version).offsets)


def scan_both(data: bytes, start: int, stop: int | None, **options: Any) -> tuple[Any, Any]:
    def run(fn: Any) -> Any:
        found = fn(data, start, stop, max_record=300, **options)
        offsets = [int(o) for o in found.offsets]
        return (offsets, found.end, found.partial, found.damage, found.last_seq)

    # the broker's journal reader takes the same C scan (bus.journal.segments.scan_fast)
    assert run(scan_fast) == run(find_records)
    return run(find_records), run(scan_records)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_find_records_is_scan_records(data: st.DataObject) -> None:
    """Same records, end, tail, damaged spans and last seq on damaged segments, v1 and v2."""
    version = data.draw(st.sampled_from([1, 2]))
    segment = bytearray(segment_of(30, data.draw(st.integers(0, 9)), version))
    for _ in range(data.draw(st.integers(0, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "length", "zeros", "none"]))
        if action == "flip" and segment:
            at = data.draw(st.integers(0, len(segment) - 1))
            segment[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del segment[data.draw(st.integers(0, len(segment))) :]
        elif action == "zeros":
            segment += bytes(data.draw(st.integers(1, 100)))
        elif action == "length" and (found := offsets_of(bytes(segment), version)):
            at = data.draw(st.sampled_from(found))
            struct.pack_into(">I", segment, at + 8, data.draw(st.integers(0, 2**32 - 1)))
    starts = offsets_of(segment_of(30, 0, version), version)[:5]
    start = data.draw(st.sampled_from([0, *starts]))
    stop = data.draw(st.one_of(st.none(), st.integers(0, len(segment) + 10)))
    count = data.draw(st.one_of(st.none(), st.integers(-2, 40)))
    final = data.draw(st.booleans())
    after = data.draw(st.sampled_from([-1, 0, 5, 10**7]))
    options = {"max_count": count, "version": version, "final": final, "after_seq": after}
    ours, reference = scan_both(bytes(segment), start, stop, **options)
    assert ours == reference


def test_decode_at_reads_lengths_times_and_seqs_from_the_headers() -> None:
    for version in (1, 2):
        segment = segment_of(5, 1, version, fakes=False)
        found = find_records(segment, version=version)
        batch = decode_at(segment, found.offsets, "journal-7.seg", base_offset=16, version=version)
        rows = batch.to_pylist()
        assert found.end == len(segment) and found.partial == 0 and found.damage == []
        assert [orjson.loads(r["payload"])["i"] for r in rows] == list(range(5))
        assert [r["offset"] for r in rows] == [int(o) + 16 for o in found.offsets]
        assert rows[1]["ts"].timestamp() == T0 + 1
        assert [r["seq"] for r in rows] == ([1, 2, 3, 4, 5] if version == 2 else [None] * 5)


def test_doubles_print_as_to_json_does() -> None:
    """Shortest round-trip digits, fixed or exponent notation, as ``repr`` prints them, and an
    exponent always with a fraction (``1.0e-07``), as ``to_json`` writes (PROTOCOL.md 1.7)."""
    rnd = random.Random(7)
    values = [0.1, 0.2, 1 / 3, 19.99, 1e-4, 9.999e-5, 1e15, 999999999999999.9, 0.1 + 0.2, 5e-324]
    values += [2.0**53 + 2, -0.0, 0.0, 1e16, 123456.0, -18.5, 1.7976931348623157e308]
    for _ in range(3000):
        digits, scale = rnd.randrange(1, 17), rnd.randrange(0, 20)
        values.append(rnd.choice([1, -1]) * rnd.randrange(10**digits) / 10**scale)
        values.append(struct.unpack(">d", rnd.getrandbits(64).to_bytes(8, "big"))[0])
    values = [v for v in values if v == v]  # NaN is tested elsewhere (null)
    raws = [encode_message(Message.event("f", {"v": v})) for v in values]
    rows = batch_of(raws)
    for value, row in zip(values, rows, strict=True):
        text = repr(value)
        if "e" in text and "." not in text:
            text = text.replace("e", ".0e")
        expected = "null" if value in (float("inf"), float("-inf")) else text
        assert dict(row["payload_map"])["v"] == expected, value
        assert row["payload"] == f'{{"v":{expected}}}'


def test_large_records_are_verified_whole() -> None:
    """Bodies from a few bytes to 200 kB: every CRC checked, a flipped bit found where it is,
    and every other record still found."""
    rnd = random.Random(3)
    sizes = [0, 1, 43, 44, 45, 63, 64, 65, 100, 1000, 4099, 65536, 200_001]
    bodies = [bytes(rnd.getrandbits(8) for _ in range(size)) for size in sizes]
    segment = bytearray(b"".join(encode_record(b, T0, i + 1) for i, b in enumerate(bodies)))
    found = find_records(bytes(segment), max_record=1 << 20)
    offsets = [int(o) for o in found.offsets]
    assert len(offsets) == len(sizes) and found.end == len(segment) and found.partial == 0
    for index in range(len(sizes)):
        damaged = bytearray(segment)
        record_end = offsets[index + 1] if index + 1 < len(sizes) else len(segment)
        damaged[record_end - 1] ^= 0x10
        again = find_records(bytes(damaged), max_record=1 << 20)
        assert [d[0] for d in again.damage] == [offsets[index]]
        assert "checksum mismatch" in again.damage[0][2]
        assert [int(o) for o in again.offsets] == offsets[:index] + offsets[index + 1 :]
