"""Journal and pipeline speed, each next to its reference in the same run.

1. Routing with the journal on vs off: events/s through a real in-process broker (one publisher,
   one subscriber on loopback), and the cost of one ``Journal.append`` in microseconds.
2. Reading: records/s of ``spark.read.format("busjournal")`` vs Spark's own JSON reader with an
   explicit schema on the same messages written as JSON lines (header fields + payload object),
   both fully materialised (``write.format("noop")``), local[2], best of three alternating runs.
   The ratio compares the same columns: the JSON lines hold 12 (``JSON_SCHEMA``), so busjournal
   is asked for those 12 (it still decodes every column: no pruning reaches a Python source).
   busjournal with all its 21 columns (``payload_map`` included) is shown too, and Spark's own
   share: a Python source with the same schema that only yields batches decoded beforehand (what
   no decoder, however fast, can go below).

The messages are a mix of what a bus carries: requests (5-field payloads), ACKs, NAKs and
events. Distinct messages are generated once and repeated with new timestamps (decoding
costs the same), to keep the benchmark under a minute.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bus.journal import Journal
from bus.message import Message, encode_message
from pipeline.decode import accelerated
from pipeline.source import BATCH_RECORDS

__all__ = ["main"]

RECORDS = int(os.environ.get("BENCH_PIPELINE_RECORDS", "600000"))
DISTINCT = 20_000
FILES = 4
T0 = 1_767_225_600.0
JSON_SCHEMA = (
    "ts timestamp, MID string, RID string, GRP string, RPY string, TYP string, CMD string, "
    "ENC string, MSG string, RCD long, FLG long, payload string"
)
JSON_COLUMNS = [column.split()[0] for column in JSON_SCHEMA.split(", ")]


def _messages() -> list[Message]:
    out: list[Message] = []
    while len(out) < DISTINCT:
        i = len(out)
        req = Message.request(
            "demo.inventory",
            "reserve",
            {"sku": f"AB-{i:05d}", "qty": i % 7, "price": 19.99, "rush": i % 2 == 0},
            reply_to="_INBOX.7f3a9c",
        )
        out.append(req)
        out.append(req.ack({"reserved": i % 7, "left": 100 - i % 100}))
        out.append(Message.event("sensor.temp", {"c": 18.5, "room": f"r{i % 10}"}))
        if i % 10 == 0:
            out.append(req.nak("out of stock", rcd=409))
    return out


def _json_line(message: Message, ts: float) -> bytes:
    frame = message.frame
    row: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
        + f".{int(ts * 1e6) % 1000000:06d}Z"
    }
    for name in ("MID", "RID", "GRP", "RPY", "TYP", "ENC", "MSG", "RCD", "FLG"):
        value = frame.get(name)
        if value is not None:
            row[name] = value
    row["CMD"] = message.cmd
    row["payload"] = message.payload.to_dict()
    return orjson.dumps(row)


def _write_inputs(root: Path) -> tuple[Path, Path]:
    messages = _messages()
    raws = [encode_message(m) for m in messages]
    lines = [_json_line(m, T0) for m in messages]
    journal_dir, json_dir = root / "journal", root / "json"
    json_dir.mkdir(parents=True)
    per_file = RECORDS // FILES
    # one segment per JSON file: 1% slack, so the last few records never spill into a fifth
    seg_bytes = int(per_file * (sum(map(len, raws)) / len(raws) + 20) * 1.01)
    with Journal(journal_dir, max_segment_bytes=seg_bytes, fsync="none") as journal:
        for n in range(RECORDS):
            journal.append(raws[n % len(raws)], T0 + n * 1e-4)
    for f in range(FILES):
        with (json_dir / f"part-{f}.json").open("wb") as fh:
            fh.write(
                b"\n".join(lines[n % len(lines)] for n in range(f * per_file, (f + 1) * per_file))
            )
            fh.write(b"\n")
    return journal_dir, json_dir


def _best_seconds(runs: dict[str, Any], rounds: int = 3) -> dict[str, float]:
    """Seconds of each run, best of ``rounds``; the runs alternate so load hits them alike."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def _noop(frame: Any) -> Any:
    return lambda: frame.write.format("noop").mode("overwrite").save()


