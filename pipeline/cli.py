"""``busgate report``: run the Spark report over a journal.

::

    busgate report --journal DIR --since 2h [--until T] --out DIR
                   [--master local[2] | --remote sc://HOST:15002] [--window "1 minute"]
    busgate spark serve [--port 15002] [--host 127.0.0.1] [--master local[2]]

``--remote`` (or ``BUSGATE_SPARK_REMOTE``) builds the report through a resident Spark Connect
server (``busgate spark serve``, :mod:`pipeline.connect`) instead of starting a Spark: seconds
instead of a cold start.

Writes ``OUT/tables/*`` (Parquet), ``OUT/*.svg`` (charts) and ``OUT/index.html``; prints the
page's path.
Damaged spans of the journal are read around: each is named on stderr and on the page.
Exit codes: 0 success, 1 unreadable journal, Spark failure or the ``pipeline`` extra not
installed, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bus.cli import exit_at_once
from bus.errors import BusError
from bus.journal.segments import list_segments

__all__ = ["QUICK_START_BYTES", "register", "spark_error_line"]

#: Below this many journal bytes in the time range, Spark starts with quick-start JVM options
#: (``pipeline.session.QUICK_START_OPTIONS``).
QUICK_START_BYTES = 256 * 1024 * 1024


_JOURNAL_ERROR = re.compile(
    r"JournalError: (.+)|\[PATH_NOT_FOUND\] (Path does not exist: .+?)\.? SQLSTATE"
)
#: What ``pip install 'busgate[pipeline]'`` adds (pyproject.toml), by import name.
_PIPELINE_EXTRA = frozenset({"pyspark", "pandas", "pyarrow", "numpy", "py4j"})


def spark_error_line(exc: BaseException) -> str:
    """One line for an error Spark raised: a worker's ``JournalError`` text when there is one.

    Args:
        exc: the exception (Spark's wrapping of a worker failure, or anything else).

    Returns:
        ``PATH: REASON at offset N`` for a damaged journal, else the exception's first line.
    """
    text = str(exc)
    found = _JOURNAL_ERROR.search(text)
    if found:
        return (found.group(1) or found.group(2)).strip()
    return text.splitlines()[0] if text else repr(exc)


def _run(args: argparse.Namespace) -> int:
    from bus.cli.journal import parse_time

    now = time.time()
    try:
        since = parse_time(args.since, now) if args.since else None
        until = parse_time(args.until, now) if args.until else None
    except ValueError as exc:
        print(f"busgate report: bad time: {exc}", file=sys.stderr)
        return 2
    try:
        from pipeline.report import journal_bytes
        from pipeline.session import spark_session
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in _PIPELINE_EXTRA:
            raise
        print(
            f"busgate report: {exc.name} is not installed; the report needs the pipeline extra: "
            "pip install 'busgate[pipeline]'",
            file=sys.stderr,
        )
        return 1
    from pipeline.plan import is_remote

    remote = is_remote(args.journal)  # hdfs://, webhdfs://, s3a://: read through Hadoop's client
    local = "" if remote else re.sub(r"^file:(//)?", "", args.journal)
    if not remote and not list_segments(local):  # a mistyped path is not an empty report
        what = "no journal segments in" if Path(local).is_dir() else "no such journal:"
        print(f"busgate report: {what} {args.journal}", file=sys.stderr)
        return 2
    if args.remote:  # the server resolves paths: give it this one whole
        if not remote:
            args.journal = str(Path(local).resolve())
        return _run_remote(args, since, until)
    # small data: a JVM tuned to start fast (the report's cost then grows with the data). On a
    # cluster the driver only plans and collects (the executors scan): always; a remote
    # journal's size is not known before the JVM is up: then the usual JVM
    if not args.master.startswith("local"):
        quick = True
    else:
        quick = not remote and journal_bytes(local, since, until) < QUICK_START_BYTES
    spark = spark_session(
        args.master, "busgate-report", shuffle_partitions=2, quick_start=quick, python_source=False
    )
    try:
        return _report(spark, args, since, until)
    finally:
        spark.stop()


def _run_remote(args: argparse.Namespace, since: float | None, until: float | None) -> int:
    from pipeline.connect import RemoteError, connect_session

    try:
        spark = connect_session(args.remote)
    except RemoteError as exc:
        print(f"busgate report: {exc}", file=sys.stderr)
        return 1
    try:
        return _report(spark, args, since, until)
    finally:
        spark.stop()  # this client's session; the server stays up
        exit_at_once()  # the files are written and closed: skip gRPC's seconds of teardown


def _report(spark: Any, args: argparse.Namespace, since: float | None, until: float | None) -> int:
    from pipeline.report import run_report

    try:
        report = run_report(spark, args.journal, args.out, since, until, args.window)
    except BusError as exc:
        print(f"busgate report: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # Spark wraps worker errors: show the journal's own words
        print(f"busgate report: {spark_error_line(exc)}", file=sys.stderr)
        return 2 if "[PATH_NOT_FOUND]" in str(exc) else 1  # a remote path that is not there
    for damage in report.damage:
        print(f"busgate report: damaged: {damage}", file=sys.stderr)
    print(report.index)
    return 0


def register(subparsers: Any) -> None:
    """Add ``busgate report``.

    Args:
        subparsers: the top-level ``add_subparsers()`` object.
    """
    parser = subparsers.add_parser("report", help="Spark report over the journal (Parquet + HTML)")
    parser.add_argument("--journal", default="journal", help="the journal directory")
    parser.add_argument("--since", help="first time (ISO 8601, epoch s, or 15m/2h/1d ago)")
    parser.add_argument("--until", help="end time, excluded (default: now)")
    parser.add_argument("--out", required=True, help="report directory")
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    parser.add_argument(
        "--remote",
        default=os.environ.get("BUSGATE_SPARK_REMOTE") or None,
        help="a Spark Connect server to build the report on, sc://HOST:15002 "
        "(default: $BUSGATE_SPARK_REMOTE; see busgate spark serve)",
    )
    parser.add_argument("--window", default="1 minute", help="time window for series")
    parser.set_defaults(func=_run)
    spark = subparsers.add_parser("spark", help="a resident Spark for fast reports")
    actions = spark.add_subparsers(dest="spark_command", required=True)
    serve = actions.add_parser("serve", help="run a Spark Connect server for busgate report")
    serve.add_argument("--port", type=int, default=15002, help="gRPC port (default 15002)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: all)")
    serve.add_argument("--master", default="local[2]", help="Spark master its jobs run on")
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        from pipeline.connect import RemoteError, serve
    except ModuleNotFoundError as exc:  # pragma: no cover - the same message as report's
        print(f"busgate spark serve: {exc.name} is not installed: pip install 'busgate[pipeline]'")
        return 1
    from pipeline.jvm import jar_path

    if jar_path() is None:
        print(
            "busgate spark serve: the busjournal JVM reader is not built: "
            "python -m pipeline.jvm.build (needs javac)",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def ready(url: str) -> None:
        print(f"busgate spark serve: listening on {url}", flush=True)
        print(f"  busgate report --remote {url} --journal DIR --out DIR", flush=True)

    try:
        serve(args.port, args.host, args.master, ready=ready, stop=stop)
    except RemoteError as exc:
        print(f"busgate spark serve: {exc}", file=sys.stderr)
        return 1
    return 0
