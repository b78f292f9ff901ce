"""pipeline.bundle: many tables from one query, split back into each table's own Arrow table."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from bus.journal import Journal  # noqa: E402
from bus.message.message import Message, encode_message  # noqa: E402
from pipeline.bundle import bundle, unbundle  # noqa: E402
from pipeline.report import run_report  # noqa: E402
from pipeline.transforms import ordered  # noqa: E402

pytestmark = pytest.mark.slow


def _frames(spark: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    when = datetime(2026, 1, 1, tzinfo=UTC)
    words = spark.createDataFrame(
        [("b", 2, 0.5, when), ("a", None, 1.5, when), (None, 3, None, None), ("c", 1, 2.0, when)],
        "word string, n long, x double, at timestamp",
    )
    counts = spark.createDataFrame([(i % 7, i) for i in range(200)], "k int, v long")
    return {
        "by_n_desc": ordered(words, F.desc("n"), "word"),  # nulls last, as Spark sorts them
        "by_word": ordered(words.select("word", "x"), "word"),  # a null first
        "grouped": ordered(counts.groupBy("k").agg(F.sum("v").alias("total")), "k"),
        "empty": counts.where(F.col("k") > 100).select("v", F.lit("x").alias("tag")),
    }


def test_each_table_comes_back_as_its_own_query_would_give_it(spark: Any) -> None:
    frames = _frames(spark)
    tables = unbundle(bundle(frames).toArrow(), list(frames))
    assert list(tables) == list(frames)
    for name, frame in frames.items():
        alone = frame.toArrow()
        assert tables[name].column_names == alone.column_names, name
        assert [f.type for f in tables[name].schema] == [f.type for f in alone.schema], name
        assert tables[name].to_pylist() == alone.to_pylist(), name  # rows and their order
    assert [r["n"] for r in tables["by_n_desc"].to_pylist()] == [3, 2, 1, None]
    assert tables["empty"].num_rows == 0 and tables["empty"].column_names == ["v", "tag"]


def test_the_report_is_one_spark_job_and_keeps_nothing_cached(spark: Any, tmp_path: Path) -> None:
    """Seven tables and the record count in one job: each was a job (two when sorted) and,
    through Spark Connect, a round trip; on small journals that was most of the report. As on
    ``busgate spark serve`` (adaptive execution off: it runs each shuffle as a job of its own),
    which also must not keep a report's cached data after it."""
    journal = tmp_path / "journal"
    with Journal(journal) as writer:
        for i in range(50):
            req = Message.request("svc", "get", {"i": i}, reply_to="inbox.t")
            writer.append(encode_message(req), 1_700_000_000 + i)
            writer.append(encode_message(req.ack({})), 1_700_000_000 + i + 0.002)
    spark.catalog.clearCache()  # the session is shared: what an earlier test cached is not ours
    single = spark.conf.get("spark.sql.maxSinglePartitionBytes")
    context = spark.sparkContext
    group = "test-the-report-is-one-spark-job"
    context.setJobGroup(group, group)
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        report = run_report(spark, journal, tmp_path / "out", until=1_700_000_100)
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
        context.setLocalProperty("spark.jobGroup.id", None)
    assert report.records == 100
    assert report.tables["outcomes"][0]["acks"] == 50
    jobs = context.statusTracker().getJobIdsForGroup(group)
    assert len(jobs) == 1
    # a journal this small is worked on in one partition: no shuffle at all, one stage (the
    # tables' aggregations and sorts each cut a stage of their own before: 11 stages; then
    # the join still shuffled both its sides: 3)
    stages = context.statusTracker().getJobInfo(jobs[0]).stageIds
    assert len(stages) == 1, list(stages)
    assert spark.conf.get("spark.sql.maxSinglePartitionBytes") == single  # the session's again
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()