# Spark's own share: a Python source that yields batches already decoded (one decode per worker
# process, then the same batch again and again). Shipped to the workers with addPyFile.
_PREBUILT = """
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

_CACHE = {}


class Prebuilt(DataSource):
    @classmethod
    def name(cls):
        return "prebuilt"

    def schema(self):
        from pipeline.decode import SPARK_SCHEMA
        return SPARK_SCHEMA

    def reader(self, schema):
        return _Reader(self.options["path"], int(self.options["parts"]), int(self.options["reps"]))


class _Reader(DataSourceReader):
    def __init__(self, path, parts, reps):
        self.path, self.parts, self.reps = path, parts, reps

    def partitions(self):
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition):
        from pipeline.source import _plan_batch, read_range
        if self.path not in _CACHE:
            _CACHE[self.path] = next(iter(read_range(_plan_batch(self.path, 0)[0])))
        for _ in range(self.reps):
            yield _CACHE[self.path]
"""


def _prebuilt(spark: Any, root: Path, journal_dir: Path) -> tuple[Any, int]:
    """The zero-decoding source over the first batch of the journal; returns (frame, rows)."""
    import sys

    module = root / "bench_prebuilt.py"
    module.write_text(_PREBUILT, "utf-8")
    spark.sparkContext.addPyFile(str(module))
    sys.path.insert(0, str(root))
    from bench_prebuilt import Prebuilt  # type: ignore[import-not-found]

    spark.dataSource.register(Prebuilt)
    frame = spark.read.format("prebuilt").option("path", str(journal_dir))
    frame = frame.option("parts", "4").option("reps", str(max(1, RECORDS // 4 // BATCH_RECORDS)))
    frame = frame.load()
    return frame, frame.count()


def _reading(root: Path) -> None:
    from pipeline.session import spark_session

    started = time.perf_counter()
    journal_dir, json_dir = _write_inputs(root)
    print(f"   inputs: {RECORDS} records, {time.perf_counter() - started:.1f} s to write")
    spark = spark_session("local[2]", "bench-pipeline")
    try:
        journal = spark.read.format("busjournal").load(str(journal_dir))
        jsonl = spark.read.schema(JSON_SCHEMA).json(str(json_dir))
        count = journal.count()  # warm the Python workers; also checks every record is there
        assert count == RECORDS, count
        parts = (journal.rdd.getNumPartitions(), jsonl.rdd.getNumPartitions())
        jsonl.write.format("noop").mode("overwrite").save()
        prebuilt, prebuilt_rows = _prebuilt(spark, root, journal_dir)
        seconds = _best_seconds(
            {
                "ours": _noop(journal.select(*JSON_COLUMNS)),
                "ref": _noop(jsonl),
                "all": _noop(journal),
                "pre": _noop(prebuilt.select(*JSON_COLUMNS)),
            }
        )
    finally:
        spark.stop()
    rows = {"ours": RECORDS, "ref": RECORDS, "all": RECORDS, "pre": prebuilt_rows}
    ours, ref, full, ceiling = (rows[name] / seconds[name] for name in rows)
    print(f"   partitions: busjournal {parts[0]} (one per segment), JSON {parts[1]}")
    print(f"   {'reader (local[2])':40} {'records/s':>12}")
    print(f"   {'busjournal, the JSON columns (12)':40} {ours:12,.0f}")
    print(f"   {'Spark JSON reader + schema (12)':40} {ref:12,.0f}")
    print(f"   {'busjournal, all columns (21)':40} {full:12,.0f}")
    print(f"   {'(Python source, batches prebuilt, 12)':40} {ceiling:12,.0f}")
    print(f"   decoder: {'C accelerator' if accelerated() else 'numpy (no C accelerator)'}")
    print(f"   ratio busjournal / JSON (same columns): {ours / ref:.2f}")
    print(f"   ratio prebuilt / JSON (Spark's cost alone): {ceiling / ref:.2f}")


async def _route(journal_dir: Path | None, count: int) -> float:
    from bus.broker import Broker, BrokerConfig, JournalSetting
    from bus.client import connect

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
    with Journal(root / "append", fsync="interval") as journal:
        n = 50_000
        started = time.perf_counter()
        for i in range(n):
            journal.append(raw, T0 + i * 1e-3)
        append_us = (time.perf_counter() - started) / n * 1e6
    print(f"   {'routing (events/s, best of 4)':40} {'events/s':>12}")
    print(f"   {'broker, journal off':40} {off:12,.0f}")
    print(f"   {'broker, journal on':40} {on:12,.0f}")
    print(f"   ratio on / off: {on / off:.2f}; Journal.append: {append_us:.1f} us per record")


def main() -> None:
    """Print both tables."""
    root = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        _routing(root)
        _reading(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
