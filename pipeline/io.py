"""Readers and writers of the pipeline (kept apart from the pure transforms).

- :func:`read_journal`: the ``busjournal`` source over a directory, cut to a time range;
- :func:`write_tables`: each table as Parquet under ``OUT/tables/NAME`` (a Spark job each);
- :func:`write_arrow_tables`: the same from tables already collected as Arrow (no job).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = ["read_journal", "write_arrow_tables", "write_tables"]


def _ts(value: float | datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(value, UTC)


def read_journal(
    spark: SparkSession,
    path: str | Path,
    since: float | datetime | None = None,
    until: float | datetime | None = None,
    **options: Any,
) -> DataFrame:
    """The journal's records with ``since <= ts < until``.

    The range is given to the source both as options (the Python source skips segments, index
    blocks and records outside it) and as filters (the JVM reader pushes them down the same way).

    Args:
        spark: the session (with ``busjournal`` registered: see :mod:`pipeline.session`).
        path: the journal directory.
        since: first time included (epoch seconds or datetime), or ``None``.
        until: first time excluded, or ``None``.
        **options: more ``busjournal`` options (``splitBytes``).

    Returns:
        The rows as a DataFrame.
    """
    reader = spark.read.format("busjournal")
    if since is not None:
        reader = reader.option("since", str(_ts(since).timestamp()))
    if until is not None:
        reader = reader.option("until", str(_ts(until).timestamp()))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    frame = reader.load(str(path))
    if since is not None:
        frame = frame.where(F.col("ts") >= F.lit(_ts(since)))
    if until is not None:
        frame = frame.where(F.col("ts") < F.lit(_ts(until)))
    return frame


def write_tables(tables: dict[str, DataFrame], out: str | Path) -> dict[str, Path]:
    """Write each table as Parquet under ``out/tables/NAME`` (overwriting).

    Args:
        tables: tables by name.
        out: the report directory.

    Returns:
        Where each table went, by name.
    """
    written = {}
    for name, frame in tables.items():
        target = Path(out) / "tables" / name
        frame.coalesce(1).write.mode("overwrite").parquet(str(target))
        written[name] = target
    return written


def write_arrow_tables(tables: dict[str, Any], out: str | Path) -> dict[str, Path]:
    """Write Arrow tables as Parquet under ``out/tables/NAME/part-00000.parquet`` (replacing).

    Args:
        tables: ``pyarrow.Table`` objects by name (from ``DataFrame.toArrow()``).
        out: the report directory.

    Returns:
        Where each table went (a directory Spark reads with ``spark.read.parquet``), by name.
    """
    import shutil

    import pyarrow.parquet as pq

    written = {}
    for name, table in tables.items():
        target = Path(out) / "tables" / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        pq.write_table(table, target / "part-00000.parquet")
        written[name] = target
    return written
