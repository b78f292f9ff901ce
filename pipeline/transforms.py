"""Pure DataFrame -> DataFrame transforms over journal rows (columns of ``busjournal``).

No reading or writing here: each function takes Spark DataFrames and returns one, so each can be
tested on a small hand-made frame. Time columns are Spark timestamps; latencies are in
milliseconds.

- :func:`exchanges`: each request (TYP=RQS) joined to its responses (ACK/NAK whose RID is the
  request's MID): first response time, latency, final outcome, response count.
- :func:`outcomes`: requests, ACK, NAK, unanswered and their rates per group and CMD.
- :func:`naks`: where NAKs come from: per group, CMD, RCD and responder (``central``: the broker's
  own NAKs, such as 503 no responders).
- :func:`latencies`: latency p50/p95/p99 (exact percentiles) per group and CMD.
- :func:`throughput`: messages per time window and TYP.
- :func:`unanswered`: requests that expected a reply and got none.
- :func:`instances`: service instances per group per time window, from OAM.SERVICE heartbeats.
- :func:`top_callers`: who sends the most requests: the caller identity (CLR, the API key or JWT
  subject a gateway stamps, PROTOCOL.md 5.11), else the sending post office (SRC), else the
  reply group.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = [
    "HEARTBEAT_GROUP",
    "exchanges",
    "instances",
    "latencies",
    "naks",
    "ordered",
    "outcomes",
    "requests",
    "responses",
    "throughput",
    "top_callers",
    "unanswered",
]

HEARTBEAT_GROUP = "OAM.SERVICE"
_RESPONSE_TYPES = ("ACK", "NAK")


def ordered(frame: DataFrame, *by: str | Column) -> DataFrame:
    """``frame`` sorted by ``by`` in one partition.

    A report's tables are small and collected whole by the driver; a global sort over several
    partitions costs a job of its own first (Spark samples the rows to cut ranges), one
    partition sorts without it, and a table's order then survives a union
    (:mod:`pipeline.bundle`).
    """
    return frame.coalesce(1).orderBy(*by)


def requests(journal: DataFrame) -> DataFrame:
    """The request rows (TYP=RQS)."""
    return journal.where(F.col("TYP") == "RQS")


def responses(journal: DataFrame) -> DataFrame:
    """The response rows (TYP ACK or NAK with an RID)."""
    return journal.where(F.col("TYP").isin(*_RESPONSE_TYPES) & F.col("RID").isNotNull())


def _caller() -> Column:
    # PROTOCOL.md 5.11: the caller is CLR when present (``key:<name>``, ``jwt:<sub>`` from a
    # gateway); else the post office that sent it, so two API keys behind one gateway office
    # are two callers, not one.
    return F.coalesce(F.col("CLR"), F.col("SRC"), F.col("RPY"), F.lit("(unknown)"))


def exchanges(journal: DataFrame, answers: DataFrame | None = None) -> DataFrame:
    """Requests joined to their responses by MID = RID (a request journaled twice counts once).

    Args:
        journal: rows of the ``busjournal`` source.
        answers: where the responses are looked for (default: ``journal``); a report that ends
            at ``until`` looks a little past it, so a request made just before is not taken
            for unanswered.

    Returns:
        One row per request: ``MID GRP CMD caller expects_reply request_ts response_ts
        latency_ms outcome RCD responder responses``. ``caller`` is the request's CLR, else its
        SRC, else its RPY (``(unknown)`` without any). ``outcome``, ``RCD`` and ``responder``
        (its SRC) are the last response's (``outcome`` ACK/NAK, or ``None`` when unanswered);
        ``latency_ms`` is to the first response.
    """
    # A request the broker routed twice (bounced by a consumer leaving its group) counts once,
    # from its first routing.
    first = (
        requests(journal)
        .groupBy("MID")
        .agg(F.min_by(F.struct("ts", "GRP", "CMD", "CLR", "SRC", "RPY"), "ts").alias("first"))
    )
    req = first.select("MID", "first.*").select(
        "MID",
        "GRP",
        F.coalesce(F.col("CMD"), F.lit("(none)")).alias("CMD"),
        _caller().alias("caller"),
        F.col("RPY").isNotNull().alias("expects_reply"),
        F.col("ts").alias("request_ts"),
    )
    resp = (
        responses(journal if answers is None else answers)
        .groupBy("RID")
        .agg(
            F.min("ts").alias("response_ts"),
            F.max_by("TYP", "ts").alias("outcome"),
            F.max_by("RCD", "ts").alias("RCD"),
            F.max_by("SRC", "ts").alias("responder"),
            F.count(F.lit(1)).alias("responses"),
        )
    )
    joined = req.join(resp, req["MID"] == resp["RID"], "left").drop("RID")
    latency = (F.unix_micros("response_ts") - F.unix_micros("request_ts")) / F.lit(1000.0)
    return joined.withColumn("latency_ms", latency).withColumn(
        "responses", F.coalesce(F.col("responses"), F.lit(0))
    )


def outcomes(exchanged: DataFrame) -> DataFrame:
    """Requests, ACKs, NAKs, unanswered and rates per group and CMD.

    Args:
        exchanged: the output of :func:`exchanges`.

    Returns:
        ``GRP CMD requests acks naks unanswered ack_rate nak_rate``, by group and CMD.
    """
    counted = exchanged.groupBy("GRP", "CMD").agg(
        F.count(F.lit(1)).alias("requests"),
        F.count(F.when(F.col("outcome") == "ACK", 1)).alias("acks"),
        F.count(F.when(F.col("outcome") == "NAK", 1)).alias("naks"),
        F.count(F.when(F.col("outcome").isNull(), 1)).alias("unanswered"),
    )
    return (
        counted.withColumn("ack_rate", F.col("acks") / F.col("requests"))
        .withColumn("nak_rate", F.col("naks") / F.col("requests"))
        .transform(ordered, "GRP", "CMD")
    )


def naks(exchanged: DataFrame) -> DataFrame:
    """Where NAKs come from: NAKed requests per group, CMD, RCD and responder.

    Args:
        exchanged: the output of :func:`exchanges`.

    Returns:
        ``GRP CMD RCD responder naks``, most NAKs first; ``responder`` is the NAK's SRC:
        ``central`` for the broker's own (RCD 503 when a group has no consumer), the post office
        of the service instance that answered (a :class:`bus.asyncio.service.Service` names
        itself), ``(consumer)`` when the NAK names no SRC.
    """
    return (
        exchanged.where(F.col("outcome") == "NAK")
        .groupBy(
            "GRP", "CMD", "RCD", F.coalesce("responder", F.lit("(consumer)")).alias("responder")
        )
        .agg(F.count(F.lit(1)).alias("naks"))
        .transform(ordered, F.desc("naks"), "GRP", "CMD", "RCD")
    )


def latencies(exchanged: DataFrame) -> DataFrame:
    """Latency percentiles of answered requests per group and CMD (exact, in ms).

    Args:
        exchanged: the output of :func:`exchanges`.

    Returns:
        ``GRP CMD answered p50_ms p95_ms p99_ms max_ms``.
    """
    answered = exchanged.where(F.col("latency_ms").isNotNull())
    return (
        answered.groupBy("GRP", "CMD")
        .agg(
            F.count(F.lit(1)).alias("answered"),
            F.percentile("latency_ms", F.lit(0.5)).alias("p50_ms"),
            F.percentile("latency_ms", F.lit(0.95)).alias("p95_ms"),
            F.percentile("latency_ms", F.lit(0.99)).alias("p99_ms"),
            F.max("latency_ms").alias("max_ms"),
        )
        .transform(ordered, "GRP", "CMD")
    )


def throughput(journal: DataFrame, window: str = "1 minute") -> DataFrame:
    """Messages per time window and TYP.

    Args:
        journal: rows of the ``busjournal`` source.
        window: the window length (Spark interval text, ``"10 seconds"``, ``"1 minute"``).

    Returns:
        ``window_start TYP messages bytes``, by time.
    """
    return (
        journal.groupBy(
            F.window("ts", window).alias("w"), F.coalesce("TYP", F.lit("?")).alias("TYP")
        )
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("size").alias("bytes"))
        .select(F.col("w.start").alias("window_start"), "TYP", "messages", "bytes")
        .transform(ordered, "window_start", "TYP")
    )


def unanswered(exchanged: DataFrame) -> DataFrame:
    """Requests that named a reply group and never got a response.

    Args:
        exchanged: the output of :func:`exchanges`.

    Returns:
        ``request_ts MID GRP CMD caller``, oldest first.
    """
    return (
        exchanged.where(F.col("expects_reply") & F.col("outcome").isNull())
        .select("request_ts", "MID", "GRP", "CMD", "caller")
        .transform(ordered, "request_ts", "MID")
    )


def instances(journal: DataFrame, window: str = "1 minute") -> DataFrame:
    """Service instances per group per time window, counted from OAM.SERVICE heartbeats.

    A heartbeat's payload names the instance (``InstanceId``) and its group (``GroupName``,
    Kestrel's field name); an instance counts in every window in which it sent a heartbeat
    other than ``Terminating``.

    Args:
        journal: rows of the ``busjournal`` source.
        window: the window length.

    Returns:
        ``window_start group instances``.
    """
    beats = journal.where(F.col("GRP") == HEARTBEAT_GROUP).select(
        "ts",
        F.col("payload_map").getItem("GroupName").alias("group"),
        F.col("payload_map").getItem("InstanceId").alias("instance"),
        F.coalesce(F.col("payload_map").getItem("Event"), F.lit("Heartbeat")).alias("event"),
    )
    alive = beats.where(F.col("group").isNotNull() & (F.col("event") != "Terminating"))
    return (
        alive.groupBy(F.window("ts", window).alias("w"), "group")
        .agg(F.count_distinct("instance").alias("instances"))
        .select(F.col("w.start").alias("window_start"), "group", "instances")
        .transform(ordered, "window_start", "group")
    )


def top_callers(exchanged: DataFrame, limit: int = 10) -> DataFrame:
    """The callers that sent the most requests, by caller identity (see :func:`exchanges`).

    Args:
        exchanged: the output of :func:`exchanges`.
        limit: how many callers.

    Returns:
        ``caller requests naks unanswered``, most requests first.
    """
    return (
        exchanged.groupBy("caller")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.count(F.when(F.col("outcome") == "NAK", 1)).alias("naks"),
            F.count(F.when(F.col("outcome").isNull(), 1)).alias("unanswered"),
        )
        .transform(ordered, F.desc("requests"), "caller")
        .limit(limit)
    )
