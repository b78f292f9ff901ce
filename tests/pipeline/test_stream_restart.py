"""The ``busjournal`` stream stopped in the middle of its work resumes from its checkpoint:
every record reaches the Parquet sink exactly once (real local Spark)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bus.journal import Journal
from bus.message.message import Message, encode_message

# a driver JVM started and killed, then the drain (each up to 300 s): a bound for a loaded 2-core
# machine, as the other Spark modules have; the default 120 s ended the kill test mid-drain
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

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


STREAM = """
import sys, time
from pipeline.session import spark_session
source, sink, checkpoint = sys.argv[1:4]
spark = spark_session("local[2]", "stream-kill", shuffle_partitions=2, quick_start=True)
query = (
    spark.readStream.format("busjournal").option("maxRecordsPerTrigger", "40").load(source)
    .select("MID", "seq").writeStream.format("parquet")
    .option("path", sink).option("checkpointLocation", checkpoint)
)
running = query.trigger(processingTime="0 seconds").start()
print("started", flush=True)
running.awaitTermination(300)
"""


def _committed(checkpoint: Path) -> int:
    """Batches the query has committed (files in its checkpoint's commit log)."""
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.is_dir() else 0


def test_a_stream_whose_driver_is_killed_resumes_exactly_once(spark: Any, tmp_path: Path) -> None:
    """kill -9 of the driver (and its JVM) mid-stream: the next driver reads every record once.
    The next driver is the tests' own session: another JVM, which never ran the query, resumes
    it from the checkpoint alone (a third JVM started for it took 20-40 s of a make test)."""
    source, sink, checkpoint = tmp_path / "journal", tmp_path / "sink", tmp_path / "ckpt"
    mids = _write(source, 0, 400)
    command = [sys.executable, "-c", STREAM, str(source), str(sink), str(checkpoint)]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as driver:
        try:
            deadline = time.monotonic() + 120  # bounded: until a few batches are committed
            while _committed(checkpoint) < 3:
                assert driver.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver and its JVM, mid-batch
            driver.wait(timeout=30)
    assert 3 * 40 <= spark.read.parquet(str(sink)).count() < 400
    mids += _write(source, 400, 100)  # more arrives while no driver runs
    drain = (  # the query of STREAM, to the end of what is there
        spark.readStream.format("busjournal").option("maxRecordsPerTrigger", "40")
        .load(str(source)).select("MID", "seq").writeStream.format("parquet")
        .option("path", str(sink)).option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        assert drain.awaitTermination(300), "the drain did not end"
    finally:
        drain.stop()
    assert drain.exception() is None
    got = [r["MID"] for r in spark.read.parquet(str(sink)).select("MID").collect()]
    assert len(got) == len(set(got)) == 500 and set(got) == set(mids)
