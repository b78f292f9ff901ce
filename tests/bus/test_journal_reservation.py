"""Sequence numbers are never used twice, power loss included (bus/journal/reservation.py,
PROTOCOL.md section 8).

A power loss is what these tests make by hand: everything fsynced stays (the reserved mark is),
and the newest segment loses records the writer had handed to the OS but not fsynced (under
``none`` or ``interval`` nothing is fsynced between rotations, so any cut at a record boundary
is what the disk may hold after it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bus.journal import FsyncPolicy, Journal, JournalReader, list_segments, read_segment
from bus.journal.reader import verify_journal
from bus.journal.reservation import HWM_NAME, MIN_BLOCK, HighWaterMark, read_mark

T0 = 1_700_000_000.0


def raw(i: int) -> bytes:
    return b"event-%06d" % i


def power_loss(directory: Path, keep: int) -> None:
    """Cut the newest segment after its first ``keep`` records, as a power loss would."""
    newest = list_segments(directory)[-1]
    records = list(read_segment(newest))
    os.truncate(newest, records[keep].offset)


def crash(journal: Journal) -> None:
    """The process dies: no close (no fsync, no index, the mark stays as reserved)."""
    os.close(journal._fd)  # type: ignore[arg-type]
    mark = getattr(journal, "_hwm", None)
    if mark is not None:
        mark.close()
    journal._closed = True


@pytest.mark.parametrize("policy", [FsyncPolicy.NONE, FsyncPolicy.INTERVAL])
def test_numbers_cut_by_a_power_loss_are_not_handed_out_again(
    tmp_path: Path, policy: FsyncPolicy
) -> None:
    journal = Journal(tmp_path, fsync=policy, fsync_interval=3600)
    handed = [journal.append(raw(i), T0 + i * 0.001) for i in range(50)]
    assert handed == list(range(1, 51))
    crash(journal)
    power_loss(tmp_path, keep=20)  # records 21..50 were delivered, then lost
    with Journal(tmp_path, fsync=policy) as reopened:
        assert reopened.last_seq >= 50  # every number handed out before is behind it
        new = [reopened.append(raw(i), T0 + 1 + i * 0.001) for i in range(50, 100)]
    assert min(n for n in new if n is not None) > 50  # none of the lost numbers again
    records = list(JournalReader(tmp_path).records())
    seqs = [r.seq for r in records]
    assert seqs == sorted(set(seqs))  # one record per number, in order
    assert [r.raw for r in records] == [raw(i) for i in range(20)] + [
        raw(i) for i in range(50, 100)
    ]
    # The skipped numbers were never records: no reader calls them damage.
    assert verify_journal(tmp_path).damage == []


def test_a_kill_9_skips_at_most_a_block_and_a_clean_close_skips_none(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="interval")
    for i in range(10):
        journal.append(raw(i), T0)
    crash(journal)  # kill -9: the OS keeps every record written
    with Journal(tmp_path) as again:
        first = again.append(raw(10), T0 + 1)
        assert first is not None and 10 < first <= 11 + MIN_BLOCK
        for i in range(11, 20):
            again.append(raw(i), T0 + 1)
        last = again.last_seq
    with Journal(tmp_path) as clean:  # closed cleanly: the next number follows the last one
        assert clean.append(raw(20), T0 + 2) == last + 1
    assert verify_journal(tmp_path).damage == []


def test_fsync_always_reserves_nothing(tmp_path: Path) -> None:
    with Journal(tmp_path, fsync="always") as journal:
        for i in range(5):
            journal.append(raw(i), T0)
        assert journal._hwm.writes == 0
    assert not (tmp_path / HWM_NAME).exists()
    with Journal(tmp_path, fsync="always") as again:
        assert again.append(raw(5), T0) == 6


def test_one_reservation_covers_a_burst_and_blocks_grow_with_the_rate(tmp_path: Path) -> None:
    with Journal(tmp_path, fsync="none") as journal:
        assert journal._hwm.writes == 1  # the first block is reserved at open
        for i in range(200_000):
            journal.append(raw(i), T0 + i * 1e-5)  # 100,000 records a second
        # MIN_BLOCK, MIN_BLOCK again (the rate is not known yet), then about BLOCK_SECONDS of it
        assert journal._hwm.writes == 3
        assert journal._hwm.mark - journal.last_seq > 500_000
        assert journal.fsyncs == 0  # the policy's fsyncs are not the mark's


def test_a_mark_torn_mid_write_falls_back_to_the_slot_before(tmp_path: Path) -> None:
    mark = HighWaterMark(tmp_path)
    mark.reserve(1, 0.0)
    first = mark.mark
    mark.reserve(first + 1, 1.0)
    second = mark.mark
    mark.close()
    assert read_mark(tmp_path) == (2, second)
    path = tmp_path / HWM_NAME
    data = bytearray(path.read_bytes())
    data[0 + 12] ^= 0xFF  # generation 2 lives in slot 0: its CRC no longer matches
    path.write_bytes(bytes(data))
    assert read_mark(tmp_path) == (1, first)
    data[32 + 12] ^= 0xFF  # both slots torn: no mark (numbers go on from the last record)
    path.write_bytes(bytes(data))
    assert read_mark(tmp_path) is None


def test_records_deleted_with_their_segments_leave_the_numbers_used(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync="interval")
    for i in range(30):
        journal.append(raw(i), T0)
    crash(journal)
    for segment in list_segments(tmp_path):  # an operator clears the segments, not the mark
        segment.unlink()
    with Journal(tmp_path) as again:
        assert again.append(raw(30), T0) > 30  # type: ignore[operator]
