"""Journal and pipeline speed, each next to what a user would pick instead, in the same run.

1. Routing with the journal on vs off: events/s through a real in-process broker (one publisher,
   one subscriber on loopback); the cost of one ``Journal.append``; how long ``read_from(seq)``
   takes to reach a record in the middle of a big journal (index) against a full scan.
2. Reading, one Spark session (local[2]), best of three alternating runs per query: the
   ``busjournal`` source (the JVM reader), its Python fallback ``busjournalpy``, Spark's JSON
   reader with an explicit schema over the same messages as JSON lines (header fields +
   payload, 13 columns), and Parquet written from those JSON lines. Queries users run: count,
   a groupBy of two columns, a 1 % time window (its 13 columns materialised), all 13 columns
   materialised, and a group's request latency (requests joined to their responses). The
   ratio is JSON's time over busjournal's (above 1: busjournal is faster). CPU seconds are
   those of every process of the run (Python driver, Spark's JVM, Python workers). A copy of
   the journal with its closed segments compacted (``busgate journal compact``: Parquet beside
   them; the newest segment stays raw) is read too, and the same journal read from ``hdfs://``
   (``bj hdfs``): Hadoop's WebHDFS client in Spark's JVM (``fs.hdfs.impl``) against the tests'
   WebHDFS server (``tests/pipeline/webhdfs_server.py``, its own Python process, in the CPU
   figures), as the JVM reader reads a journal shipped to HDFS (``busgate journal ship``).
3. ``busgate report`` as a user runs it (its own process and Spark), on 10k and 100k records:
   the wall time, to show its cost follows the data.
4. ``busgate report --remote`` on the 10k records through a resident Spark Connect server
   (``busgate spark serve``, started once), five runs (best, median, worst), beside the floor
   of any report without one, measured in the same run: a cold session's start + count of the
   journal + stop, in its own process (what ``busgate report`` pays before its first table). Goal:
   at most 0.35x that floor.

The messages are a mix of what a bus carries: requests (5-field payloads), ACKs, NAKs and
events; distinct messages are generated once and repeated with new timestamps (decoding
costs the same). ``BENCH_PIPELINE_RECORDS`` sets the size (default 1,000,000).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psutil

from bus.journal import Journal, JournalReader
from bus.message.message import Message, encode_message

__all__ = ["main"]

RECORDS = int(os.environ.get("BENCH_PIPELINE_RECORDS", "1000000"))
DISTINCT = 20_000
FILES = 4
T0 = 1_767_225_600.0
STEP = 1e-4  # seconds between records
#: How many ``busgate report --remote`` runs the row's spread is taken over.
REMOTE_RUNS = 5
JSON_SCHEMA = (
    "ts timestamp, MID string, RID string, GRP string, RPY string, TYP string, CMD string, "
    "ENC string, MSG string, SRC string, CLR string, TRC string, RCD long, FLG long, "
    "payload string"
)
JSON_COLUMNS = [column.split()[0] for column in JSON_SCHEMA.split(", ")]


def _messages() -> list[Message]:
    out: list[Message] = []
    rnd = random.Random(7)
    while len(out) < DISTINCT:
        i = len(out)
        req = Message.request(
            rnd.choice(["demo.inventory", "demo.billing", "demo.search"]),
            "reserve",
            {"sku": f"AB-{i:05d}", "qty": i % 7, "price": 19.99, "rush": i % 2 == 0},
            reply_to="_INBOX.7f3a9c",
            caller=rnd.choice(["key-ops", "key-shop", "alice"]),  # CLR: the report's callers
        )
        out.append(req)
        out.append(req.ack({"reserved": i % 7, "left": 100 - i % 100}))
        out.append(Message.event("sensor.temp", {"c": 18.5, "room": f"r{i % 10}"}))
        if i % 10 == 0:
            out.append(req.nak("out of stock", rcd=409))
    return out


def _json_tail(message: Message) -> bytes:
    """The JSON line of a message without its ts: ``,"MID":...}``."""
    frame = message.frame
    row: dict[str, Any] = {}
    for name in (
        "MID",
        "RID",
        "GRP",
        "RPY",
        "TYP",
        "ENC",
        "MSG",
        "SRC",
        "CLR",
        "TRC",
        "RCD",
        "FLG",
    ):
        value = frame.get(name)
        if value is not None:
            row[name] = value
    row["CMD"] = message.cmd
    row["payload"] = message.payload.to_dict()
    return b"," + orjson.dumps(row)[1:]


def _stamp(ts: float) -> bytes:
    whole = int(ts)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        + f".{round((ts - whole) * 1e6):06d}Z"
    ).encode()


def _write_journal(directory: Path, count: int, raws: list[bytes], segment_bytes: int) -> None:
    with Journal(directory, max_segment_bytes=segment_bytes, fsync="none") as journal:
        for n in range(count):
            journal.append(raws[n % len(raws)], T0 + n * STEP)


def _write_inputs(root: Path) -> tuple[Path, Path]:
    messages = _messages()
    raws = [encode_message(m) for m in messages]
    tails = [_json_tail(m) for m in messages]
    journal_dir, json_dir = root / "journal", root / "json"
    json_dir.mkdir(parents=True)
    per_file = RECORDS // FILES
    # segments about as large as the JSON files: the same parallelism on both sides
    _write_journal(
        journal_dir, RECORDS, raws, int(per_file * (sum(map(len, raws)) / len(raws) + 28))
    )
    for f in range(FILES):
        with (json_dir / f"part-{f}.json").open("wb") as fh:
            for n in range(f * per_file, (f + 1) * per_file):
                fh.write(b'{"ts":"' + _stamp(T0 + n * STEP) + b'"' + tails[n % len(tails)] + b"\n")
    return journal_dir, json_dir


def _cpu() -> float:
    """CPU seconds of this process and all its descendants (Spark's JVM, Python workers)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:4])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _best(runs: dict[str, Callable[[], Any]], rounds: int = 3) -> dict[str, tuple[float, float]]:
    """(seconds, CPU seconds) of each run, best of ``rounds``, runs alternating."""
    best = {name: (float("inf"), 0.0) for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            cpu, started = _cpu(), time.perf_counter()
            run()
            took = time.perf_counter() - started
            if took < best[name][0]:
                best[name] = (took, _cpu() - cpu)
    return best


def _noop(frame: Any) -> None:
    frame.write.format("noop").mode("overwrite").save()


def _latency(frame: Any) -> Any:
    from pipeline import transforms as T

    return T.latencies(T.exchanges(frame)).where("GRP = 'demo.inventory'").collect()


def _queries(
    spark: Any,
    journal_dir: Path,
    compacted_dir: Path,
    json_dir: Path,
    parquet_dir: Path,
    hdfs_url: str,
) -> None:
    from pyspark.sql import functions as F

    webhdfs = "org.apache.hadoop.hdfs.web.WebHdfsFileSystem"
    frames = {
        "busjournal": spark.read.format("busjournal").load(str(journal_dir)),
        "bj hdfs": spark.read.format("busjournal").option("fs.hdfs.impl", webhdfs).load(hdfs_url),
        "bj compacted": spark.read.format("busjournal").load(str(compacted_dir)),
        "busjournalpy": spark.read.format("busjournalpy").load(str(journal_dir)),
        "JSON+schema": spark.read.schema(JSON_SCHEMA).json(str(json_dir)),
        "Parquet": spark.read.parquet(str(parquet_dir)),
    }
    for frame in frames.values():
        assert frame.count() == RECORDS  # warms each reader up; checks every record is there
    since = datetime.fromtimestamp(T0 + RECORDS * STEP * 0.5, UTC)
    until = datetime.fromtimestamp(T0 + RECORDS * STEP * 0.51, UTC)
    window = (F.col("ts") >= F.lit(since)) & (F.col("ts") < F.lit(until))
    queries: dict[str, Callable[[Any], Any]] = {
        "count": lambda f: f.count(),
        "groupBy GRP, TYP": lambda f: f.groupBy("GRP", "TYP").count().collect(),
        "1% time window, 13 columns": lambda f: _noop(f.where(window).select(*JSON_COLUMNS)),
        "all 13 columns": lambda f: _noop(f.select(*JSON_COLUMNS)),
        "a group's latency (join)": _latency,
    }
    print(
        f"   {'query (local[2], best of 3)':28} {'reader':14} {'s':>7} {'cpu s':>7} {'rec/s':>12}"
    )
    for query, run in queries.items():
        names = [n for n in frames if n != "busjournalpy" or query in ("count", "all 13 columns")]
        results = _best({n: (lambda f=frames[n], q=run: q(f)) for n in names})
        for name in names:
            took, cpu = results[name]
            print(f"   {query:28} {name:14} {took:7.2f} {cpu:7.2f} {RECORDS / took:12,.0f}")
        ratio = results["JSON+schema"][0] / results["busjournal"][0]
        versus = results["Parquet"][0] / results["busjournal"][0]
        packed = results["Parquet"][0] / results["bj compacted"][0]
        remote = results["busjournal"][0] / results["bj hdfs"][0]
        print(
            f"   {'':28} busjournal vs JSON: {ratio:.2f}x, vs Parquet: {versus:.2f}x; "
            f"compacted vs Parquet: {packed:.2f}x; hdfs:// vs local: {remote:.2f}x"
        )
    full = _best({"all": lambda: _noop(frames["busjournal"])})["all"][0]
    rate = RECORDS / full
    print(f"   busjournal, all 22 columns (payload_map too): {full:.2f} s, {rate:,.0f} rec/s")


def _reading(root: Path) -> None:
    from pipeline.compact import compact
    from pipeline.decode import accelerated
    from pipeline.session import jvm_reader, spark_session

    started = time.perf_counter()
    journal_dir, json_dir = _write_inputs(root)
    print(f"   inputs: {RECORDS:,} records, {time.perf_counter() - started:.1f} s to write")
    compacted_dir = root / "journal-compacted"
    shutil.copytree(journal_dir, compacted_dir)
    started = time.perf_counter()
    done = compact(compacted_dir)
    took = time.perf_counter() - started
    packed = sum(c.records for c in done)
    closed = len(done)
    print(
        f"   busgate journal compact: {packed:,} records of {closed} closed segments, {took:.1f} s"
    )
    server = subprocess.Popen(  # the journal served over WebHDFS by a process of its own
        [sys.executable, str(Path(__file__).parents[1] / "tests/pipeline/webhdfs_server.py"), root],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    hdfs_url = server.stdout.readline().strip().replace("webhdfs://", "hdfs://")
    hdfs_url = hdfs_url.rstrip("/") + "/" + journal_dir.relative_to(root).as_posix()
    spark = spark_session("local[2]", "bench-pipeline")
    try:
        parquet_dir = root / "parquet"
        spark.read.schema(JSON_SCHEMA).json(str(json_dir)).write.parquet(str(parquet_dir))
        print(
            f"   busjournal: {'the JVM reader' if jvm_reader(spark) else 'the Python source'}; "
            f"busjournalpy decoder: {'C' if accelerated() else 'numpy'}; "
            f"processes: driver (python), Spark JVM, Python workers, all on this machine"
        )
        _queries(spark, journal_dir, compacted_dir, json_dir, parquet_dir, hdfs_url)
    finally:
        spark.stop()
        server.terminate()
        server.wait(10)


def _report(root: Path) -> None:
    """``busgate report`` on 10k and 100k records: wall time of the command, as a user sees it."""
    raws = [encode_message(m) for m in _messages()]
    print(f"   {'busgate report (own process, local[2])':44} {'records':>9} {'wall s':>8}")
    for count in (10_000, 100_000):
        directory = root / f"report-{count}"
        _write_journal(directory, count, raws, 64 * 1024 * 1024)
        command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
        command += ["report", "--journal", str(directory), "--out", str(root / f"out-{count}")]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        took = time.perf_counter() - started
        assert done.returncode == 0, done.stderr[-2000:]
        print(f"   {'':44} {count:9,} {took:8.1f}")
    _report_remote(root / "report-10000", root)


_COLD_COUNT = """
import sys, time
started = time.perf_counter()
from pipeline.io import read_journal
from pipeline.session import spark_session
spark = spark_session("local[2]", "bench-cold", quick_start=True, python_source=False)
read_journal(spark, sys.argv[1]).count()
spark.stop()
"""


def _report_remote(journal: Path, root: Path) -> None:
    """``busgate report --remote`` (5 runs: best, median, worst) beside a cold session's
    start + count + stop."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cli = [sys.executable, "-c", "from bus.cli import run; run()"]  # as the busgate script
    server = subprocess.Popen(
        [*cli, "spark", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None and "listening" in server.stdout.readline()
        command = [*cli, "report", "--remote", f"sc://127.0.0.1:{port}", "--journal", str(journal)]
        runs = []
        for run in range(REMOTE_RUNS):
            started = time.perf_counter()
            done = subprocess.run(
                [*command, "--out", str(root / f"remote-{run}")],
                capture_output=True,
                text=True,
                timeout=600,
            )
            runs.append(time.perf_counter() - started)
            assert done.returncode == 0, done.stderr[-2000:]
    finally:
        server.terminate()
        server.wait(60)
        if server.stdout is not None:
            server.stdout.close()
    started = time.perf_counter()
    cold = [sys.executable, "-c", _COLD_COUNT, str(journal)]
    subprocess.run(cold, check=True, capture_output=True, timeout=600)
    floor = time.perf_counter() - started
    runs.sort()
    best, median, worst = runs[0], runs[len(runs) // 2], runs[-1]
    spread = f"best of {len(runs)}; median {median:.1f}, worst {worst:.1f}"
    print(f"   {'busgate report --remote (spark serve)':44} {10_000:9,} {best:8.1f}  {spread}")
    print(f"   {'cold session start + count + stop':44} {10_000:9,} {floor:8.1f}")
    print(
        f"   ratio report --remote / cold floor: {best / floor:.2f} best, "
        f"{median / floor:.2f} median (goal <= 0.35)"
    )


async def _route(journal_dir: Path | None, count: int) -> float:
    from bus.asyncio.client import connect
    from bus.broker import Broker, BrokerConfig, JournalSetting

    setting = JournalSetting(directory=str(journal_dir)) if journal_dir else None
    broker = Broker(BrokerConfig(host="127.0.0.1", port=0, open=True, journal=setting))
    await broker.start()
    url = f"bus://127.0.0.1:{broker.port}"
    publisher, subscriber = await connect(url), await connect(url)
    sub = await subscriber.subscribe("bench.*")
    try:
        started = time.perf_counter()
        for i in range(count):
            await publisher.publish("bench.tick", {"i": i, "v": 1.5})
        for _ in range(count):
            await asyncio.wait_for(sub.get(), 10)
        return count / (time.perf_counter() - started)
    finally:
        await publisher.close()
        await subscriber.close()
        await broker.stop(timeout=2.0)


def _routing(root: Path) -> None:
    count = 5000
    off = on = 0.0
    for round_ in range(4):  # alternating, best of 4: the machine's load hits both alike
        off = max(off, asyncio.run(_route(None, count)))
        on = max(on, asyncio.run(_route(root / f"route-journal{round_}", count)))
    raw = encode_message(Message.event("bench.tick", {"i": 1, "v": 1.5}))
    appends = []
    for run in range(3):  # the append itself (fsync none): the broker's hot path
        with Journal(root / f"append{run}", fsync="none") as journal:
            n = 50_000
            started = time.perf_counter()
            for i in range(n):
                journal.append(raw, T0 + i * 1e-3)
            appends.append((time.perf_counter() - started) / n * 1e6)
    print(f"   {'routing (events/s, best of 4)':40} {'events/s':>12}")
    print(f"   {'broker, journal off':40} {off:12,.0f}")
    print(f"   {'broker, journal on':40} {on:12,.0f}")
    print(f"   ratio on / off: {on / off:.2f}; Journal.append: {min(appends):.2f} us per record")
    # a consumer resuming from a sequence number in the middle of a big journal
    big = root / "resume"
    _write_journal(big, 300_000, [raw], 8 * 1024 * 1024)
    reader = JournalReader(big)
    started = time.perf_counter()
    first = next(iter(reader.read_from(150_000)))
    indexed = time.perf_counter() - started
    started = time.perf_counter()
    scanned = next(r for r in reader.records() if r.seq == 150_000)
    scan = time.perf_counter() - started
    assert first.seq == scanned.seq == 150_000
    print(
        f"   read_from(seq) in the middle of 300k records: {indexed * 1e3:.1f} ms "
        f"(a scan from the start: {scan * 1e3:.0f} ms)"
    )


def main() -> None:
    """Print every table; the load average before and after (the machine is shared)."""
    root = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    print(f"   load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        _routing(root)
        _reading(root)
        _report(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        print(f"   load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
