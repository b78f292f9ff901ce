"""Damage warnings reach the user of ``pipeline.session.spark_session()`` (issue 30 item 13).

The session keeps Spark's log at ERROR, which hid the readers' warnings about the damaged spans
they skip: a query over a damaged journal returned fewer rows and said nothing. A real local
Spark in its own process (its JVM's stderr is what the user sees), a journal with one bad CRC,
both readers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bus.journal import RECORD_HEADER_SIZE, Journal, list_segments, read_segment
from bus.message.message import Message, encode_message

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SCRIPT = """
import sys
from pipeline.session import spark_session
spark = spark_session(quick_start=True)
for fmt in ("busjournal", "busjournalpy"):
    print(fmt, spark.read.format(fmt).load(sys.argv[1]).count(), flush=True)
spark.stop()
"""


def test_a_query_over_damage_says_what_it_skipped(tmp_path: Path) -> None:
    with Journal(tmp_path) as writer:
        for i in range(20):
            msg = Message.request("demo", "echo", {"i": i}, reply_to="inbox.t")
            writer.append(encode_message(msg), 1_700_000_000.0 + i)
    segment = list_segments(tmp_path)[0]
    offsets = [r.offset for r in read_segment(segment)]
    data = bytearray(segment.read_bytes())
    data[offsets[3] + RECORD_HEADER_SIZE + 5] ^= 0x40  # a bad CRC: record 3 is skipped
    segment.write_bytes(bytes(data))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["busjournal", "19", "busjournalpy", "19"], done.stdout
    warnings = [line for line in done.stderr.splitlines() if "bytes skipped" in line]
    assert len(warnings) >= 2, done.stderr[-3000:]  # one per reader
    assert all(segment.name in line for line in warnings), warnings
