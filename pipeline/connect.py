"""A resident Spark for reports in seconds: a Spark Connect server, and sessions that use it.

A cold Spark costs about 10 s before the first job (``SPARK.md``); a report on 10,000 records
needs about 2 s of work. ``busgate spark serve`` keeps one Spark up: a local SparkSession (built
by :func:`pipeline.session.spark_session`, so the ``busjournal`` JVM reader is on its class path
and its Python workers run this interpreter, with busgate importable) with PySpark's Spark Connect
plugin serving gRPC on ``--port``. ``busgate report --remote sc://HOST:PORT`` (or
``BUSGATE_SPARK_REMOTE``) then builds its report through it: a thin client, no JVM of its own.

The wire is Spark's own (Spark Connect over gRPC, ``sc://`` URLs); busgate adds none.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CODEGEN_CACHE_ENTRIES",
    "CONNECT_PLUGIN",
    "DEFAULT_PORT",
    "RemoteError",
    "check_reachable",
    "connect_session",
    "serve",
    "server_session",
    "warm_up",
]

#: Spark Connect's usual port.
DEFAULT_PORT = 15002
#: Compiled classes the server keeps (Spark's default, 100, is less than one report needs).
CODEGEN_CACHE_ENTRIES = 2000
#: The Spark plugin that serves Spark Connect from a running SparkContext (its jar ships with
#: PySpark: ``pyspark/jars/spark-connect_*.jar``).
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


class RemoteError(Exception):
    """The Spark Connect server cannot be used (bad URL, nobody listening)."""


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "sc" or not parts.hostname:
        raise RemoteError(f"not a Spark Connect URL (sc://HOST:PORT): {url!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise RemoteError(f"bad port in {url!r}") from exc
    return parts.hostname, port


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail fast when no server listens at ``url`` (the gRPC client would retry for minutes).

    Raises:
        RemoteError: a URL that is not ``sc://HOST[:PORT]``, or no answer at it.
    """
    host, port = _host_port(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise RemoteError(
            f"no Spark Connect server at {url} ({exc.strerror or exc}); "
            "start one with: busgate spark serve"
        ) from exc


def connect_session(url: str) -> Any:
    """A Spark Connect session on the server at ``url`` (checked reachable first).

    Raises:
        RemoteError: nobody listens there.
    """
    check_reachable(url)
    from pyspark.sql import SparkSession

    # the server's settings (UTC, 2 shuffle partitions, no AQE) are every session's defaults
    return SparkSession.builder.remote(url).getOrCreate()


def server_session(
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    master: str = "local[2]",
    *,
    quick_start: bool = True,
) -> Any:
    """Start the local SparkSession that serves Spark Connect on ``host:port``.

    Args:
        port: the gRPC port (0 is not supported by Spark: pick a free one).
        host: the address to bind (``0.0.0.0`` in a container).
        master: the Spark master the server's jobs run on.
        quick_start: JVM options for small data (:data:`pipeline.session.QUICK_START_OPTIONS`).

    Returns:
        The classic ``SparkSession`` (stop it to stop the server).
    """
    from pipeline.session import spark_session

    conf = {
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        # small reports are many small jobs: adaptive execution's extra stages cost more than
        # they save (measured, 10k records: about 0.5 s of 3.7 s)
        "spark.sql.adaptive.enabled": "false",
        # a report's query generates about 130 classes; Spark keeps 100 compiled, so every
        # report compiled some 120 again (measured, 10k records: 0.6 of 2.9 s of JVM CPU)
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
    }
    return spark_session(
        master,
        "busgate-spark-connect",
        shuffle_partitions=2,
        conf=conf,
        quick_start=quick_start,
        python_source=False,
    )


def serve(
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    master: str = "local[2]",
    *,
    ready: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve Spark Connect until ``stop`` is set (or forever); ``ready`` gets the ``sc://`` URL.

    Raises:
        RemoteError: the port is taken (the plugin fails to bind).
    """
    if _port_taken(host, port):
        raise RemoteError(f"port {port} on {host} is in use")
    spark = server_session(port, host, master)
    try:
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        url = f"sc://{shown}:{port}"
        check_reachable(url, timeout=30.0)
        warm_up(spark)
        if ready is not None:
            ready(url)
        (stop or threading.Event()).wait()
    finally:
        spark.stop()


def warm_up(spark: Any) -> None:
    """Build a report on a tiny journal in the server's own session, so that the first user's
    report pays less for the JVM's first compilations (a Connect client cannot run in the
    server's process: Spark refuses a remote session beside a classic one)."""
    import tempfile
    from pathlib import Path

    from bus.journal import Journal
    from bus.message.message import Message, encode_message
    from pipeline.report import run_report

    with tempfile.TemporaryDirectory(prefix="busgate-warm-up-") as temp:
        journal = Path(temp) / "journal"
        with Journal(journal) as writer:
            for i in range(20):
                req = Message.request("warm", "up", {"i": i}, reply_to="inbox.w")
                writer.append(encode_message(req), 1_700_000_000 + i)
                writer.append(encode_message(req.ack({})), 1_700_000_000 + i + 0.001)
        run_report(spark, journal, Path(temp) / "report")


def _port_taken(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False
