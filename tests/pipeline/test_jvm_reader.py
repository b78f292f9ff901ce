"""The JVM reader (``format("busjournal")``, pipeline/jvm) on real local Spark: the same rows as
the Python source on every kind of message, only the columns asked for decoded, time and
sequence filters pushed down."""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from bus.frame.frame import S8, U64, Float32, Uri
from bus.journal import Journal, encode_record, encode_segment_header, list_segments
from bus.message.message import Message, encode_message
from pipeline.compact import compact
from pipeline.plan import plan_batch
from pipeline.source import read_range

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = 1_700_000_000.0
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def odd_messages() -> list[bytes]:
    """Every path of the decoders: binary frames fast and slow, JSON, text, bytes, doubles."""
    rnd = random.Random(5)
    out = [
        encode_message(Message.request("demo", "echo", {"s": 'h\u00e9"l\\lo\n\x01', "b": True})),
        encode_message(Message.event("e", {"f": Float32(1.1), "big": U64(2**64 - 1), "n": S8(-5)})),
        encode_message(Message.event("e", {"u": Uri("http://x"), "none": None, "z": -0.0})),
        encode_message(Message.request("demo", "nested", {"deep": {"a": 1}, "arr": [1, "x"]})),
        encode_message(Message.request("demo", "a", {"CMD": "inner"}).ack({"r": 1})),
        encode_message(Message.request("d", "e", {"x": 1}).nak("no", rcd=409)),
        encode_message(Message.request("d", "e", {"x": 1}, caller="key:ops", trace=TRACE)),
        encode_message(Message.request("d", "e", caller="jwt:zo\u00eb", trace=TRACE).ack({})),
        encode_message(Message.request("d", "e", {"deep": {"a": 1}}, caller="key:deep")),
        b'{"GRP":"g","TYP":"RQS","CLR":"key:json","TRC":"00-json"}',
        b'{"GRP":"g","TYP":"EVT","PLD":{"a":[1,2],"b":{"c":1e-7}}}',
        b'{"GRP": 5, "RCD": "x"}',
        b"plain text",
        bytes([0xFF, 0, 1, 2]),
        b"",
    ]
    doubles = [0.1 + 0.2, 1e16, 1e-5, 1e-4, 1e15, 123456789.125, 2.0**-1074, 1.7976931348623157e308]
    doubles += [2.0**k for k in range(-60, 80, 7)]
    for _ in range(400):
        doubles.append(rnd.random() * 10 ** rnd.randint(-12, 22))
        raw = struct.unpack(">d", rnd.getrandbits(64).to_bytes(8, "big"))[0]
        doubles.append(raw if raw == raw else 1.0)
    for i in range(0, len(doubles), 4):
        fields = {f"v{j}": v for j, v in enumerate(doubles[i : i + 4])}
        out.append(encode_message(Message.event("d", fields)))
    return out


