"""``busgate spark serve`` and ``busgate report --remote``: one real Spark Connect server.

The server is the command a user runs (its own process, its own JVM, a free port); reports go
through it from the command line, and must equal the local report's tables.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.journal import Journal
from bus.message.message import Message, encode_message

# the first test waits for two JVMs (the server, warmed up, and the tests' own session)
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

CLI = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
#: The ``busgate`` program as its script runs it (``bus.cli.run``), telling when the
#: interpreter's teardown runs.
PROGRAM = [
    sys.executable,
    "-c",
    "import atexit, sys; atexit.register(print, 'teardown', file=sys.stderr); "
    "from bus.cli import run; run()",
]
T0 = 1_760_000_000.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``busgate spark serve`` on a free port, up until the module ends."""
    port = _free_port()
    proc = subprocess.Popen(
        [*CLI, "spark", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the first line is "listening on ..." once it serves
    try:
        assert f"listening on sc://127.0.0.1:{port}" in line, line
        yield f"sc://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        proc.stdout.close()


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Requests, ACKs, a NAK, an unanswered request and heartbeats over three minutes."""
    path = tmp_path_factory.mktemp("connect") / "journal"
    with Journal(path) as writer:
        for i in range(300):
            at = T0 + i * 0.6
            req = Message.request("demo", "echo", {"i": i}, reply_to="inbox.a")
            writer.append(encode_message(req), at)
            if i % 50 == 7:
                continue  # unanswered
            answer = req.nak("busy", rcd=503) if i % 10 == 3 else req.ack({"i": i})
            writer.append(encode_message(answer), at + 0.002 + (i % 5) * 0.001)
        for i in range(6):
            beat = Message.event("OAM.SERVICE", {"GroupName": "demo", "InstanceId": f"d{i % 2}"})
            writer.append(encode_message(beat), T0 + i * 30)
    return path


def _tables(out: Path) -> dict[str, list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    return {  # rows sorted: rows that tie on a table's ORDER BY may come in either order
        table.name: sorted(pq.read_table(table / "part-00000.parquet").to_pylist(), key=repr)
        for table in sorted((out / "tables").iterdir())
    }


def test_a_report_through_the_server_equals_the_local_report(
    server: tuple[str, subprocess.Popen[str]], journal: Path, spark: Any, tmp_path: Path
) -> None:
    from pipeline.report import run_report

    url, _ = server
    local = run_report(spark, journal, tmp_path / "local")
    # a relative --journal and the URL from the environment, as in a shell with it exported
    env = {**os.environ, "BUSGATE_SPARK_REMOTE": url}
    command = [*PROGRAM, "report", "--journal", journal.name, "--out", str(tmp_path / "remote")]
    done = subprocess.run(
        command, cwd=journal.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(tmp_path / "remote" / "index.html")  # flushed
    # the client ends without the interpreter's teardown (gRPC's took 0.6-5 s per report)
    assert "teardown" not in done.stderr
    remote = _tables(tmp_path / "remote")
    assert remote == _tables(tmp_path / "local")
    assert set(remote) == set(local.tables) and remote["outcomes"] and remote["instances"]
    assert sum(r["naks"] for r in remote["outcomes"]) == 30
    page = (tmp_path / "remote" / "index.html").read_text("utf-8")
    assert f"<b id='records'>{local.records}</b>" in page and local.records == 300 + 294 + 6


def test_the_server_keeps_a_reports_compiled_classes(
    server: tuple[str, subprocess.Popen[str]],
) -> None:
    """A report's one query generates about 130 classes: with Spark's default cache of 100,
    every report compiled most of them again."""
    from pipeline.connect import CODEGEN_CACHE_ENTRIES

    url, _ = server
    ask = (  # in a process of its own: a Connect session here would bar the tests' own session
        "import sys; from pipeline.connect import connect_session; "
        "print(connect_session(sys.argv[1]).conf.get('spark.sql.codegen.cache.maxEntries'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", ask, url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    entries = done.stdout.strip()
    assert int(entries) == CODEGEN_CACHE_ENTRIES >= 1000


_COLLECT = """
import sys
from datetime import datetime, timezone
from pyspark.sql import functions as F
from pyspark.sql.connect.client.core import SparkConnectClient
from pipeline.bundle import bundle, collect
from pipeline.connect import connect_session

spark = connect_session(sys.argv[1])
at = datetime(2026, 1, 1, tzinfo=timezone.utc)
words = spark.createDataFrame([("a", 1, at), (None, None, None)], "w string, n long, t timestamp")
def frame():
    return bundle({"words": words, "counts": words.groupBy("w").agg(F.count("n").alias("c"))})
expected = frame().toArrow()
asked = []
analyze = SparkConnectClient._analyze
SparkConnectClient._analyze = lambda self, method, **kw: asked.append(method) or analyze(
    self, method, **kw
)
got = collect(frame())  # a new frame: the first one keeps the schema it asked for
print(asked, got.schema == expected.schema, got.sort_by("_bundle_table").to_pylist()
      == expected.sort_by("_bundle_table").to_pylist())
"""


def test_collect_runs_the_query_without_asking_for_its_schema_first(
    server: tuple[str, subprocess.Popen[str]],
) -> None:
    """Spark Connect's toArrow asks for the schema first: the server analyses the whole bundle
    once more for it (measured, 10k records: about a fifth of the server's CPU per report)."""
    url, _ = server
    done = subprocess.run(  # a process of its own: a Connect session bars the tests' own
        [sys.executable, "-c", _COLLECT, url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] True True"


def test_a_missing_journal_through_the_server_is_a_clear_error(
    server: tuple[str, subprocess.Popen[str]], tmp_path: Path
) -> None:
    url, _ = server
    missing = tmp_path / "journl"
    command = [*CLI, "report", "--remote", url, "--journal", str(missing), "--out", "out"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"no such journal: {missing}" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_no_server_at_the_url_fails_fast_and_says_how_to_start_one(
    journal: Path, tmp_path: Path
) -> None:
    url = f"sc://127.0.0.1:{_free_port()}"
    command = [*CLI, "report", "--remote", url, "--journal", str(journal), "--out", "out"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"no Spark Connect server at {url}" in done.stderr
    assert "busgate spark serve" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 30  # not the gRPC client's minutes of retries


def test_a_url_that_is_not_spark_connect_is_refused(journal: Path, tmp_path: Path) -> None:
    command = [*CLI, "report", "--remote", "http://127.0.0.1:15002", "--journal", str(journal)]
    done = subprocess.run([*command, "--out", "out"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "not a Spark Connect URL (sc://HOST:PORT): 'http://127.0.0.1:15002'" in done.stderr


def test_serve_on_a_port_in_use_says_so(server: tuple[str, subprocess.Popen[str]]) -> None:
    url, proc = server
    port = url.rsplit(":", 1)[1]
    done = subprocess.run(
        [*CLI, "spark", "serve", "--port", port], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert f"busgate spark serve: port {port} on 127.0.0.1 is in use" in done.stderr
    assert proc.poll() is None  # the first server is unharmed


def test_the_server_stops_cleanly_on_sigterm(server: tuple[str, subprocess.Popen[str]]) -> None:
    """Last in the module: it stops the shared server."""
    url, proc = server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    host, port = url.removeprefix("sc://").rsplit(":", 1)
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=5):
        pass
