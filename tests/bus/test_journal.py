"""Tests of bus/journal: record codec, writer (rotation, fsync, filter), reader, recovery.

Damage (issue 12) is in test_journal_damage.py, sequence numbers and indexes in
test_journal_seq.py."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bus.errors import ClosedError, ConfigError, DecodeError, JournalError
from bus.journal import (
    RECORD_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    FsyncPolicy,
    Journal,
    JournalFilter,
    JournalReader,
    decode_record,
    encode_record,
    encode_segment_header,
    header_fields,
    list_segments,
    read_segment,
    scan_records,
    verify_journal,
)
from tests.docexamples import examples

T0 = 1_700_000_000.0


def frame(**fields: str | int) -> bytes:
    """A binary data frame of STRING (str) and U32 (int) fields, written by hand (seed 000)."""
    out = bytearray()
    for name, value in fields.items():
        out += bytes([len(name)]) + name.encode("latin-1")
        if isinstance(value, str):
            data = value.encode("latin-1")
            out += bytes([3]) + struct.pack(">I", len(data)) + data
        else:
            out += bytes([9]) + struct.pack(">I", value)
    return bytes(out)


def test_record_round_trip_and_partial_input() -> None:
    raw = frame(GRP="demo", TYP="RQS")
    data = encode_record(raw, T0 + 0.123456)
    assert len(data) == RECORD_HEADER_SIZE + len(raw)
    decoded = decode_record(data + b"trailing")
    assert decoded is not None
    record, end = decoded
    assert record.raw == raw and record.ts_us == round((T0 + 0.123456) * 1e6)
    assert end == len(data)
    for cut in range(len(data)):
        assert decode_record(data[:cut]) is None  # a partial record never consumes bytes


@pytest.mark.parametrize("bit", [0, 5, 8 * 4, 8 * 9, 8 * 14, 8 * 22])
def test_any_flipped_bit_is_detected(bit: int) -> None:
    data = bytearray(encode_record(frame(GRP="demo", CMD="echo"), T0))
    data[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DecodeError):
        result = decode_record(bytes(data))
        # a flipped length bit may make the record look longer: never returned as data
        assert result is None
        raise DecodeError("incomplete", 0)


def test_every_single_bit_flip_of_a_segment_is_caught(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append(frame(GRP="a"), T0)
        journal.append(frame(GRP="b"), T0 + 1)
    seg = list_segments(tmp_path)[0]
    good = seg.read_bytes()
    second = SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE + len(frame(GRP="a"))
    for byte in range(len(good)):
        bad = bytearray(good)
        bad[byte] ^= 0x10
        seg.write_bytes(bytes(bad))
        reader = JournalReader(seg)
        raws = [r.raw for r in reader.records()]
        hit = 0 if byte < SEGMENT_HEADER_SIZE else SEGMENT_HEADER_SIZE if byte < second else second
        # never silent, never a torn tail (nothing is torn), never a damaged record returned
        assert reader.torn_tails == [], byte
        assert [d.offset for d in reader.damage] == [hit], byte
        expected = {0: [frame(GRP="a"), frame(GRP="b")], SEGMENT_HEADER_SIZE: [frame(GRP="b")]}
        assert raws == expected.get(hit, [frame(GRP="a")]), byte


def test_the_writer_s_record_is_encode_record_byte_for_byte_in_c_and_python() -> None:
    # Journal.append builds its records with the C accelerator's record() when it is built
    # (one allocation, one CRC pass); the pure-Python record_bytes is its reference. Bodies
    # around the 64 bytes where the CRC's folded loop starts, and the doc example.
    from bus.journal import writer

    builders = [writer.record_bytes]
    if writer._record is not writer.record_bytes:
        builders.append(writer._record)
    cases = [(frame(GRP="a" * n), ts, seq) for n in (1, 30, 36, 37, 38, 300)
             for ts, seq in ((T0, 1), (-1.5, 2**64 - 1), (0.0, 0))]  # fmt: skip
    cases += [(b"", T0, 5)]
    for raw, ts, seq in cases:
        expected = encode_record(raw, ts, seq)
        for build in builders:
            assert build(raw, round(ts * 1_000_000), seq) == expected, (build, len(raw))
    (example,) = [e for e in examples("journal") if e.id == "event-record"]
    raw, ts = example.hex("message"), float(example.body["ts"])
    for build in builders:
        built = build(raw, round(ts * 1_000_000), int(example.body["seq"]))
        assert built == example.hex("record")


def test_doc_examples_match_codec() -> None:
    found = {e.id: e for e in examples("journal")}
    assert {"event-record", "event-record-v1"} <= set(found), "PROTOCOL.md section 8 examples"
    for example in found.values():
        if "record" not in example.body:
            continue
        raw = example.hex("message")
        ts = float(example.body["ts"])
        seq = int(example.body["seq"]) if "seq" in example.body else None
        version = 2 if seq is not None else 1
        assert encode_record(raw, ts, seq or 0, version=version) == example.hex("record")
        decoded = decode_record(example.hex("record"), version=version)
        assert decoded is not None and decoded[0].raw == raw and decoded[0].seq == seq
        first = int(example.body["first_seq"]) if "first_seq" in example.body else None
        created = float(example.body["created"])
        assert encode_segment_header(created, first) == example.hex("segment")


def test_writer_reader_round_trip(tmp_path: Path) -> None:
    raws = [frame(GRP="demo", CMD="echo", N=i) for i in range(50)]
    with Journal(tmp_path, fsync="always") as journal:
        for i, raw in enumerate(raws):
            assert journal.append(raw, T0 + i)
    reader = JournalReader(tmp_path)
    records = list(reader.records())
    assert [r.raw for r in records] == raws
    assert [r.ts for r in records] == [T0 + i for i in range(50)]
    assert reader.torn_tails == []
    since = list(reader.records(since=T0 + 10, until=T0 + 20))
    assert [r.ts for r in since] == [T0 + i for i in range(10, 20)]


def test_rotation_by_size_and_age(tmp_path: Path) -> None:
    raw = frame(GRP="demo", PAD="x" * 100)
    per_record = RECORD_HEADER_SIZE + len(raw)
    with Journal(tmp_path, max_segment_bytes=SEGMENT_HEADER_SIZE + 3 * per_record) as journal:
        for i in range(10):
            journal.append(raw, T0 + i * 0.001)
    sizes = [p.stat().st_size for p in list_segments(tmp_path)]
    assert sizes == [SEGMENT_HEADER_SIZE + 3 * per_record] * 3 + [SEGMENT_HEADER_SIZE + per_record]
    age_dir = tmp_path / "age"
    with Journal(age_dir, max_segment_age=60) as journal:
        for t in (0, 30, 59, 60, 100, 125):
            journal.append(raw, T0 + t)
    counts = [len(list(read_segment(p))) for p in list_segments(age_dir)]
    assert counts == [3, 2, 1]
    assert len(list(JournalReader(age_dir).records())) == 6


def test_filter_on_groups_and_types(tmp_path: Path) -> None:
    flt = JournalFilter(groups=("demo", "sensor.*"), types=frozenset({"RQS", "EVT"}))
    with Journal(tmp_path, filter=flt) as journal:
        assert journal.append(frame(GRP="demo", TYP="RQS"), T0) == 1
        assert journal.append(frame(GRP="sensor.temp", TYP="EVT"), T0) == 2
        assert journal.append(frame(GRP="demo", TYP="ACK"), T0) is None
        assert journal.append(frame(GRP="other", TYP="RQS"), T0) is None
        assert journal.append(b'{"GRP": "demo", "TYP": "RQS"}', T0) == 3  # a JSON-encoded message
        assert journal.append(frame(GRP="sensor.temp.x", TYP="EVT"), T0) is None  # one token
        assert journal.skipped == 3 and journal.appended == 3 and journal.last_seq == 3
    assert len(list(JournalReader(tmp_path).records())) == 3


def test_filter_tail_wildcard(tmp_path: Path) -> None:
    flt = JournalFilter(groups=("sensor.>",))
    assert flt.accepts(frame(GRP="sensor.a.b")) and flt.accepts(frame(GRP="sensor.a"))
    assert not flt.accepts(frame(GRP="sensor")) and not flt.accepts(frame(TYP="EVT"))
    assert JournalFilter(groups=(">",)).accepts(frame(GRP="x.y"))


def test_header_fields_reads_frames_and_json() -> None:
    raw = frame(MID="m1", GRP="demo", RCD=404, PLD="x")
    assert header_fields(raw, ["GRP", "RCD", "XYZ"]) == {"GRP": "demo", "RCD": 404}
    assert header_fields(b'{"GRP":"g","TYP":"EVT"}', ["GRP"]) == {"GRP": "g"}
    assert header_fields(b"\xff\xfe garbage", ["GRP"]) == {}


def test_config_errors_and_closed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Journal(tmp_path, fsync="sometimes")
    with pytest.raises(ConfigError):
        Journal(tmp_path, max_segment_bytes=10)
    journal = Journal(tmp_path, fsync=FsyncPolicy.NONE)
    journal.close()
    journal.close()
    with pytest.raises(ClosedError):
        journal.append(b"x", T0)


def test_torn_tail_is_reported_and_cut_on_reopen(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        for i in range(5):
            journal.append(frame(N=i), T0 + i)
    seg = list_segments(tmp_path)[0]
    whole = seg.read_bytes()
    torn_record = encode_record(frame(N=99), T0 + 9, 6)[:13]
    seg.write_bytes(whole + torn_record)
    reader = JournalReader(tmp_path)
    assert len(list(reader.records())) == 5
    assert [(t.offset, t.size) for t in reader.torn_tails] == [(len(whole), 13)]
    assert reader.damage == []
    journal = Journal(tmp_path)
    assert journal.recovered is not None and journal.recovered.offset == len(whole)
    assert seg.read_bytes() == whole  # cut back to the last complete record
    assert journal.append(frame(N=5), T0 + 5) == 6  # the torn record's number is used again
    journal.close()
    assert [r.raw for r in JournalReader(tmp_path).records()] == [frame(N=i) for i in range(6)]
    assert len(list_segments(tmp_path)) == 2


def test_corrupted_record_is_skipped_and_named(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        for i in range(3):
            journal.append(frame(N=i), T0 + i)
    seg = list_segments(tmp_path)[0]
    data = bytearray(seg.read_bytes())
    second = SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE + len(frame(N=0))
    data[second + RECORD_HEADER_SIZE + 2] ^= 0x01
    seg.write_bytes(bytes(data))
    reader = JournalReader(tmp_path)
    assert [r.raw for r in reader.records()] == [frame(N=0), frame(N=2)]
    [damage] = reader.damage
    assert damage.path == str(seg) and damage.offset == second and damage.missing == 1
    assert "checksum" in damage.reason and str(seg) in str(damage)
    seg.write_bytes(b"not a journal at all")
    reader = JournalReader(tmp_path)
    assert list(reader.records()) == []
    assert "bad magic" in reader.damage[0].reason and reader.damage[0].size == 20
    journal = Journal(tmp_path)  # the bus keeps journaling: damage reported, left for readers
    assert journal.damage and journal.damage[0].path == str(seg)
    assert journal.append(b"x", T0) and journal.segment_path != seg
    journal.close()
    assert seg.read_bytes() == b"not a journal at all"


def test_scan_records_gives_offsets_and_the_tail() -> None:
    raws = [frame(N=i) for i in range(4)]
    data = b"".join(encode_record(r, T0 + i, i + 1) for i, r in enumerate(raws))
    found = scan_records(data + b"BJR2\x00")
    assert [decode_record(data, o)[0].raw for o in found.offsets] == raws  # type: ignore[index]
    assert found.end == len(data) and found.partial == 5 and found.last_seq == 4
    half = scan_records(data, 0, max_count=2)
    assert len(half.offsets) == 2 and half.end == found.offsets[2]


WRITER = textwrap.dedent(
    """
    import sys, time
    from bus.journal import Journal
    journal = Journal(sys.argv[1], fsync="none", max_segment_bytes=200_000)
    i = 0
    while True:
        journal.append(b"message-%08d" % i + b"." * (i % 300), time.time())
        i += 1
        if i == 2000:
            print("ready", flush=True)
    """
)


def _stopped(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the writer did not stop"
        time.sleep(0.001)


def _stop_outside_a_rotation(pid: int, directory: Path) -> None:
    """Stop the writer anywhere but between creating a segment and writing its header: the
    test tears the newest segment's last record, and a segment without a header has none (a
    CI run killed the writer there; the journal removes such a file when it opens)."""
    for _ in range(1000):
        _stopped(pid)
        if list_segments(directory)[-1].stat().st_size >= SEGMENT_HEADER_SIZE:
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.001)
    raise AssertionError("the writer was always mid-rotation")


def test_kill_9_mid_write_keeps_every_complete_record(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        _stop_outside_a_rotation(proc.pid, tmp_path)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    # the kill may land mid-write: simulate the worst case by tearing the last record too
    last = list_segments(tmp_path)[-1]
    with last.open("ab") as fh:
        fh.write(encode_record(b"message-torn", time.time(), 10**9)[:-3])
    reader = JournalReader(tmp_path)
    records = list(reader.records())
    assert len(records) >= 2000
    assert [r.raw[:16] for r in records] == [b"message-%08d" % i for i in range(len(records))]
    assert reader.torn_tails and reader.torn_tails[-1].path == str(last)
    journal = Journal(tmp_path)
    assert journal.recovered is not None and journal.damage == []
    # numbers go on above what the writer reserved before it was killed (none used twice)
    assert len(records) == records[-1].seq <= journal.last_seq
    after = journal.append(b"after-restart", time.time())
    journal.close()
    again = list(JournalReader(tmp_path).records())
    assert len(again) == len(records) + 1 and again[-1].raw == b"after-restart"
    assert [r.seq for r in again] == [*range(1, len(records) + 1), after]
    assert after is not None and after > len(records)
    assert verify_journal(tmp_path).damage == []


# --- batch_writes: one write() per batch of appends (the broker's input batch) ----------------


def _counted_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of every os.write from now on (they still happen)."""
    sizes: list[int] = []
    write = os.write

    def counted(fd: int, data: bytes) -> int:
        sizes.append(len(data))
        return write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    return sizes


