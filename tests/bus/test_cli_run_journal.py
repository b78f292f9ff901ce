"""``busgate run`` journals by default (bus/cli/run.py, run_options.py): history, ``listen
--since`` and durable subscriptions work on the first try, a restarted run goes on with the same
sequence numbers, and ``--bus-port 0`` keeps a temporary journal it removes at stop."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bus.cli.run import run_all
from bus.cli.run_options import RunOptions, journal_directory
from tests.bus.test_cli_client import busgate
from tests.conftest import free_tcp_port


def test_where_run_journals() -> None:
    env = {"XDG_STATE_HOME": "/state"}
    assert journal_directory(RunOptions(), env) == Path("/state/busgate/journal")
    assert journal_directory(RunOptions(bus_port=4100), env) == Path("/state/busgate/journal-4100")
    assert journal_directory(RunOptions(journal="/j"), env) == Path("/j")
    assert journal_directory(RunOptions(journal=None), env) is None
    temporary = journal_directory(RunOptions(bus_port=0), env)
    assert temporary is not None and temporary.is_dir() and "busgate-journal-" in temporary.name
    temporary.rmdir()


async def test_history_and_listen_since_work_on_the_first_try_and_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")  # run_all sets it for its gateway's /ws
    options = RunOptions(port=0, bus_port=free_tcp_port(), objects_port=0, mop_port=None)
    seqs = []
    for round_ in range(2):  # the second run reopens the journal of the first
        running = await run_all(options)
        try:
            assert running.journal == tmp_path / "busgate" / f"journal-{options.bus_port}"
            assert running.http_url is not None
            base = running.http_url.replace("localhost", "127.0.0.1")
            async with httpx.AsyncClient(base_url=base, timeout=20) as http:
                answer = await http.post("/v1/publish/oven.temp?confirm=1", json={"r": round_})
                assert answer.status_code == 200, answer.text
                seqs.append(answer.json()["seq"])
                page = (await http.get("/v1/history/oven.temp")).json()
            assert [e["payload"]["r"] for e in page["events"]] == list(range(round_ + 1))
            heard = await busgate(
                "listen", "oven.*", "--since", "1h", "--count", str(round_ + 1),
                "--bus", running.bus_url,
            )  # fmt: skip
            assert heard.code == 0, heard.err
            assert [json.loads(line)["payload"]["r"] for line in heard.lines] == [0, 1][
                : round_ + 1
            ]
        finally:
            await running.stop()
    assert seqs[1] > seqs[0]  # the same sequence, across the restart


async def test_port_0_journals_in_a_temporary_directory_removed_at_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")
    options = RunOptions(port=0, bus_port=0, objects_port=0, mop_port=None, gateway=False)
    running = await run_all(options)
    try:
        assert running.journal is not None and running.journal_temporary
        assert running.journal.is_dir()
    finally:
        await running.stop()
    assert not running.journal.exists()
    off = await run_all(RunOptions(port=0, bus_port=0, objects_port=0, mop_port=None,
                                   gateway=False, journal=None))  # fmt: skip
    try:
        assert off.journal is None
    finally:
        await off.stop()
