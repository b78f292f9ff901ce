"""``busgate report`` as a user runs it: its own process, its own local Spark."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bus.journal import SEGMENT_HEADER_SIZE, Journal
from bus.message.message import Message, encode_message

# each test starts a Spark of its own: on a loaded 2-core host a cold start alone took 100 s
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(330)]


def test_report_command_writes_tables_and_page(tmp_path: Path) -> None:
    journal, out = tmp_path / "journal", tmp_path / "report"
    now = time.time()
    with Journal(journal) as writer:
        old = Message.request("demo", "echo", {}, reply_to="inbox.a")
        writer.append(encode_message(old), now - 7200)  # outside --since 1h
        for i in range(5):
            req = Message.request("demo", "echo", {"i": i}, reply_to="inbox.a")
            writer.append(encode_message(req), now - 60 + i)
            writer.append(encode_message(req.ack({"i": i})), now - 60 + i + 0.01)
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["report", "--journal", str(journal), "--since", "1h", "--out", str(out)]
    command += ["--master", "local[1]"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("index.html")
    page = (out / "index.html").read_text("utf-8")
    assert "<b id='records'>10</b>" in page
    assert (out / "tables" / "outcomes").is_dir()
    assert (out / "outcomes.svg").read_text("utf-8").startswith("<svg ")
    assert "<img src='outcomes.svg'" in page


def test_report_command_reads_around_a_damaged_segment(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    with Journal(journal) as writer:
        for i in range(3):
            writer.append(encode_message(Message.request("demo", "echo", {"i": i})), time.time())
    seg = next(journal.glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[SEGMENT_HEADER_SIZE + 30] ^= 0x08
    seg.write_bytes(bytes(data))
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["report", "--journal", str(journal), "--out", str(tmp_path / "r")]
    command += ["--master", "local[1]"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    damaged = f"{seg}: checksum mismatch at offset {SEGMENT_HEADER_SIZE}"
    assert f"busgate report: damaged: {damaged}" in done.stderr
    page = (tmp_path / "r" / "index.html").read_text("utf-8")
    assert "<b id='records'>2</b>" in page and damaged in page


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_a_mistyped_journal_path_is_an_error_not_an_empty_report(
    tmp_path: Path, where: str
) -> None:
    journal = tmp_path / "journl"
    if where == "empty":
        journal.mkdir()
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["report", "--journal", str(journal), "--out", str(tmp_path / "report")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert str(journal) in done.stderr and "journal" in done.stderr
    assert not (tmp_path / "report").exists()
