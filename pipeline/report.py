"""``busgate report``: the journal's story as Parquet tables and one HTML page with charts.

``build_tables`` applies the transforms (:mod:`pipeline.transforms`) to the journal rows;
``run_report`` reads the journal, writes every table as Parquet (``OUT/tables/NAME``), draws SVG
charts (``OUT/*.svg``, :mod:`pipeline.charts`) and writes ``OUT/index.html``, the page the web
console links to. The numbers on the page are the tables' numbers.

Cost: one Spark job (:mod:`pipeline.bundle`): it reads the columns the tables use once (the JVM
reader decodes nothing else) and caches them, reads only the heartbeats' payloads, and builds
every table and the record count; the tables come back as Arrow and are written as Parquet from
the driver (no job per table to write it). A small journal is worked on in one partition (no
shuffle but the join's: :data:`ONE_PARTITION_BYTES`).
"""

from __future__ import annotations

import contextlib
import html
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bus.journal import Damage, scan_file
from pipeline import charts
from pipeline import transforms as T
from pipeline.bundle import bundle, collect, unbundle
from pipeline.io import read_journal, write_arrow_tables
from pipeline.plan import Bounds, is_remote, local_journal, plan_batch

__all__ = [
    "REPORT_COLUMNS",
    "Report",
    "build_tables",
    "journal_damage",
    "render_html",
    "run_report",
]

#: How far past ``--until`` the answers to the range's requests are looked for: the gateway's
#: longest request timeout (60 s by default) and a margin.
ANSWER_GRACE_S = 120.0

#: Below this many journal bytes the report works in one partition: a single partition is
#: already grouped by anything, so the tables' aggregations and sorts need no shuffle (on 10,000
#: records: 11 stages -> 3). Above it the scan is parallel. A remote journal's size is not
#: known before the read: parallel.
ONE_PARTITION_BYTES = 32 * 1024 * 1024

#: The journal columns the tables use (``instances`` also reads the heartbeats' payload_map);
#: CLR names the callers.
REPORT_COLUMNS = ("ts", "MID", "RID", "GRP", "RPY", "TYP", "CMD", "SRC", "CLR", "RCD", "size")


def build_tables(
    journal: DataFrame,
    window: str = "1 minute",
    top: int = 10,
    heartbeats: DataFrame | None = None,
    answers: DataFrame | None = None,
    exchanged: DataFrame | None = None,
) -> dict[str, DataFrame]:
    """Every report table from the journal rows (no I/O).

    Args:
        journal: rows of the ``busjournal`` source (at least :data:`REPORT_COLUMNS`).
        window: the time window for throughput and instances.
        top: how many top callers.
        heartbeats: rows with ``ts``, ``GRP`` and ``payload_map`` for ``instances`` (default:
            ``journal``, which then needs ``payload_map``).
        answers: rows where responses are looked for (default: ``journal``).
        exchanged: :func:`pipeline.transforms.exchanges` of the journal and answers, when the
            caller made it (to cache it: five tables read it); else made here.

    Returns:
        Tables by name: ``outcomes naks latencies throughput unanswered instances
        top_callers``.
    """
    if exchanged is None:
        exchanged = T.exchanges(journal, answers)
    return {
        "outcomes": T.outcomes(exchanged),
        "naks": T.naks(exchanged),
        "latencies": T.latencies(exchanged),
        "throughput": T.throughput(journal, window),
        "unanswered": T.unanswered(exchanged),
        "instances": T.instances(journal if heartbeats is None else heartbeats, window),
        "top_callers": T.top_callers(exchanged, top),
    }


@dataclass
class Report:
    """What ``run_report`` produced.

    Attributes:
        out: the report directory.
        records: journal records in the time range.
        tables: each table's rows (as lists of dicts), by name.
        parquet: where each Parquet table is.
        charts: SVG files drawn.
        damage: damaged spans of the journal the report read around (none normally).
    """

    out: Path
    records: int
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    parquet: dict[str, Path] = field(default_factory=dict)
    charts: list[Path] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)

    @property
    def index(self) -> Path:
        """The HTML page."""
        return self.out / "index.html"


def _bounds(since: float | None, until: float | None) -> Bounds:
    return Bounds(
        since_us=None if since is None else round(since * 1_000_000),
        until_us=None if until is None else round(until * 1_000_000),
    )


def journal_bytes(path: str | Path, since: float | None = None, until: float | None = None) -> int:
    """How many journal bytes a report over ``[since, until)`` reads (from indexes; no scan)."""
    return sum(part.stop - part.start for part in plan_batch(str(path), 0, _bounds(since, until)))


