"""The JVM reader reads through Hadoop's FileSystem API (pipeline/jvm Files.java): plain paths,
``file://``, ``webhdfs://`` and ``hdfs://`` give the same rows, splits, pushdown and damage
handling; a path that is not there is an error naming it on every scheme.

``webhdfs://`` and ``hdfs://`` are served by a WebHDFS server (``webhdfs_server.py``) that
answers as a NameNode does (JSON with ``Content-Type: application/json``); Hadoop's own
``WebHdfsFileSystem`` from PySpark's jars is the client, and ``fs.hdfs.impl`` routes ``hdfs://``
to it (here as a read option; the standalone cluster test uses a core-site.xml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bus.journal import Journal, list_segments, segment_info
from bus.message.message import Message, encode_message
from pipeline.compact import compact
from tests.pipeline.webhdfs_server import WebHdfsServer

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = 1_700_000_000.0
RECORDS = 2000
WEBHDFS_HDFS = "org.apache.hadoop.hdfs.web.WebHdfsFileSystem"


def _write(directory: Path, first: int, count: int) -> None:
    with Journal(directory, max_segment_bytes=24_000, index_interval=4_000) as journal:
        for i in range(first, first + count):
            msg = Message.request("demo", "echo", {"i": i, "s": "x" * (i % 7)}, reply_to="in.t")
            journal.append(encode_message(msg), T0 + i)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebHdfsServer, Path]]:
    """A journal of many segments (two compacted, one damaged record) behind a WebHDFS server."""
    root = tmp_path_factory.mktemp("hdfs")
    journal = root / "busgate" / "journal"
    _write(journal, 0, RECORDS)
    segments = list_segments(journal)
    assert len(segments) > 8
    compact(journal)  # two segments compacted: read with Spark's Parquet reader, remote too
    for stale in journal.glob("journal-*.parquet"):
        if stale.name.split(".")[0] not in {s.stem for s in segments[:2]}:
            stale.unlink()
    damaged = segments[5]  # one record's body corrupted: its CRC fails, the span is skipped
    data = bytearray(damaged.read_bytes())
    data[segment_info(damaged).first_record + 40] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with WebHdfsServer(root) as server:
        yield server, journal


def _urls(server: WebHdfsServer, journal: Path) -> dict[str, str]:
    return {
        "plain": str(journal),
        "file": journal.as_uri(),
        "webhdfs": server.url("webhdfs", "/busgate/journal"),
        "hdfs": server.url("hdfs", "/busgate/journal"),
    }


def _load(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format("busjournal")
    if url.startswith("hdfs://"):
        reader = reader.option("fs.hdfs.impl", WEBHDFS_HDFS)  # a Hadoop key as a read option
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(url)


def _rows(frame: Any) -> list[dict[str, Any]]:
    rows = [r.asDict() for r in frame.collect()]
    for row in rows:
        row["payload_map"] = dict(row["payload_map"] or {})
    return sorted(rows, key=lambda r: (r["segment"], r["offset"]))


def test_every_scheme_gives_the_same_rows_and_splits(
    spark: Any, served: tuple[WebHdfsServer, Path]
) -> None:
    server, journal = served
    urls = _urls(server, journal)
    expected = _rows(_load(spark, urls["plain"]))
    assert len(expected) == RECORDS - 1  # the damaged record is read around, nothing else lost
    assert {r["segment"] for r in expected} == {p.name for p in list_segments(journal)}
    parts = _load(spark, urls["plain"], splitBytes="8000").rdd.getNumPartitions()
    assert parts > 10
    for scheme, url in urls.items():
        if scheme == "plain":
            continue
        assert _rows(_load(spark, url)) == expected, scheme
        assert _load(spark, url, splitBytes="8000").rdd.getNumPartitions() == parts, scheme
    assert server.ops["OPEN"] > 0 and server.ops["LISTSTATUS"] > 0  # it went over HTTP


def test_time_and_sequence_filters_read_less_over_webhdfs(
    spark: Any, served: tuple[WebHdfsServer, Path]
) -> None:
    server, journal = served
    url = server.url("webhdfs", "/busgate/journal")
    segments = [p.name for p in list_segments(journal)]
    before = len(server.reads)
    df = _load(spark, url)
    assert df.where(df.seq > RECORDS - 20).count() == 20
    # every segment's header is read (offset 0), but records only of the newest
    scanned = {Path(p).name for p, at in server.reads[before:] if p.endswith(".seg") and at > 0}
    assert scanned == {segments[-1]}
    since = datetime.fromtimestamp(T0 + 1000, UTC)
    until = datetime.fromtimestamp(T0 + 1010, UTC)
    seqs = [r["seq"] for r in df.where((df.ts >= since) & (df.ts < until)).select("seq").collect()]
    assert sorted(seqs) == list(range(1001, 1011))


@pytest.mark.parametrize("scheme", ["plain", "file", "webhdfs", "hdfs"])
def test_a_path_that_is_not_there_is_an_error_naming_it(
    spark: Any, served: tuple[WebHdfsServer, Path], scheme: str
) -> None:
    server, journal = served
    url = _urls(server, journal)[scheme].replace("/journal", "/no-such-journal")
    with pytest.raises(Exception, match="PATH_NOT_FOUND") as batch:
        _load(spark, url)
    assert url in str(batch.value)  # as the user wrote it
    stream = spark.readStream.format("busjournal")
    if scheme == "hdfs":
        stream = stream.option("fs.hdfs.impl", WEBHDFS_HDFS)
    with pytest.raises(Exception, match="PATH_NOT_FOUND"):
        stream.load(url)


def test_the_python_source_names_what_it_cannot_read(
    spark: Any, served: tuple[WebHdfsServer, Path], tmp_path: Path
) -> None:
    server, journal = served
    assert spark.read.format("busjournalpy").load(journal.as_uri()).count() == RECORDS - 1
    with pytest.raises(Exception, match="no such journal") as missing:
        spark.read.format("busjournalpy").load(str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in str(missing.value)
    with pytest.raises(Exception, match="JVM reader"):
        spark.read.format("busjournalpy").load(server.url("webhdfs", "/busgate/journal"))


def test_a_stream_over_webhdfs_reads_each_shipped_segment_once(
    spark: Any, served: tuple[WebHdfsServer, Path], tmp_path: Path
) -> None:
    server, journal = served
    source = journal.parent / "streamed"
    source.mkdir()
    segments = list_segments(journal)
    for segment in segments[:3]:  # what a shipper put there so far
        shutil.copy(segment, source / segment.name)
    url = server.url("webhdfs", "/busgate/streamed")
    sink, checkpoint = tmp_path / "sink", tmp_path / "ckpt"

    def run() -> None:
        query = (
            spark.readStream.format("busjournal")
            .load(url)
            .select("seq")
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    first = sorted(r["seq"] for r in spark.read.parquet(str(sink)).collect())
    assert first == list(range(1, len(first) + 1)) and len(first) > 100
    for segment in segments[3:5]:  # two more closed segments arrive
        shutil.copy(segment, source / segment.name)
    run()
    seqs = sorted(r["seq"] for r in spark.read.parquet(str(sink)).collect())
    assert len(seqs) == len(set(seqs)) > len(first)  # the new records, none twice
    assert seqs == list(range(1, len(seqs) + 1))


def test_spark_reads_a_namenodes_json_replies_in_a_busgate_session(
    spark: Any, served: tuple[WebHdfsServer, Path]
) -> None:
    server, _ = served
    url = server.url("webhdfs", "/busgate/parquet")
    spark.range(5).write.mode("overwrite").parquet(url)  # Spark's own source, through WebHDFS
    assert sorted(r["id"] for r in spark.read.parquet(url).collect()) == [0, 1, 2, 3, 4]


_BARE_CLIENT = """
import sys
from pyspark import SparkConf
from pyspark.java_gateway import launch_gateway

gateway = launch_gateway(SparkConf().set("spark.ui.enabled", "false"))
jvm = gateway.jvm
path = jvm.org.apache.hadoop.fs.Path(sys.argv[1])
try:
    path.getFileSystem(jvm.org.apache.hadoop.conf.Configuration()).listStatus(path)
    print("listed")
except Exception as exc:
    print(str(exc.java_exception.toString()))
gateway.shutdown()
"""


def test_pysparks_shaded_hadoop_client_alone_cannot_read_webhdfs(
    served: tuple[WebHdfsServer, Path],
) -> None:
    """What PySpark as shipped does with a NameNode's reply (why busgate's jar brings MediaTypes):
    Hadoop's client in a JVM of its own, PySpark's jars only."""
    server, _ = served
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    done = subprocess.run(
        [sys.executable, "-c", _BARE_CLIENT, server.url("webhdfs", "/busgate")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "ClassNotFoundException" in done.stdout and "RuntimeDelegateImpl" in done.stdout
