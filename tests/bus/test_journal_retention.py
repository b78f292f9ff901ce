"""Journal retention (bus/journal/retention.py, PROTOCOL.md 8): the oldest segments go once the
journal is too large or they are too old; what is left reads as an intact journal whose first
sequence number is above 1, and appending goes on with the next number."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.broker.config import JournalSetting
from bus.errors import ConfigError
from bus.journal import Journal, JournalReader, list_segments, verify_journal
from bus.message.message import Message, encode_message


def _event(i: int) -> bytes:
    return encode_message(Message.event("tank.level", {"i": i, "pad": "x" * 200}))


def test_size_bound_deletes_the_oldest_segments_and_keeps_reading_intact(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="none", max_segment_bytes=4096, retain_bytes=16 * 1024)
    for i in range(400):
        journal.append(_event(i), 1000.0 + i)
    segments = list_segments(tmp_path)
    assert sum(p.stat().st_size for p in segments) <= 16 * 1024 + 4096
    assert not any(p.with_suffix(".idx").exists() for p in [tmp_path / "journal-00000001.seg"])
    seqs = [r.seq for r in JournalReader(tmp_path).records()]
    assert seqs == list(range(seqs[0], 401)) and seqs[0] > 1  # the newest ones, none missing
    report = verify_journal(tmp_path)
    assert report.ok and report.last_seq == 400  # a journal that starts above 1 is not damaged
    journal.close()
    reopened = Journal(tmp_path, fsync="none", max_segment_bytes=4096, retain_bytes=16 * 1024)
    assert reopened.append(_event(400), 2000.0) == 401
    reopened.close()


def test_age_bound_deletes_a_segment_once_the_next_one_is_older_than_the_bound(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path, fsync="none", max_segment_age=1.0, retain_age=10.0)
    journal.append(_event(0), 1000.0)  # segment 1
    journal.append(_event(1), 1002.0)  # segment 2, created at 1002
    journal.append(_event(2), 1011.0)  # segment 3: segment 1's last record is 9 s old: kept
    assert len(list_segments(tmp_path)) == 3
    journal.append(_event(3), 1013.0)  # segment 4: segment 1's last record is 11 s old: gone
    names = [p.name for p in list_segments(tmp_path)]
    assert names == ["journal-00000002.seg", "journal-00000003.seg", "journal-00000004.seg"]
    assert [r.seq for r in JournalReader(tmp_path).records()] == [2, 3, 4]
    journal.close()


def test_retention_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        JournalSetting("/tmp/j", max_bytes=-1)
    assert JournalSetting("/tmp/j", max_bytes=0, max_age_ms=0).max_bytes == 0
    with pytest.raises(ConfigError):
        Journal("/nonexistent/never", retain_age=-1.0)
