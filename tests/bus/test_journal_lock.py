"""One writer per journal directory (``bus/journal/lock.py``, PROTOCOL.md 10.2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bus.journal import Journal, JournalReader, list_segments
from bus.journal.lock import LOCK_NAME, DirectoryLock


def test_a_second_holder_waits_and_is_told_who_holds_it(tmp_path: Path) -> None:
    first, second = DirectoryLock(tmp_path / "j"), DirectoryLock(tmp_path / "j")
    assert first.acquire() and first.acquire()  # held, and taking it again is fine
    assert not second.acquire()
    assert str(os.getpid()) in second.holder()
    first.release()
    assert second.acquire()
    second.release()


def test_the_lock_file_is_no_segment(tmp_path: Path) -> None:
    lock = DirectoryLock(tmp_path)
    assert lock.acquire()
    with Journal(tmp_path) as journal:
        journal.append(b"x", 1.0)
    assert [path.name for path in list_segments(tmp_path)] == ["journal-00000001.seg"]
    assert len(list(JournalReader(tmp_path).records())) == 1
    assert (tmp_path / LOCK_NAME).exists()
    lock.release()


def test_a_killed_holder_leaves_the_lock_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from bus.journal.lock import DirectoryLock; "
            f"assert DirectoryLock({str(tmp_path)!r}).acquire(); print('held', flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        lock = DirectoryLock(tmp_path)
        assert not lock.acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 10
        while not lock.acquire():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        lock.release()
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