def _one_partition(
    path: str | Path, since: float | None, until: float | None
) -> Callable[[DataFrame], DataFrame] | None:
    """``coalesce(1)`` for a small journal, else None (see :data:`ONE_PARTITION_BYTES`)."""
    if is_remote(str(path)) or journal_bytes(path, since, until) >= ONE_PARTITION_BYTES:
        return None
    return lambda frame: frame.coalesce(1)


#: Spark's setting above which a join of two single-partition sides is shuffled all the same
#: (for parallelism); a source without statistics counts as larger than any value but this one.
_SINGLE_PARTITION_BYTES = "spark.sql.maxSinglePartitionBytes"


@contextlib.contextmanager
def _join_in_place(spark: SparkSession, small: bool) -> Iterator[None]:
    """Meanwhile, a join of single-partition sides is not shuffled (when ``small``).

    The busjournal source reports no size, so Spark takes each side of the report's join for
    larger than ``spark.sql.maxSinglePartitionBytes`` (128 MiB) and shuffles both, in one
    partition each (a stage per side: 3 stages for the query). The journal is known to be
    small here (:data:`ONE_PARTITION_BYTES`): its join runs where its sides are (1 stage).
    The session's setting is restored after."""
    if not small:
        yield
        return
    before = spark.conf.get(_SINGLE_PARTITION_BYTES)
    spark.conf.set(_SINGLE_PARTITION_BYTES, str(2**63 - 1))
    try:
        yield
    finally:
        if before is None:  # pragma: no cover - Spark always has a value for it
            spark.conf.unset(_SINGLE_PARTITION_BYTES)
        else:
            spark.conf.set(_SINGLE_PARTITION_BYTES, before)


def journal_damage(
    path: str | Path,
    since: float | None = None,
    until: float | None = None,
    spark: SparkSession | None = None,
) -> list[Damage]:
    """The damaged spans in what a report over ``[since, until)`` reads (records are verified,
    not decoded: the C scanner when built).

    Args:
        path: the journal directory (a path, or any Hadoop URI: ``hdfs://`` ...).
        since: first time included, epoch seconds.
        until: first time excluded, epoch seconds.
        spark: the session, whose JVM reads a journal that is not local (through Hadoop's
            FileSystem API: the JVM reader's ``busgate.spark.Damages``).

    Returns:
        Each damaged span skipped, in file order.
    """
    from pipeline.decode import find_records

    bounds = _bounds(since, until)
    if is_remote(str(path)):
        if spark is None:
            raise ValueError(f"journal_damage needs the session to read {path}")
        jvm: Any = spark.sparkContext._jvm
        lines = jvm.busgate.spark.Damages.find(
            str(path),
            -(2**63) if bounds.since_us is None else bounds.since_us,
            2**63 - 1 if bounds.until_us is None else bounds.until_us,
        )
        spans = [str(line).split("\t", 3) for line in lines]
        return [Damage(p, int(o), int(n), r) for p, o, n, r in spans]
    found = []
    for part in plan_batch(local_journal(str(path)), 0, bounds):
        for chunk in scan_file(
            part.path,
            part.start,
            part.stop,
            version=part.version,
            after_seq=part.after_seq,
            scan=find_records,
            limit=part.limit,
        ):
            found += [Damage(part.path, chunk.base + o, n, r) for o, n, r in chunk.result.damage]
    return found


def _chart_outcomes(rows: list[dict[str, Any]]) -> str:
    labels = [f"{r['GRP']}\n{r['CMD']}" for r in rows]
    stacks = [
        ("ACK", [r["acks"] for r in rows]),
        ("NAK", [r["naks"] for r in rows]),
        ("none", [r["unanswered"] for r in rows]),
    ]
    return charts.stacked_bars(labels, stacks, "Outcomes per group and CMD", "requests")


def _chart_latency(rows: list[dict[str, Any]]) -> str:
    labels = [f"{r['GRP']}\n{r['CMD']}" for r in rows]
    groups = [(key[:3], [r[key] or 0.0 for r in rows]) for key in ("p50_ms", "p95_ms", "p99_ms")]
    log = latency_scale(rows) == "log"
    return charts.bars(labels, groups, "Latency per group and CMD", "ms", log=log)


def latency_scale(rows: list[dict[str, Any]]) -> str:
    """``"log"`` when one slow outlier would flatten every other bar on a linear axis."""
    values = [float(r[k]) for r in rows for k in ("p50_ms", "p95_ms", "p99_ms") if r.get(k)]
    positive = [v for v in values if v > 0]
    if len(positive) < 2 or len(positive) < len(values):
        return "linear"
    return "log" if max(positive) / min(positive) > 20 else "linear"