def python_rows(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for part in plan_batch(str(directory), 0):
        for batch in read_range(part):
            rows += batch.to_pylist()
    return rows


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    pairs = out.get("payload_map")
    if pairs is not None:  # Arrow gives pairs, Spark a dict: compare as dicts
        out["payload_map"] = dict(pairs.items() if isinstance(pairs, dict) else pairs)
    if isinstance(out.get("ts"), datetime):
        out["ts"] = out["ts"].astimezone(UTC).replace(tzinfo=None)
    return out


def test_the_jvm_reader_gives_the_python_sources_rows(spark: Any, tmp_path: Path) -> None:
    messages = odd_messages()
    v1 = tmp_path / "journal-00000001.seg"  # a version 1 segment first
    v1.write_bytes(
        encode_segment_header(T0, None)
        + b"".join(encode_record(m, T0 + i, version=1) for i, m in enumerate(messages[:5]))
    )
    with Journal(tmp_path, max_segment_bytes=6_000) as journal:
        for i, raw in enumerate(messages):
            journal.append(raw, T0 + 10 + i * 0.001)
    assert len(list_segments(tmp_path)) > 3
    expected = [comparable(r) for r in python_rows(tmp_path)]

    def jvm_rows() -> list[dict[str, Any]]:
        got = spark.read.format("busjournal").load(str(tmp_path)).collect()
        rows = (comparable(r.asDict()) for r in got)
        return sorted(rows, key=lambda r: (r["segment"], r["offset"]))

    got_rows = jvm_rows()
    assert len(got_rows) == len(expected) == len(messages) + 5
    for mine, theirs in zip(got_rows, expected, strict=True):
        assert mine == theirs
    # closed segments compacted (the v1 one too): read through Spark's Parquet reader, same rows
    assert len(compact(tmp_path)) == len(list_segments(tmp_path)) - 1
    assert sum(1 for p in plan_batch(str(tmp_path), 0) if p.parquet) > 2
    assert jvm_rows() == expected
    window = spark.read.format("busjournal").option("since", str(T0 + 10.5)).load(str(tmp_path))
    assert sorted(r["seq"] for r in window.where("GRP = 'e'").select("seq").collect()) == [
        r["seq"]
        for r in expected
        if r["GRP"] == "e" and r["ts"].replace(tzinfo=UTC).timestamp() >= T0 + 10.5
    ]


def test_only_the_columns_asked_for_are_decoded(spark: Any, tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        for i in range(50):  # JSON bodies: the full decoder's (the Python helper's) work
            journal.append(b'{"GRP":"g%d","TYP":"EVT"}' % i, T0 + i)
    df = spark.read.format("busjournal").option("python", "/nonexistent/python").load(str(tmp_path))
    # no body decoded: the helper is never started
    assert df.select("ts", "seq", "offset", "size", "segment").count() == 50
    assert df.where("seq > 40").count() == 10
    with pytest.raises(Exception, match="nonexistent"):
        df.select("GRP").collect()  # decoding the bodies needs the helper


def test_time_and_sequence_filters_skip_segments_and_blocks(spark: Any, tmp_path: Path) -> None:
    with Journal(tmp_path, max_segment_bytes=60_000, index_interval=4_000) as journal:
        for i in range(3000):
            journal.append(encode_message(Message.event("t", {"i": i})), T0 + i)
    df = spark.read.format("busjournal").option("splitBytes", "4000").load(str(tmp_path))
    whole = df.rdd.getNumPartitions()
    since = datetime.fromtimestamp(T0 + 1500, UTC)
    until = datetime.fromtimestamp(T0 + 1530, UTC)
    window = df.where((df.ts >= since) & (df.ts < until))
    assert window.rdd.getNumPartitions() <= 2 and whole > 30  # one or two 4 kB blocks of 60
    assert sorted(r["seq"] for r in window.select("seq").collect()) == list(range(1501, 1531))
    plan = window._jdf.queryExecution().executedPlan().toString()
    assert f"ts[{round((T0 + 1500) * 1e6)},{round((T0 + 1530) * 1e6)})" in plan
    by_seq = df.where("seq >= 2995")
    assert by_seq.rdd.getNumPartitions() <= 2
    assert [r["seq"] for r in by_seq.orderBy("seq").select("seq").collect()] == list(
        range(2995, 3001)
    )
    assert df.where("seq = 7").select("seq").collect()[0]["seq"] == 7


def test_header_equality_filters_are_checked_before_anything_is_rendered(
    spark: Any, tmp_path: Path
) -> None:
    with Journal(tmp_path) as journal:
        for i in range(200):
            group = ("demo", "sensor.temp", "other")[i % 3]
            journal.append(encode_message(Message.event(group, {"i": i})), T0 + i)
        journal.append(b'{"GRP":"demo","TYP":"EVT","PLD":{"i":200}}', T0 + 200)  # the helper's
    df = spark.read.format("busjournal").load(str(tmp_path))
    demo = df.where("GRP = 'demo'").select("payload_map", "ENC")
    plan = demo._jdf.queryExecution().executedPlan().toString()
    assert "GRP in [demo]" in plan
    got = sorted(int(r["payload_map"]["i"]) for r in demo.collect())
    assert got == [*range(0, 200, 3), 200]
    assert df.where(df.GRP.isin("other", "none")).count() == 66
    assert df.where("ENC = 'JSON'").count() == 1 and df.where("ENC = 'FRAM'").count() == 200


def test_a_join_of_two_scans_over_compacted_segments(spark: Any, tmp_path: Path) -> None:
    """A group's latency: requests and responses, two scans with other columns and filters."""
    from pipeline import transforms as T

    with Journal(tmp_path, max_segment_bytes=20_000) as journal:
        for i in range(400):
            group = ("demo.inventory", "demo.billing")[i % 2]
            req = Message.request(group, "reserve", {"i": i}, reply_to="_INBOX.1")
            journal.append(encode_message(req), T0 + i)
            journal.append(encode_message(req.ack({"ok": 1})), T0 + i + 0.004)
    assert len(compact(tmp_path)) > 3
    df = spark.read.format("busjournal").load(str(tmp_path))
    [row] = T.latencies(T.exchanges(df)).where("GRP = 'demo.inventory'").collect()
    assert (row["answered"], row["p50_ms"], row["max_ms"]) == (200, 4.0, 4.0)


def test_a_requests_trace_and_caller_on_its_rows_and_in_filters(spark: Any, tmp_path: Path) -> None:
    """RQS and ACK of one call share TRC (a call tree joins on it); CLR names the caller."""
    with Journal(tmp_path) as journal:
        for i, caller in enumerate(("key:ops", "key:reader", None)):
            trace = f"00-{i + 1:032x}-00f067aa0ba902b7-01"
            req = Message.request("demo", "echo", {"i": i}, caller=caller, trace=trace)
            journal.append(encode_message(req), T0 + i)
            journal.append(encode_message(req.ack({"i": i})), T0 + i + 0.5)
        journal.append(
            b'{"GRP":"demo","TYP":"RQS","MID":"j","CLR":"key:json","TRC":"00-j"}', T0 + 9
        )
        journal.append(b'{"TYP":"ACK","RID":"j","TRC":"00-j"}', T0 + 9.5)
    df = spark.read.format("busjournal").load(str(tmp_path))
    rqs = df.where("TYP = 'RQS'").select("MID", "CLR", F.col("TRC").alias("sent"))
    ack = df.where("TYP = 'ACK'").select("RID", F.col("TRC").alias("answered"))
    got = sorted(
        (r["CLR"] or "", r["sent"], r["answered"])
        for r in rqs.join(ack, rqs["MID"] == ack["RID"]).collect()
    )
    assert got == [
        ("", f"00-{3:032x}-00f067aa0ba902b7-01", f"00-{3:032x}-00f067aa0ba902b7-01"),
        ("key:json", "00-j", "00-j"),
        ("key:ops", f"00-{1:032x}-00f067aa0ba902b7-01", f"00-{1:032x}-00f067aa0ba902b7-01"),
        ("key:reader", f"00-{2:032x}-00f067aa0ba902b7-01", f"00-{2:032x}-00f067aa0ba902b7-01"),
    ]
    one = df.where(f"TRC = '00-{2:032x}-00f067aa0ba902b7-01'").select("TYP", "CLR")
    assert "TRC in [" in one._jdf.queryExecution().executedPlan().toString()
    assert sorted((r["TYP"], r["CLR"]) for r in one.collect()) == [
        ("ACK", None),
        ("RQS", "key:reader"),
    ]
    assert df.where("CLR = 'key:json'").count() == 1


def test_files_compacted_before_clr_and_trc_are_read_around(spark: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    with Journal(tmp_path, max_segment_bytes=20_000) as journal:
        for i in range(300):
            req = Message.request("demo", "echo", {"i": i}, caller=f"key:k{i % 3}", trace=TRACE)
            journal.append(encode_message(req), T0 + i)
    compact(tmp_path)
    compacted = sorted(tmp_path.glob("*.v2.parquet"))
    assert len(compacted) >= 3
    for path in compacted:  # as the compaction before version 2 wrote them
        old = path.with_name(path.name.replace(".v2.parquet", ".parquet"))
        pq.write_table(pq.read_table(path).drop_columns(["CLR", "TRC"]), old)
        path.unlink()

    def callers() -> list[tuple[Any, ...]]:
        df = spark.read.format("busjournal").load(str(tmp_path))
        return sorted(tuple(r) for r in df.groupBy("CLR", "TRC").count().collect())

    expected = [(f"key:k{k}", TRACE, 100) for k in range(3)]
    assert callers() == expected  # the segments read raw, not the old files' missing columns
    assert all(c.written for c in compact(tmp_path)[:-1])
    assert sorted(tmp_path.glob("*.v2.parquet")) == compacted
    assert not [p for p in tmp_path.glob("*.parquet") if ".v2." not in p.name]
    assert callers() == expected
