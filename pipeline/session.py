"""Build a SparkSession ready for the ``busjournal`` source (the pitfalls of ``SPARK.md`` handled).

- workers run this very interpreter (``PYSPARK_PYTHON``), so they find pyarrow and this package;
- Spark binds to loopback and shows no UI or progress bars unless asked;
- few shuffle partitions for local runs;
- Python workers start with the decoder imported (:mod:`pipeline.daemon`);
- the JVM reader (:mod:`pipeline.jvm`, compiled at install) is put on the class path when it
  was built: then ``format("busjournal")`` is that reader, and the Python source is
  ``format("busjournalpy")``; without it the Python source is both.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["QUICK_START_OPTIONS", "jvm_reader", "spark_session"]

#: JVM options for short jobs on small data: the C1 compiler only (no C2 compiler threads taking
#: the cores a 2-core machine has), one compiler thread and the serial collector. Measured on 2
#: cores: a session plus a 10k-record report in about half the time; big scans run slower.
QUICK_START_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"
#: The JVM reader's logger (pipeline/jvm JournalPartitionReader): its damage warnings stay shown.
DAMAGE_LOGGER = "busgate.spark.busjournal"


def spark_session(
    master: str = "local[2]",
    app_name: str = "busgate",
    *,
    shuffle_partitions: int = 4,
    conf: dict[str, str] | None = None,
    quick_start: bool = False,
    python_source: bool = True,
) -> Any:
    """Create (or reuse) a SparkSession with the ``busjournal`` source registered.

    Args:
        master: Spark master URL (``local[2]`` by default; ``spark://host:7077`` for a cluster).
        app_name: the application name.
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (small for local runs).
        conf: more Spark settings.
        quick_start: start the JVM with :data:`QUICK_START_OPTIONS` (for small data; takes
            effect when this call starts the JVM).
        python_source: register the Python source as ``busjournalpy`` (about 1.5 s: Spark
            checks it in a Python process); it is registered as ``busjournal`` whatever this
            says when the JVM reader is missing.

    Returns:
        The ``pyspark.sql.SparkSession``.
    """
    from pipeline.jvm import jar_path

    jar = jar_path()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from pipeline.source import BusJournalDataSource, BusJournalPyDataSource

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        # workers forked with numpy, pyarrow and the decoder already imported (pipeline/daemon.py)
        .config("spark.python.daemon.module", "pipeline.daemon")
        .config(
            "spark.driver.bindAddress", "127.0.0.1" if master.startswith("local") else "0.0.0.0"
        )
    )
    if jar is not None:
        builder = builder.config("spark.jars", str(jar))
    if quick_start:
        builder = builder.config("spark.driver.extraJavaOptions", QUICK_START_OPTIONS)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _show_damage(spark)
    if python_source:
        spark.dataSource.register(BusJournalPyDataSource)
    if not jvm_reader(spark):
        spark.dataSource.register(BusJournalDataSource)
    return spark


def _show_damage(spark: Any) -> None:
    """Spark's own chatter is kept to errors, but the readers' warnings about damaged spans
    they skip (PROTOCOL.md 8) are what a user must see: the JVM reader's logger stays at WARN
    (in this JVM: local mode's executors; a cluster's executors log them at their own level).
    The Python source warns through Python logging, which the ERROR level does not touch."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.WARN
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(DAMAGE_LOGGER, level)


def jvm_reader(spark: Any) -> bool:
    """Whether ``format("busjournal")`` is the JVM reader in this session."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(
            "busgate.spark.BusJournalProvider",
            True,
            jvm.Thread.currentThread().getContextClassLoader(),
        )
    except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        return False
    return True