_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def window_seconds(window: str) -> float | None:
    """Seconds in a Spark interval text (``"1 minute"``, ``"30 seconds"``); None if unknown."""
    count, _, unit = window.strip().partition(" ")
    try:
        return float(count) * _UNITS[unit.strip().lower().rstrip("s")]
    except (ValueError, KeyError):
        return None


def series_points(
    rows: list[dict[str, Any]], key: str, value: str, step: float | None
) -> dict[str, list[tuple[datetime, float]]]:
    """Each series' points, a window without rows drawn as 0 (not a line across the gap).

    Args:
        rows: table rows with ``window_start``, ``key`` and ``value``.
        key: the column naming the series.
        value: the column plotted.
        step: the window length in seconds (None: no filling).

    Returns:
        ``{series: [(window_start, value), ...]}`` in time order.
    """
    starts = sorted({r["window_start"] for r in rows})
    grid = starts
    if step and len(starts) > 1:
        first, last = starts[0].timestamp(), starts[-1].timestamp()
        count = round((last - first) / step)
        if count < 10_000:
            tz = starts[0].tzinfo
            grid = [datetime.fromtimestamp(first + i * step, tz) for i in range(count + 1)]
    series: dict[str, list[tuple[datetime, float]]] = {}
    for name in sorted({str(r[key]) for r in rows}):
        have = {r["window_start"]: float(r[value]) for r in rows if str(r[key]) == name}
        series[name] = [(start, have.get(start, 0.0)) for start in grid]
    return series


def _chart_series(
    rows: list[dict[str, Any]], key: str, value: str, title: str, step: float | None
) -> str:
    return charts.series(series_points(rows, key, value, step), title, value)


def _html_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = []
    for row in rows:
        cells = []
        for v in row.values():
            text = f"{v:.3f}" if isinstance(v, float) else "" if v is None else str(v)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


_TITLES = {
    "outcomes": "Requests, ACK and NAK per group and CMD",
    "naks": "Where NAKs come from: group, CMD, RCD and responder (central: the broker)",
    "latencies": "Latency (ms) per group and CMD",
    "throughput": "Throughput over time",
    "unanswered": "Unanswered requests",
    "instances": "Service instances per group over time (OAM.SERVICE heartbeats)",
    "top_callers": "Top callers (CLR: API key or JWT subject; else the sending post office)",
}


