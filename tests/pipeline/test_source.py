"""The busjournal data sources on real local Spark: splits, damage, streaming with restarts.

``busjournal`` is the JVM reader (built at install); ``busjournalpy`` the Python source it
falls back to. Tests that both must pass take the ``fmt`` parameter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bus.journal import (
    RECORD_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    Journal,
    encode_record,
    list_segments,
    read_segment,
)
from bus.message.message import Message, encode_message
from pipeline.plan import JournalRange
from pipeline.source import read_range

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = 1_700_000_000.0
FORMATS = ["busjournal", "busjournalpy"]


def test_the_jvm_reader_is_busjournal(spark: Any) -> None:
    from pipeline.session import jvm_reader

    assert jvm_reader(spark), "make install builds pipeline/jvm/busjournal.jar with javac"


def write(directory: Path, first: int, count: int, **journal: Any) -> list[str]:
    """Append ``count`` requests numbered from ``first``; returns their MIDs."""
    mids = []
    with Journal(directory, **journal) as writer:
        for i in range(first, first + count):
            msg = Message.request("demo", "echo", {"i": i}, reply_to="inbox.t")
            mids.append(str(msg.mid))
            writer.append(encode_message(msg), T0 + i)
    return mids


@pytest.mark.parametrize("fmt", FORMATS)
def test_batch_reads_every_record_once_across_splits(spark: Any, tmp_path: Path, fmt: str) -> None:
    mids = write(tmp_path, 0, 3000, max_segment_bytes=150_000)
    assert len(list_segments(tmp_path)) > 2
    df = spark.read.format(fmt).option("splitBytes", "20000").load(str(tmp_path))
    assert df.rdd.getNumPartitions() > 10
    rows = df.select("MID", "payload_map", "ts", "segment", "offset").collect()
    assert sorted(r["MID"] for r in rows) == sorted(mids)
    assert sorted(int(r["payload_map"]["i"]) for r in rows) == list(range(3000))
    first = min(rows, key=lambda r: r["ts"])
    assert first["segment"] == "journal-00000001.seg" and first["offset"] == SEGMENT_HEADER_SIZE


@pytest.mark.parametrize("fmt", FORMATS)
def test_damage_is_read_around_and_trailing_zeros_fail_no_query(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    """Issue 12: a bad CRC, a flipped length byte and trailing zeros after a crash: every query
    still runs and reads every intact record."""
    mids = write(tmp_path, 0, 60, max_segment_bytes=4_000)
    first, last = list_segments(tmp_path)[0], list_segments(tmp_path)[-1]
    offsets = [r.offset for r in read_segment(first)]
    data = bytearray(first.read_bytes())
    data[offsets[2] + RECORD_HEADER_SIZE + 5] ^= 0x40  # a bad CRC
    data[offsets[5] + 10] ^= 0xFF  # a length byte: the record runs past the segment
    first.write_bytes(bytes(data))
    with last.open("ab") as fh:
        fh.write(bytes(8192))
    df = spark.read.format(fmt).load(str(tmp_path))
    got = [r["MID"] for r in df.select("MID").collect()]
    assert sorted(got) == sorted(m for i, m in enumerate(mids) if i not in (2, 5))
    assert df.where("seq > 50").count() == 10
    assert df.groupBy("GRP").count().collect()[0]["count"] == 58


def run_stream(spark: Any, source: Path, sink: Path, checkpoint: Path, fmt: str) -> None:
    stream = spark.readStream.format(fmt).load(str(source))
    query = (
        stream.select("MID", "ts", "segment", "offset")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_resumes_after_restart_exactly_once(spark: Any, tmp_path: Path, fmt: str) -> None:
    source, sink, checkpoint = tmp_path / "journal", tmp_path / "sink", tmp_path / "ckpt"
    mids = write(source, 0, 200, max_segment_bytes=20_000)
    # the writer is "in the middle" of a record: the stream must stop before it
    pending = encode_record(
        encode_message(Message.request("demo", "echo", {"i": 999}, reply_to="x")), T0 + 999
    )
    last = list_segments(source)[-1]
    with last.open("ab") as fh:
        fh.write(pending[:30])
    run_stream(spark, source, sink, checkpoint, fmt)
    first = spark.read.parquet(str(sink)).select("MID").collect()
    assert sorted(r["MID"] for r in first) == sorted(mids)

    with last.open("ab") as fh:  # the record completes; more records, more segments arrive
        fh.write(pending[30:])
    mids += write(source, 200, 300, max_segment_bytes=20_000)
    run_stream(spark, source, sink, checkpoint, fmt)  # a new query on the same checkpoint
    rows = spark.read.parquet(str(sink)).select("MID", "offset", "segment").collect()
    got = [r["MID"] for r in rows]
    assert len(got) == len(mids) + 1 == len(set(got))  # no loss, no duplicate
    assert set(got) >= set(mids)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_journal_reads_as_empty_frame(spark: Any, tmp_path: Path, fmt: str) -> None:
    df = spark.read.format(fmt).load(str(tmp_path))
    assert df.count() == 0 and "payload_map" in df.columns


def test_batch_records_option_cuts_batches_and_keeps_rows(spark: Any, tmp_path: Path) -> None:
    mids = write(tmp_path, 0, 500)
    df = spark.read.format("busjournalpy").option("batchRecords", "64").load(str(tmp_path))
    assert sorted(r["MID"] for r in df.select("MID").collect()) == sorted(mids)
    segment = list_segments(tmp_path)[0]
    size = segment.stat().st_size
    part = JournalRange(str(segment), SEGMENT_HEADER_SIZE, size, size)
    sizes = [batch.num_rows for batch in read_range(part, 64)]
    assert sum(sizes) == 500 and max(sizes) == 64
    with pytest.raises(Exception, match="batchRecords must be at least 1"):
        spark.read.format("busjournalpy").option("batchRecords", "0").load(str(tmp_path)).count()
