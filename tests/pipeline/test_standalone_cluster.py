"""A real Spark standalone cluster (a master and two workers, each its own process, on loopback)
reads a journal shipped to ``hdfs://``: ``busgate journal ship``, then ``busgate report --master
spark://...`` and a streaming query, each in its own driver process. ``hdfs://`` is routed by a
``core-site.xml`` (``HADOOP_CONF_DIR``) to Hadoop's WebHDFS client and served by the WebHDFS
test server; the executors read the journal through Hadoop's FileSystem API with the driver's
configuration, and run busgate (the JVM reader's jar from ``spark.jars``, ``pipeline`` from this
venv) where the workers run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bus.journal import Journal, list_segments
from bus.message.message import Message, encode_message
from pipeline.session import QUICK_START_OPTIONS
from tests.conftest import free_tcp_port, free_tcp_ports
from tests.pipeline.webhdfs_server import WebHdfsServer, core_site

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

BUSGATE = str(Path(sys.executable).with_name("busgate"))
REQUESTS, NAKS = 120, 30
T0 = time.time() - 600


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@dataclass
class Cluster:
    """The master's URL and web UI, and the processes started."""

    master: str
    ui: str
    processes: list[subprocess.Popen[bytes]]

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as reply:
            state: dict[str, Any] = json.load(reply)
        return state


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [_spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(processes):  # workers first: they stop their executors
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in reversed(processes):
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers (one core, 1 GiB each), on free loopback ports."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
        # the master and the workers only schedule: JVMs that start fast and stay small
        "SPARK_DAEMON_JAVA_OPTS": QUICK_START_OPTIONS,
        "SPARK_DAEMON_MEMORY": "256m",
    }
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    port, ui_port = free_tcp_ports(2)
    master = f"spark://127.0.0.1:{port}"
    processes = [
        _start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            logs / "master.log",
            env,
        )  # fmt: skip
    ]
    running = Cluster(master, f"http://127.0.0.1:{ui_port}", processes)
    try:
        for n in range(2):
            work = logs / f"work-{n}"
            processes.append(
                _start(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        master,
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(free_tcp_port()),
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--work-dir",
                        str(work),
                    ],
                    logs / f"worker-{n}.log",
                    env,
                )  # fmt: skip
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                if running.state().get("aliveworkers") == 2:
                    break
            except OSError:
                pass  # the master's UI is not up yet
            dead = [p for p in processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                said = {p.name: p.read_text()[-2000:] for p in logs.glob("*.log")}
                raise AssertionError(f"the cluster did not come up: {said}")
            time.sleep(0.5)
        yield running
    finally:
        _stop(processes)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A journal shipped with ``busgate journal ship`` to hdfs:// (the WebHDFS test server)."""
    base = tmp_path_factory.mktemp("journal")
    local = base / "journal"
    with Journal(local, max_segment_bytes=8_000) as writer:
        for i in range(REQUESTS):
            req = Message.request("demo", "echo", {"i": i}, reply_to="inbox.a", caller="key:ops")
            writer.append(encode_message(req), T0 + i)
            answer = req.nak("refused", rcd=409) if i < NAKS else req.ack({"i": i})
            writer.append(encode_message(answer), T0 + i + 0.005)
    assert len(list_segments(local)) > 3
    env = {"HADOOP_CONF_DIR": str(core_site(base / "conf")), "SPARK_LOCAL_IP": "127.0.0.1"}
    with WebHdfsServer(base / "hdfs") as server:
        url = server.url("hdfs", "/busgate/journal")
        done = subprocess.run(
            [BUSGATE, "journal", "ship", str(local), url],
            capture_output=True, text=True, timeout=180, env={**os.environ, **env},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        yield url, env


def test_busgate_report_runs_on_the_cluster_from_hdfs(
    cluster: Cluster, shipped: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = shipped
    out = tmp_path / "report"
    done = subprocess.run(
        [BUSGATE, "report", "--journal", url, "--master", cluster.master, "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    page = (out / "index.html").read_text("utf-8")
    assert f"<b id='records'>{2 * REQUESTS}</b>" in page
    import pyarrow.parquet as pq

    outcomes = pq.read_table(out / "tables" / "outcomes").to_pylist()
    assert [(r["GRP"], r["requests"], r["acks"], r["naks"]) for r in outcomes] == [
        ("demo", REQUESTS, REQUESTS - NAKS, NAKS)
    ]
    apps = cluster.state()["completedapps"]
    assert any(a["name"] == "busgate-report" for a in apps)  # it ran on the cluster's executors

    missing = subprocess.run(
        [BUSGATE, "report", "--journal", url + "-nope", "--master", cluster.master,
         "--out", str(tmp_path / "r2")],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert missing.returncode == 2
    assert f"Path does not exist: {url}-nope" in missing.stderr
    assert "Traceback" not in missing.stderr


_STREAM = """
import sys
from pipeline.session import QUICK_START_OPTIONS as QUICK, spark_session

master, url, sink, checkpoint = sys.argv[1:5]
spark = spark_session(
    master,
    "busgate-stream",
    quick_start=True,
    conf={"spark.executor.memory": "512m", "spark.executor.extraJavaOptions": QUICK},
)
query = (
    spark.readStream.format("busjournal").load(url)
    .select("seq", "GRP", "TYP")
    .writeStream.format("parquet")
    .option("path", sink).option("checkpointLocation", checkpoint)
    .trigger(availableNow=True).start()
)
query.awaitTermination(240)
assert query.exception() is None, query.exception()
print(spark.read.parquet(sink).count(), spark.sparkContext.master)
spark.stop()
"""


def test_a_streaming_query_runs_on_the_cluster_from_hdfs(
    cluster: Cluster, shipped: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = shipped
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    done = subprocess.run(
        [sys.executable, "-c", _STREAM, cluster.master, url, str(sink), str(checkpoint)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(2 * REQUESTS), cluster.master]
    import pyarrow.parquet as pq

    seqs = sorted(pq.read_table(sink, columns=["seq"]).column("seq").to_pylist())
    assert seqs == list(range(1, 2 * REQUESTS + 1))  # every record once
    assert any(a["name"] == "busgate-stream" for a in cluster.state()["completedapps"])