def render_html(report: Report, since: str, until: str) -> str:
    """The report page: every table, each chart, links to the Parquet tables.

    Args:
        report: the tables and charts.
        since: the time range start, as text.
        until: the time range end, as text.

    Returns:
        The HTML text.
    """
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>busgate report</title>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}"
        ".wide{overflow-x:auto}@media (max-width:600px){body{margin:.5em}}</style>",
        "</head><body><p><a href='../'>&larr; console</a></p><h1>busgate report</h1>",
        f"<p>Journal records from {html.escape(since)} to {html.escape(until)}: "
        f"<b id='records'>{report.records}</b>. "
        f"Generated {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC.</p>",
    ]
    if report.damage:
        items = "".join(f"<li>{html.escape(str(d))}</li>" for d in report.damage)
        parts.append(
            f"<p id='damage'>The journal is damaged: {len(report.damage)} spans were skipped "
            f"(<code>busgate journal verify</code> tells more):</p><ul>{items}</ul>"
        )
    for chart in report.charts:
        parts.append(f"<img src='{html.escape(chart.name)}' alt='{html.escape(chart.stem)}'>")
    for name, rows in report.tables.items():
        parts.append(f"<h2 id='{name}'>{html.escape(_TITLES.get(name, name))}</h2>")
        parts.append(f"<div class='wide'>{_html_table(rows[:200])}</div>")
        parts.append(f"<p><a href='tables/{name}/'>Parquet: tables/{name}</a></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _draw(name: str, rows: list[dict[str, Any]], out_dir: Path, window: str) -> Path | None:
    """Write the chart of table ``name`` as SVG (if it has one and rows); where it went."""
    if not rows:
        return None
    step = window_seconds(window)
    if name == "outcomes":
        path, text = out_dir / "outcomes.svg", _chart_outcomes(rows)
    elif name == "latencies":
        path, text = out_dir / "latency.svg", _chart_latency(rows)
    elif name == "throughput":
        path = out_dir / "throughput.svg"
        text = _chart_series(rows, "TYP", "messages", "Messages per window", step)
    elif name == "instances":
        path = out_dir / "instances.svg"
        text = _chart_series(rows, "group", "instances", "Instances per group", step)
    else:
        return None
    path.write_text(text, "utf-8")
    return path


def run_report(
    spark: SparkSession,
    journal_path: str | Path,
    out: str | Path,
    since: float | None = None,
    until: float | None = None,
    window: str = "1 minute",
) -> Report:
    """Read the journal, write the Parquet tables, the charts and ``index.html``.

    Args:
        spark: the session.
        journal_path: the journal directory (a path, or any Hadoop URI: ``hdfs://`` ...).
        out: the report directory (created).
        since: first time included, epoch seconds.
        until: first time excluded, epoch seconds.
        window: time window for throughput and instances.

    Returns:
        The :class:`Report`.
    """

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    loading = _preload()
    try:
        return _run_report(spark, journal_path, out_dir, since, until, window, loading)
    finally:
        loading.join()  # also when Spark failed: no import left running at exit


def _preload() -> threading.Thread:
    """Import pyarrow.compute and pyarrow.parquet (taking the bundle apart, writing the tables)
    in a thread of their own while Spark works: a Spark Connect client mostly waits for the
    server meanwhile. A failed import is left to its user, which imports it again and raises."""

    def load() -> None:
        with contextlib.suppress(Exception):
            import pyarrow.compute  # noqa: F401
            import pyarrow.parquet  # noqa: F401

    thread = threading.Thread(target=load, name="busgate-report-imports", daemon=True)
    thread.start()
    return thread


def _run_report(
    spark: SparkSession,
    journal_path: str | Path,
    out_dir: Path,
    since: float | None,
    until: float | None,
    window: str,
    loading: threading.Thread,
) -> Report:
    from pyspark.sql import functions as F

    rows = read_journal(spark, journal_path, since, until)
    single = _one_partition(journal_path, since, until)
    one = single or (lambda frame: frame)
    if until is None:
        scanned = journal = rows.select(*REPORT_COLUMNS)
        answers = None
    else:  # the answers to requests made just before ``until`` come after it: one scan reads
        # both (cached: the journal's rows are the range's part of it)
        wide = read_journal(spark, journal_path, since, until + ANSWER_GRACE_S)
        scanned = wide.select(*REPORT_COLUMNS)
        journal = scanned.where(F.col("ts") < F.lit(datetime.fromtimestamp(until, UTC)))
        answers = one(scanned)
    heartbeats = rows.where(F.col("GRP") == T.HEARTBEAT_GROUP).select("ts", "GRP", "payload_map")
    if is_remote(str(journal_path)) and not hasattr(spark, "sparkContext"):
        damage = []  # a Spark Connect client has no JVM to list a remote journal's damage with
    else:
        damage = journal_damage(journal_path, since, until, spark)
    # five tables read the exchanges: cached, the join runs once (measured, 10k records: a
    # fifth less CPU); both caches are dropped after the one query, also when it fails (a
    # resident server would keep them otherwise)
    # the cached plans are planned when cached: the setting holds from there
    with _join_in_place(spark, single is not None):
        scanned.cache()
        exchanged = T.exchanges(one(journal), answers).cache()
        try:
            frames = build_tables(
                one(journal), window, heartbeats=one(heartbeats), exchanged=one(exchanged)
            )
            counted = one(journal).agg(F.count(F.lit(1)).alias("records"))
            names = ["records", *frames]
            tables = unbundle(collect(bundle({"records": counted, **frames})), names)
        finally:
            exchanged.unpersist()
            scanned.unpersist()
    report = Report(out_dir, tables.pop("records")["records"][0].as_py(), damage=damage)
    loading.join()
    drawn: dict[str, Path] = {}
    for name, table in tables.items():
        report.tables[name] = table.to_pylist()
        chart = _draw(name, report.tables[name], out_dir, window)
        if chart is not None:
            drawn[name] = chart
    report.parquet = write_arrow_tables(tables, out_dir)
    report.charts = [
        drawn[n] for n in ("outcomes", "latencies", "throughput", "instances") if n in drawn
    ]
    fmt = "%Y-%m-%d %H:%M:%S"
    since_text = "the start" if since is None else datetime.fromtimestamp(since, UTC).strftime(fmt)
    until_text = "now" if until is None else datetime.fromtimestamp(until, UTC).strftime(fmt)
    (out_dir / "index.html").write_text(render_html(report, since_text, until_text), "utf-8")
    return report
