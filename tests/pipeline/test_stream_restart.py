"""The ``busjournal`` stream stopped in the middle of its work resumes from its checkpoint:
every record reaches the Parquet sink exactly once (real local Spark)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bus.journal import Journal
from bus.message import Message, encode_message

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = 1_700_000_000.0
CHUNK = 120


def _write(directory: Path, first: int, count: int) -> list[str]:
    mids = []
    with Journal(directory, max_segment_bytes=8_000) as writer:
        for i in range(first, first + count):
            msg = Message.request("demo", "echo", {"i": i}, reply_to="inbox.t")
            mids.append(str(msg.mid))
            writer.append(encode_message(msg), T0 + i)
    return mids


def _start(spark: Any, source: Path, sink: Path, checkpoint: Path, **options: str) -> Any:
    reader = spark.readStream.format("busjournal")  # the JVM reader (the Python one: test_source)
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load(str(source))
        .select("MID", "segment", "offset")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
    )


def _rows_done(query: Any) -> int:
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def test_a_live_stream_stopped_and_restarted_loses_and_repeats_nothing(
    spark: Any, tmp_path: Path
) -> None:
    source, sink, checkpoint = tmp_path / "journal", tmp_path / "sink", tmp_path / "ckpt"
    mids = _write(source, 0, CHUNK)
    query = _start(spark, source, sink, checkpoint).trigger(processingTime="0 seconds").start()
    try:
        deadline = time.monotonic() + 90  # bounded wait for the first records to be in
        while _rows_done(query) < CHUNK and query.exception() is None:
            assert time.monotonic() < deadline, "the stream took no records"
            time.sleep(0.1)
        mids += _write(source, CHUNK, CHUNK)  # the broker keeps writing while the stream runs
        time.sleep(0.3)
    finally:
        query.stop()  # may land in the middle of a batch over the new records
    assert query.exception() is None
    first = spark.read.parquet(str(sink)).count()
    assert CHUNK <= first <= 2 * CHUNK

    mids += _write(source, 2 * CHUNK, CHUNK)  # and more while it was down
    restarted = _start(spark, source, sink, checkpoint).trigger(processingTime="0 seconds").start()
    try:  # a restarted live stream (availableNow may end after replaying an interrupted batch)
        deadline = time.monotonic() + 90
        while spark.read.parquet(str(sink)).count() < 3 * CHUNK:
            assert restarted.exception() is None and time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        restarted.stop()
    got = [r["MID"] for r in spark.read.parquet(str(sink)).select("MID").collect()]
    assert len(got) == len(set(got)) == 3 * CHUNK
    assert set(got) == set(mids)


def test_starting_offsets_latest_skips_what_was_already_there(spark: Any, tmp_path: Path) -> None:
    source, sink, checkpoint = tmp_path / "journal", tmp_path / "sink", tmp_path / "ckpt"
    _write(source, 0, 50)
    query = _start(spark, source, sink, checkpoint, startingOffsets="latest")
    query.trigger(availableNow=True).start().awaitTermination(120)
    assert not sink.exists() or spark.read.parquet(str(sink)).count() == 0
