"""Callers by identity and call trees by trace, end to end (PROTOCOL.md 5.11).

A real broker journals requests that a trusted gateway post office makes for two API keys
(``CLR``), each with its own ``traceparent`` (``TRC``), and a service answers them. The journal's
rows carry both on every reader (the numpy path, the C accelerator, the full decoder, Spark's
JVM reader), and the report counts the two API keys as two callers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import pipeline.decode as decode_module
from bus.asyncio.service import Request, Service
from bus.broker import JournalSetting
from bus.journal import list_segments, read_segment
from bus.message.message import Message
from pipeline.plan import plan_batch
from pipeline.report import run_report
from pipeline.rows import slow_row
from pipeline.source import read_range
from tests.conftest import OFFICES

pytestmark = [pytest.mark.slow, pytest.mark.spark]

GATEWAY = ("gw", "gw-secret")
CALLS = {"key:ops": 3, "key:reader": 2}


def trace_of(n: int) -> str:
    return f"00-{n + 1:032x}-00f067aa0ba902b7-01"


async def traffic(make_broker: Any, make_client: Any, journal: Path) -> dict[str, str]:
    """Journal the calls; returns the trace of each request made for an API key, by MID."""
    broker = await make_broker(
        open=True,
        offices={**OFFICES, GATEWAY[0]: GATEWAY[1]},
        gateways=frozenset({GATEWAY[0]}),
        journal=JournalSetting(directory=str(journal)),
    )
    url = f"bus://127.0.0.1:{broker.port}"
    service = Service(await make_client(url, name="bob"), "demo", heartbeat_interval=5.0)

    @service.command("echo")
    async def echo(req: Request) -> dict[str, Any]:
        return {"caller": req.caller}

    await service.start()
    gateway = await make_client(url, name=GATEWAY[0], secret=GATEWAY[1])
    traces: dict[str, str] = {}
    for key, count in CALLS.items():
        for _ in range(count):
            trace = trace_of(len(traces))
            req = Message.request("demo", "echo", reply_to=gateway.inbox, caller=key, trace=trace)
            ack = await asyncio.wait_for(gateway.call(req, timeout=5.0), 10)
            assert (ack.payload["caller"], ack.trc) == (key, trace)
            traces[req.mid or ""] = trace
    await gateway.request("demo", "echo", timeout=5.0)  # an anonymous HTTP caller: no CLR
    carol = await make_client(url, name="carol")  # not trusted: her CLR becomes "carol"
    forged = Message.request("demo", "echo", reply_to=carol.inbox, caller="key:ops")
    await asyncio.wait_for(carol.call(forged, timeout=5.0), 10)
    await service.stop()
    await broker.stop(timeout=2.0)
    return traces


def trc_by_call(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, Any, Any]]:
    """MID -> (the RQS's CLR, the RQS's TRC, its ACK's TRC)."""
    acks = {r["RID"]: r["TRC"] for r in rows if r["TYP"] == "ACK"}
    return {r["MID"]: (r["CLR"], r["TRC"], acks.get(r["MID"])) for r in rows if r["TYP"] == "RQS"}


def python_rows(journal: Path) -> list[dict[str, Any]]:
    return [
        row
        for part in plan_batch(str(journal), 0)
        for batch in read_range(part)
        for row in batch.to_pylist()
    ]


async def test_a_call_and_its_answer_share_trc_on_every_reader(
    spark: Any,
    make_broker: Any,
    make_client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = await traffic(make_broker, make_client, tmp_path)
    keys = [key for key, count in CALLS.items() for _ in range(count)]
    expected = {
        mid: (key, trace, trace) for (mid, trace), key in zip(traces.items(), keys, strict=True)
    }

    assert decode_module.accelerated()  # make install builds it
    by_reader = {"c": trc_by_call(python_rows(tmp_path))}
    with monkeypatch.context() as patch:
        patch.setattr(decode_module, "_accel", None)
        by_reader["numpy"] = trc_by_call(python_rows(tmp_path))
    full = [slow_row(r.raw) for s in list_segments(tmp_path) for r in read_segment(s)]
    by_reader["full decoder"] = trc_by_call(full)
    jvm = (
        spark.read.format("busjournal")
        .load(str(tmp_path))
        .select("MID", "RID", "TYP", "CLR", "TRC")
    )
    by_reader["spark"] = trc_by_call([r.asDict() for r in jvm.collect()])

    for reader, calls in by_reader.items():
        assert {mid: calls[mid] for mid in traces} == expected, reader
        others = [(clr, trc) for mid, (clr, trc, _) in calls.items() if mid not in traces]
        assert sorted(others, key=str) == [("carol", None), (None, None)], reader


async def test_two_api_keys_through_one_gateway_office_are_two_callers(
    spark: Any, make_broker: Any, make_client: Any, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    await traffic(make_broker, make_client, journal)

    report = run_report(spark, journal, tmp_path / "report")

    callers = {r["caller"]: r["requests"] for r in report.tables["top_callers"]}
    # the gateway's office alone only for its anonymous call; carol's forged CLR is her office
    assert callers == {"key:ops": 3, "key:reader": 2, "gw": 1, "carol": 1}
    page = report.index.read_text("utf-8")
    section = page[page.index("<h2 id='top_callers'>") :]
    assert "<td>key:ops</td><td>3</td>" in section and "<td>key:reader</td><td>2</td>" in section
