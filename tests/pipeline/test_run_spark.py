"""``busgate run --spark`` (bus/cli/run_spark.py, gateway/routes/report_refresh.py): a real Spark
Connect server beside the stack, the gateway's report rebuilt through it on ``GET /v1/reports``
(equal to a local report of the same journal), and nothing of Spark left once the run stops.

Here, not in tests/bus/, because it needs the run's one local SparkSession (conftest.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(900)]

CLI = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]


def _tables(out: Path) -> dict[str, list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    return {  # rows sorted: rows that tie on a table's ORDER BY may come in either order
        table.name: sorted(pq.read_table(table).to_pylist(), key=repr)
        for table in sorted((out / "tables").iterdir())
    }


def _banner(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, "busgate run ended before its banner:\n" + "".join(lines)
        lines.append(line)
        if line.startswith("Ctrl-C stops."):
            return "".join(lines)


def _report(http: httpx.Client, after: float | None) -> dict[str, Any]:
    """``GET /v1/reports`` until it covers time after ``after`` (a build at most every 5 s)."""
    deadline = time.monotonic() + 300
    while True:
        body: dict[str, Any] = http.get("/v1/reports").json()
        assert body["error"] is None, body
        if body["available"] and (after is None or body["until"] > after):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.5)


def test_run_spark_rebuilds_the_consoles_report_through_the_warm_server(
    tmp_path: Path, spark: Any
) -> None:
    from pipeline.report import run_report

    journal, served = tmp_path / "journal", tmp_path / "served"
    env = {**os.environ, "BUSGATE_GATEWAY_REPORT_DIR": str(served), "BUSGATE_OBJECTS_LINK": ""}
    env.pop("BUSGATE_SPARK_REMOTE", None)
    command = [*CLI, "run", "--port", "0", "--bus-port", "0", "--objects-port", "0", "--no-mop",
               "--journal", str(journal), "--spark"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)  # fmt: skip
    try:
        banner = _banner(proc)
        url = re.search(r"console\s+(http://\S+)/", banner)
        remote = re.search(r"spark\s+(sc://127\.0\.0\.1:(\d+))", banner)
        assert url and remote, banner
        spark_port = int(remote.group(2))
        family = psutil.Process(proc.pid).children(recursive=True)
        assert any("java" in p.name() for p in family), [p.name() for p in family]
        base = url.group(1).replace("localhost", "127.0.0.1")
        with httpx.Client(base_url=base, timeout=300) as http:
            for i in range(5):
                answer = http.post("/v1/request/demo", json={"CMD": "echo", "i": i})
                assert answer.status_code == 200, answer.text
            first = _report(http, None)
            first_tables = _tables(served)
            for i in range(7):  # traffic after the first report: the second one must show it
                answer = http.post("/v1/request/demo", json={"CMD": "echo", "i": i})
                assert answer.status_code == 200, answer.text
            second = _report(http, first["until"])
            second_tables = _tables(served)
            page = http.get("/reports/")
            assert page.status_code == 200 and "<b id='records'>" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    # nothing of Spark is left: not the server's python, not its JVM, not its port
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not any(c.laddr.port == spark_port for c in psutil.net_connections("tcp")
                   if c.status == psutil.CONN_LISTEN)  # fmt: skip
    # each served report is the local report of the same journal up to its end
    for body, tables, name in ((first, first_tables, "a"), (second, second_tables, "b")):
        local = run_report(spark, journal, tmp_path / name, None, body["until"])
        assert tables == _tables(tmp_path / name)
        assert set(tables) == set(local.tables)
    outcomes = {t: sum(r["requests"] for r in tables["outcomes"])
                for t, tables in (("a", first_tables), ("b", second_tables))}  # fmt: skip
    assert outcomes["b"] >= outcomes["a"] + 7, outcomes
