"""pipeline/decode.py: the column-wise decoder gives the rows the full decoder gives."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.frame import DataFrame
from bus.journal import encode_record, index_records
from bus.message import Message, encode_message
from pipeline.decode import ARROW_SCHEMA, _slow_row, decode_records

T0 = 1_700_000_000.0


def batch_of(raws: list[bytes]) -> list[dict[str, object]]:
    data = b"".join(encode_record(raw, T0 + i) for i, raw in enumerate(raws))
    index = index_records(data)
    batch = decode_records(
        data, index.starts, index.lengths, index.ts_us, index.record_offsets, "journal-1.seg"
    )
    assert batch.schema == ARROW_SCHEMA
    rows: list[dict[str, object]] = batch.to_pylist()
    return rows


def assert_same_as_full_decoder(raws: list[bytes]) -> None:
    rows = batch_of(raws)
    assert len(rows) == len(raws)
    for raw, row in zip(raws, rows, strict=True):
        expected = _slow_row(raw)
        for key, value in expected.items():
            if key == "payload_map":
                assert (value and dict(value)) == (row[key] and dict(row[key])), raw  # type: ignore[arg-type]
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
    }  # type: ignore[arg-type]
    assert dict(rows[0]["payload_map"]) == {
        "CMD": "echo",
        "x": "1",
        "f": "2.5",
        "s": "hi",
        "b": "true",
    }  # type: ignore[call-overload]
    assert rows[1]["RID"] == req.mid and rows[2]["RID"] == req.mid
    assert rows[2]["RCD"] == 404 and rows[2]["MSG"] == "no such thing"
    assert rows[3]["GRP"] == "sensor.temp" and rows[3]["payload"] == '{"c":18.2}'
    assert [r["offset"] for r in rows][0] == 0 and rows[0]["segment"] == "journal-1.seg"
    assert all(r["ENC"] == "FRAM" for r in rows)


def test_slow_path_rows_keep_their_place() -> None:
    req = Message.request("demo", "echo", {"nested": {"a": [1, 2]}, "t": 'quote " and é'})
    raws = [
        encode_message(Message.request("demo", "a")),
        encode_message(req),  # nested payload and escaped text: full decoder
        b'{"GRP":"demo","TYP":"RQS","MID":"j1","PLD":{"CMD":"json"}}',  # a JSON message
        b"plain text body",
        encode_message(Message.request("demo", "b")),
    ]
    rows = batch_of(raws)
    assert [r["CMD"] for r in rows] == ["a", "echo", "json", None, "b"]
    assert [r["ENC"] for r in rows] == ["FRAM", "FRAM", "JSON", "STR", "FRAM"]
    assert orjson.loads(rows[1]["payload"])["t"] == 'quote " and é'  # type: ignore[arg-type]
    assert_same_as_full_decoder(raws)


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
                st.text(alphabet="xyzXYZ_", min_size=1, max_size=4), scalars, max_size=5
            ),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_fast_and_full_decoders_agree(messages: list[tuple[str, str, dict[str, object]]]) -> None:
    raws = []
    for group, cmd, args in messages:
        msg = Message.request(group, cmd, DataFrame(args), reply_to="inbox.1")
        raws.append(encode_message(msg))
    assert_same_as_full_decoder(raws)


def test_empty_batch_has_the_schema() -> None:
    batch = decode_records(b"", [], [], [], [], "s")
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
