"""pipeline/transforms.py on small hand-made frames (real local Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline import transforms as T
from pipeline.decode import SPARK_SCHEMA

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def row(ms: float, typ: str, mid: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ts": T0 + timedelta(milliseconds=ms),
        "segment": "journal-00000001.seg",
        "offset": 0,
        "MID": mid,
        "TYP": typ,
        "ENC": "FRAM",
        "size": 100,
    }
    base.update(fields)
    return base


def frame(spark: Any, rows: list[dict[str, Any]]) -> Any:
    names = [part.strip().split(" ")[0] for part in SPARK_SCHEMA.split(", ")]
    return spark.createDataFrame([tuple(r.get(n) for n in names) for r in rows], SPARK_SCHEMA)


@pytest.fixture(scope="module")
def journal(spark: Any) -> Any:
    rows = [
        # three echo requests from alice: 10 ms, 20 ms, 30 ms; one fail -> NAK; one unanswered
        row(0, "RQS", "r1", GRP="demo", CMD="echo", RPY="inbox.alice"),
        row(1, "RQS", "r1", GRP="demo", CMD="echo", RPY="inbox.alice"),  # bounced: routed again
        row(10, "ACK", "a1", GRP="inbox.alice", RID="r1"),
        row(100, "RQS", "r2", GRP="demo", CMD="echo", RPY="inbox.alice"),
        row(120, "ACK", "a2", GRP="inbox.alice", RID="r2"),
        row(200, "RQS", "r3", GRP="demo", CMD="echo", RPY="inbox.bob"),
        row(230, "ACK", "a3", GRP="inbox.bob", RID="r3"),
        row(300, "RQS", "r4", GRP="demo", CMD="fail", RPY="inbox.bob"),
        row(305, "NAK", "n4", GRP="inbox.bob", RID="r4", RCD=500, SRC="bob"),
        row(400, "RQS", "r5", GRP="demo", CMD="sleep", RPY="inbox.alice"),
        # a streamed answer: two responses, the last one counts, latency to the first
        row(500, "RQS", "r6", GRP="demo", CMD="count", RPY="inbox.carol"),
        row(502, "ACK", "a6a", GRP="inbox.carol", RID="r6", FLG=2),
        row(509, "ACK", "a6b", GRP="inbox.carol", RID="r6"),
        # no consumer: the broker's own NAK 503
        row(520, "RQS", "r7", GRP="nobody", CMD="ping", RPY="inbox.carol"),
        row(521, "NAK", "n7", GRP="inbox.carol", RID="r7", RCD=503, SRC="central"),
        row(600, "EVT", "e1", GRP="sensor.temp", payload_map={"c": "18.2"}),
        # heartbeats: two demo instances in the first minute, one in the second
        row(
            0, "EVT", "h1", GRP="OAM.SERVICE", payload_map={"GroupName": "demo", "InstanceId": "i1"}
        ),
        row(
            1, "EVT", "h2", GRP="OAM.SERVICE", payload_map={"GroupName": "demo", "InstanceId": "i2"}
        ),
        row(
            2, "EVT", "h3", GRP="OAM.SERVICE", payload_map={"GroupName": "demo", "InstanceId": "i1"}
        ),
        row(
            61_000,
            "EVT",
            "h4",
            GRP="OAM.SERVICE",
            payload_map={"GroupName": "demo", "InstanceId": "i2", "Event": "Terminating"},
        ),
        row(
            62_000,
            "EVT",
            "h5",
            GRP="OAM.SERVICE",
            payload_map={"GroupName": "demo", "InstanceId": "i1"},
        ),
    ]
    return frame(spark, rows).cache()


def as_dicts(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def test_exchanges_join_requests_to_responses(journal: Any) -> None:
    got = {r["MID"]: r for r in as_dicts(T.exchanges(journal))}
    assert set(got) == {"r1", "r2", "r3", "r4", "r5", "r6", "r7"}
    assert got["r1"]["latency_ms"] == 10.0 and got["r1"]["outcome"] == "ACK"
    assert got["r4"]["outcome"] == "NAK" and got["r4"]["RCD"] == 500
    assert (got["r7"]["RCD"], got["r7"]["responder"]) == (503, "central")
    assert got["r5"]["outcome"] is None and got["r5"]["latency_ms"] is None
    assert got["r6"]["latency_ms"] == 2.0 and got["r6"]["responses"] == 2
    assert got["r3"]["caller"] == "inbox.bob"


def test_outcomes_and_latencies(journal: Any) -> None:
    ex = T.exchanges(journal)
    outcomes = {(r["GRP"], r["CMD"]): r for r in as_dicts(T.outcomes(ex))}
    echo = outcomes[("demo", "echo")]
    assert (echo["requests"], echo["acks"], echo["naks"], echo["unanswered"]) == (3, 3, 0, 0)
    assert outcomes[("demo", "fail")]["nak_rate"] == 1.0
    assert outcomes[("demo", "sleep")]["unanswered"] == 1
    nobody = outcomes[("nobody", "ping")]
    assert (nobody["naks"], nobody["unanswered"]) == (1, 0)
    where = [(r["GRP"], r["RCD"], r["responder"], r["naks"]) for r in as_dicts(T.naks(ex))]
    assert where == [("demo", 500, "bob", 1), ("nobody", 503, "central", 1)]
    lat = {(r["GRP"], r["CMD"]): r for r in as_dicts(T.latencies(ex))}
    assert lat[("demo", "echo")]["p50_ms"] == 20.0
    assert lat[("demo", "echo")]["p99_ms"] == pytest.approx(29.8)
    assert lat[("demo", "echo")]["max_ms"] == 30.0
    assert ("demo", "sleep") not in lat


def test_unanswered_and_top_callers(journal: Any) -> None:
    ex = T.exchanges(journal)
    assert [r["MID"] for r in as_dicts(T.unanswered(ex))] == ["r5"]
    top = as_dicts(T.top_callers(ex, 2))
    assert [(r["caller"], r["requests"]) for r in top] == [("inbox.alice", 3), ("inbox.bob", 2)]
    assert top[0]["unanswered"] == 1 and top[1]["naks"] == 1


def test_throughput_and_instances(journal: Any) -> None:
    series = as_dicts(T.throughput(journal, "1 minute"))
    first = {
        r["TYP"]: r["messages"] for r in series if r["window_start"] == T0.replace(tzinfo=None)
    }
    assert first == {"RQS": 8, "ACK": 5, "NAK": 2, "EVT": 4}
    assert sum(r["messages"] for r in series) == 21
    inst = as_dicts(T.instances(journal, "1 minute"))
    assert [(r["group"], r["instances"]) for r in inst] == [("demo", 2), ("demo", 1)]


def test_callers_are_named_by_clr_else_the_sending_post_office(spark: Any) -> None:
    # one gateway post office ("gw") making requests for two API keys, one anonymous HTTP caller
    # (no CLR) and a bus client ("alice"): four callers, not two offices
    requests = [
        row(0, "RQS", "k1", GRP="demo", CMD="echo", SRC="gw", CLR="key:ops", RPY="_INBOX.gw"),
        row(1, "RQS", "k2", GRP="demo", CMD="echo", SRC="gw", CLR="key:ops", RPY="_INBOX.gw"),
        row(2, "RQS", "k3", GRP="demo", CMD="echo", SRC="gw", CLR="key:reader", RPY="_INBOX.gw"),
        row(3, "RQS", "k4", GRP="demo", CMD="echo", SRC="gw", RPY="_INBOX.gw"),
        row(4, "RQS", "k5", GRP="demo", CMD="echo", SRC="alice", RPY="_INBOX.a"),
        row(5, "NAK", "n3", GRP="_INBOX.gw", RID="k3", RCD=403, SRC="bob", CLR="key:x"),
    ]
    ex = T.exchanges(frame(spark, requests))
    top = as_dicts(T.top_callers(ex))
    assert [(r["caller"], r["requests"], r["naks"]) for r in top] == [
        ("key:ops", 2, 0),
        ("alice", 1, 0),
        ("gw", 1, 0),
        ("key:reader", 1, 1),
    ]