def test_batched_appends_are_written_with_one_write_and_read_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raws = [frame(GRP="demo", N=i) for i in range(40)]
    journal = Journal(tmp_path, fsync="none", batch_writes=True)
    journal.append(raws[0], T0)
    journal.write_pending()  # the segment exists now
    writes = _counted_writes(monkeypatch)
    seqs = [journal.append(raw, T0 + 1) for raw in raws[1:]]
    assert seqs == list(range(2, 41)) and journal.last_seq == 40
    assert writes == [] and journal.written_seq == 1  # nothing written yet, nothing told
    journal.write_pending()
    assert writes == [sum(RECORD_HEADER_SIZE + len(raw) for raw in raws[1:])]  # one write
    assert journal.written_seq == 40
    journal.append(raws[0], T0 + 2)
    assert [r.raw for r in journal.reader().records()] == raws + raws[:1]  # a read writes first
    assert journal.written_seq == 41
    journal.close()
    assert [r.raw for r in JournalReader(tmp_path).records()] == raws + raws[:1]


def test_batched_appends_are_written_before_a_rotation_and_at_close(tmp_path: Path) -> None:
    raw = frame(GRP="demo", PAD="x" * 100)
    per_record = RECORD_HEADER_SIZE + len(raw)
    with Journal(
        tmp_path, max_segment_bytes=SEGMENT_HEADER_SIZE + 3 * per_record, batch_writes=True
    ) as journal:
        for i in range(10):
            journal.append(raw, T0 + i * 0.001)
    sizes = [p.stat().st_size for p in list_segments(tmp_path)]
    assert sizes == [SEGMENT_HEADER_SIZE + 3 * per_record] * 3 + [SEGMENT_HEADER_SIZE + per_record]
    assert [r.seq for r in JournalReader(tmp_path).records()] == list(range(1, 11))


def test_a_failed_batch_write_loses_only_that_batch_and_says_which_seqs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path, fsync="none", batch_writes=True)
    for i in range(3):
        journal.append(frame(GRP="kept", N=i), T0)
    journal.write_pending()
    for i in range(4):
        journal.append(frame(GRP="lost", N=i), T0)
    write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: write(fd, data[:10]) and 0)  # disk full
    with pytest.raises(JournalError, match="records 4-7 lost"):
        journal.write_pending()
    monkeypatch.setattr(os, "write", write)
    assert journal.take_lost() == [(4, 7)] and journal.take_lost() == []
    assert journal.written_seq == 3
    assert journal.append(frame(GRP="after"), T0) == 8  # no number used twice
    journal.write_pending()
    journal.close()
    reader = JournalReader(tmp_path)
    records = list(reader.records())
    assert [(r.seq, r.raw) for r in records] == [
        (1, frame(GRP="kept", N=0)),
        (2, frame(GRP="kept", N=1)),
        (3, frame(GRP="kept", N=2)),
        (8, frame(GRP="after")),
    ]  # the partial bytes were cut: nothing torn, nothing damaged
    assert reader.torn_tails == [] and len(list_segments(tmp_path)) == 2
