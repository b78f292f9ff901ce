"""End to end: a real broker journals real traffic; Spark's report counts what the test sent."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bus.asyncio.service import Request, Service, ServiceError
from bus.broker import JournalSetting
from bus.errors import NakError, NoRespondersError, RequestTimeout
from pipeline.report import run_report

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ECHOES, FAILS, SILENT, NOBODY, EVENTS = 20, 5, 3, 2, 4


async def produce_traffic(make_broker: Any, make_client: Any, journal: Path) -> str:
    """Run a broker with the journal on, a demo-like service, and a caller; returns its inbox."""
    broker = await make_broker(open=True, journal=JournalSetting(directory=str(journal)))
    url = f"bus://127.0.0.1:{broker.port}"
    svc_client = await make_client(url, name="bob")
    service = Service(svc_client, "demo", heartbeat_interval=0.2)

    @service.command("echo")
    async def echo(req: Request) -> dict[str, Any]:
        return {"x": req.get("x")}

    @service.command("fail")
    async def fail(req: Request) -> None:
        raise ServiceError("refused on purpose", 409)

    await service.start()
    silent_client = await make_client(url, name="carol")
    await silent_client.consume("silent")  # takes requests and never answers them

    caller = await make_client(url, name="alice")
    for i in range(ECHOES):
        ack = await asyncio.wait_for(caller.request("demo", "echo", {"x": i}, timeout=5.0), 10)
        assert ack.payload["x"] == i
    for _ in range(FAILS):
        with pytest.raises(NakError):
            await asyncio.wait_for(caller.request("demo", "fail", timeout=5.0), 10)
    for _ in range(SILENT):
        with pytest.raises(RequestTimeout):
            await asyncio.wait_for(caller.request("silent", "wait", timeout=0.2), 10)
    for _ in range(NOBODY):  # no consumer at all: the broker NAKs 503 at once
        with pytest.raises(NoRespondersError):
            await asyncio.wait_for(caller.request("nobody", "ping", timeout=5.0), 10)
    for i in range(EVENTS):
        await caller.publish("sensor.temp", {"c": 18.0 + i})
    await asyncio.sleep(0.5)  # a few more heartbeats
    await service.stop()
    await asyncio.sleep(0.2)
    await broker.stop(timeout=2.0)
    return str(caller.inbox)


async def test_report_counts_what_was_sent(
    spark: Any, make_broker: Any, make_client: Any, tmp_path: Path
) -> None:
    journal, out = tmp_path / "journal", tmp_path / "report"
    inbox = await produce_traffic(make_broker, make_client, journal)

    report = run_report(spark, journal, out, window="1 minute")

    outcomes = {(r["GRP"], r["CMD"]): r for r in report.tables["outcomes"]}
    echo, fail = outcomes[("demo", "echo")], outcomes[("demo", "fail")]
    assert (echo["requests"], echo["acks"], echo["naks"], echo["unanswered"]) == (
        ECHOES,
        ECHOES,
        0,
        0,
    )
    assert (fail["requests"], fail["naks"], fail["nak_rate"]) == (FAILS, FAILS, 1.0)
    assert outcomes[("silent", "wait")]["unanswered"] == SILENT
    nobody = outcomes[("nobody", "ping")]  # the broker's own NAKs, not "unanswered"
    assert (nobody["requests"], nobody["naks"], nobody["unanswered"]) == (NOBODY, NOBODY, 0)
    naks = {(r["GRP"], r["RCD"], r["responder"]): r["naks"] for r in report.tables["naks"]}
    # who answered: the service instance's post office, or the broker itself
    assert naks == {("demo", 409, "bob"): FAILS, ("nobody", 503, "central"): NOBODY}
    latencies = {(r["GRP"], r["CMD"]): r for r in report.tables["latencies"]}
    assert latencies[("demo", "echo")]["answered"] == ECHOES
    assert 0 < latencies[("demo", "echo")]["p50_ms"] <= latencies[("demo", "echo")]["p99_ms"]
    assert [r["CMD"] for r in report.tables["unanswered"]] == ["wait"] * SILENT
    top = report.tables["top_callers"][0]
    # no CLR (a bus client, not a gateway's caller): the caller is the post office the broker
    # stamped as SRC, not an inbox (test_report_callers: API keys behind a gateway by CLR)
    assert (top["caller"], top["requests"]) == ("alice", ECHOES + FAILS + SILENT + NOBODY)
    assert inbox not in {r["caller"] for r in report.tables["top_callers"]}
    assert max(r["instances"] for r in report.tables["instances"] if r["group"] == "demo") == 1
    events = sum(r["messages"] for r in report.tables["throughput"] if r["TYP"] == "EVT")
    assert events == EVENTS
    assert report.records == sum(r["messages"] for r in report.tables["throughput"])

    page = report.index.read_text("utf-8")
    assert f"<b id='records'>{report.records}</b>" in page
    assert {p.name for p in report.charts} == {
        "outcomes.svg",
        "latency.svg",
        "throughput.svg",
        "instances.svg",
    }
    for name in ("outcomes", "naks", "latencies", "throughput", "unanswered", "instances"):
        assert f"<h2 id='{name}'>" in page and f"href='tables/{name}/'" in page
        assert (out / "tables" / name).is_dir()
    for chart in report.charts:
        assert f"<img src='{chart.name}'" in page
    # the chart shows the table: each bar's value is the table's number
    svg = ET.fromstring((out / "outcomes.svg").read_text("utf-8"))
    bars = {
        (e.get("data-label"), e.get("data-series")): float(e.get("data-value", ""))
        for e in svg.iter()
        if e.get("class") == "bar"
    }
    for (grp, cmd), row in outcomes.items():
        label = f"{grp}\n{cmd}"
        assert bars[(label, "ACK")] == row["acks"] and bars[(label, "NAK")] == row["naks"]
        assert bars[(label, "none")] == row["unanswered"]
    again = spark.read.parquet(str(report.parquet["outcomes"]))
    assert again.where("CMD = 'echo'").first()["acks"] == ECHOES


def test_a_request_answered_just_after_until_is_not_unanswered(spark: Any, tmp_path: Path) -> None:
    # --until cut the answers off: a request made a moment before it was counted unanswered.
    from bus.journal import Journal
    from bus.message.message import Message, encode_message

    journal, until = tmp_path / "journal", 1_800_000_000.0
    with Journal(journal) as writer:
        for n, made in enumerate((until - 30, until - 0.5)):
            request = Message.request("demo", "echo", {"n": n}, reply_to="_INBOX.a")
            writer.append(encode_message(request), made)
            writer.append(encode_message(request.ack({"n": n})), made + 1.0)
        late = Message.request("demo", "echo", {}, reply_to="_INBOX.a")
        writer.append(encode_message(late), until + 1)  # after the range: not counted
    report = run_report(spark, journal, tmp_path / "out", until - 60, until)
    (row,) = report.tables["outcomes"]
    assert (row["requests"], row["acks"], row["unanswered"]) == (2, 2, 0)
