"""Issue 12, "data destroyed or hidden": damaged journals are read around, reported, never cut.

Each test is one measured item of the issue: a flipped length byte taken for a torn tail (and a
real broker restarting on it truncating the segment), a bad CRC or magic hiding every later
record, records cut from a middle segment vanishing silently, trailing zeros after a crash.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.asyncio.client import connect
from bus.cli import main
from bus.frame.jsonmap import to_json
from bus.journal import (
    RECORD_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    Journal,
    JournalReader,
    encode_record,
    index_path,
    list_segments,
    read_segment,
    verify_journal,
)
from bus.message.message import Message, decode_message, encode_message

T0 = 1_700_000_000.0


def event(i: int) -> bytes:
    return encode_message(Message.event("sensor.temp", {"i": i, "pad": "x" * (i % 50)}))


def write(directory: Path, count: int, **options: Any) -> None:
    with Journal(directory, **options) as journal:
        for i in range(count):
            journal.append(event(i), T0 + i)


def numbers(directory: Path) -> list[int]:
    """The ``i`` of every intact event record of a journal, in order."""
    found = []
    for record in JournalReader(directory).records():
        payload = decode_message(record.raw).payload.to_dict()
        found.append(int(payload["i"]))  # type: ignore[call-overload]
    return found


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[Any], str]:
    status = main(["journal", *args])
    captured = capsys.readouterr()
    return status, [orjson.loads(line) for line in captured.out.splitlines()], captured.err


def verify(capsys: pytest.CaptureFixture[str], directory: Path) -> tuple[int, list[str]]:
    status = main(["journal", "verify", str(directory)])
    return status, capsys.readouterr().out.splitlines()


def record_offsets(segment: Path) -> list[int]:
    return [r.offset for r in read_segment(segment)]


# -- a flipped byte in a length field ---------------------------------------------------------


def test_flipped_length_byte_mid_segment_hides_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 300)
    [segment] = list_segments(tmp_path)
    at = record_offsets(segment)[200]
    data = bytearray(segment.read_bytes())
    data[at + 10] ^= 0xFF  # the record now claims ~65 kB: past the end of the segment
    segment.write_bytes(bytes(data))

    status, lines, err = cli(capsys, "cat", str(tmp_path))
    assert status == 1  # damage: reported, not a clean exit
    assert [line["message"]["PLD"]["i"] for line in lines] == [*range(200), *range(201, 300)]
    assert f"{segment}: record runs past the next record at offset {at}" in err
    assert "1 record lost" in err and "torn tail" not in err


def test_flipped_length_byte_of_the_last_record_is_not_a_torn_tail(tmp_path: Path) -> None:
    write(tmp_path, 10)
    [segment] = list_segments(tmp_path)
    last = record_offsets(segment)[-1]
    data = bytearray(segment.read_bytes())
    data[last + 10] ^= 0x01  # longer than what is there, and nothing follows
    segment.write_bytes(bytes(data))
    before = segment.read_bytes()
    reader = JournalReader(tmp_path)
    assert len(list(reader.records())) == 9
    assert reader.torn_tails == [] and [d.offset for d in reader.damage] == [last]
    journal = Journal(tmp_path)  # not cut: the record is whole, only its length is wrong
    journal.close()
    assert segment.read_bytes() == before and journal.recovered is None


def _broker(journal: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["broker", "--open", "--port", "0", "--journal", str(journal)]
    command += ["--journal-fsync", "always"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGATE_")}
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _port(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "listening on" in line, line + (process.stderr.read() if process.stderr else "")
    return int(line.rsplit(":", 1)[1])


async def _events(port: int, first: int, count: int) -> None:
    """Publish events and wait until a subscriber has them all (so the broker journaled them)."""
    url = f"bus://127.0.0.1:{port}"
    publisher, subscriber = await connect(url), await connect(url)
    try:
        sub = await subscriber.subscribe("sensor.*")
        for i in range(first, first + count):
            await publisher.publish("sensor.temp", {"i": i})
        for _ in range(count):
            await asyncio.wait_for(sub.get(), 10)
    finally:
        await publisher.close()
        await subscriber.close()


def _run_broker(journal: Path, first: int, count: int) -> str:
    with _broker(journal) as process:
        try:
            asyncio.run(_events(_port(process), first, count))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
        assert process.stderr is not None
        return process.stderr.read()


@pytest.mark.slow
def test_a_broker_restarting_on_a_damaged_segment_keeps_every_intact_record(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal"
    _run_broker(journal, 0, 300)
    [segment] = list_segments(journal)
    at = record_offsets(segment)[150]
    data = bytearray(segment.read_bytes())
    data[at + 10] ^= 0xFF
    segment.write_bytes(bytes(data))
    damaged = segment.read_bytes()

    log = _run_broker(journal, 300, 20)  # under --journal-fsync always, as in the issue

    assert segment.read_bytes() == damaged  # never truncated, never rewritten
    assert f"{segment}: record runs past the next record at offset {at}" in log
    assert numbers(journal) == [*range(150), *range(151, 320)]
    seqs = [r.seq for r in JournalReader(journal).records()]
    assert seqs[-20:] == list(range(301, 321))  # numbering goes on after the last record
    assert len(list_segments(journal)) == 2


# -- a bad CRC or magic -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["crc", "magic", "body"])
def test_a_damaged_record_hides_no_later_record_or_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    write(tmp_path, 120, max_segment_bytes=4000)
    segments = list_segments(tmp_path)
    assert len(segments) >= 3
    first = segments[0]
    offsets = record_offsets(first)
    at = offsets[3]
    shift = {"crc": 5, "magic": 1, "body": RECORD_HEADER_SIZE + 4}[where]
    data = bytearray(first.read_bytes())
    data[at + shift] ^= 0x20
    first.write_bytes(bytes(data))

    assert numbers(tmp_path) == [i for i in range(120) if i != 3]
    status, lines, err = cli(capsys, "tail", str(tmp_path), "-n", "5")
    assert status == 1 and f"{first}" in err and f"at offset {at}" in err
    assert [line["message"]["PLD"]["i"] for line in lines] == list(range(115, 120))
    assert [line["seq"] for line in lines] == list(range(116, 121))


def test_a_damaged_segment_header_hides_none_of_its_records(tmp_path: Path) -> None:
    write(tmp_path, 30, max_segment_bytes=2000)
    first = list_segments(tmp_path)[0]
    data = bytearray(first.read_bytes())
    data[3] ^= 0x01
    first.write_bytes(bytes(data))
    assert numbers(tmp_path) == list(range(30))
    report = verify_journal(tmp_path)
    assert [(d.offset, d.size) for d in report.damage] == [(0, SEGMENT_HEADER_SIZE)]
    assert "bad magic" in report.damage[0].reason


# -- records cut from a middle segment --------------------------------------------------------


def report_reason(with_index: bool, cut: int) -> str:
    if with_index:
        return f"segment is {cut} bytes shorter than its index says (records cut off)"
    return "3 records missing before journal-00000003.seg (sequence gap)"


@pytest.mark.parametrize("with_index", [True, False])
def test_records_cut_from_a_middle_segment_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_index: bool
) -> None:
    write(tmp_path, 120, max_segment_bytes=4000)
    middle = list_segments(tmp_path)[1]
    offsets = record_offsets(middle)
    cut = middle.stat().st_size - offsets[-3]
    os.truncate(middle, offsets[-3])  # the last 3 records, cut on a record boundary
    if not with_index:
        index_path(middle).unlink()  # found from the sequence numbers alone

    status, out = verify(capsys, tmp_path)
    assert status == 1
    assert [line for line in out if line.startswith("damaged: ")] == [
        f"damaged: {middle}: {report_reason(with_index, cut)} at offset {offsets[-3]} "
        "(0 bytes skipped, 3 records lost)"
    ]
    report = verify_journal(tmp_path)
    [damage] = report.damage
    assert damage.path == str(middle) and damage.offset == offsets[-3] and damage.missing == 3
    assert report.records == 117
    status, lines, err = cli(capsys, "cat", str(tmp_path))
    assert status == 1 and len(lines) == 117 and "3 records lost" in err


# -- trailing zeros after a crash -------------------------------------------------------------


def test_trailing_zeros_are_damage_reported_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 40)
    [segment] = list_segments(tmp_path)
    end = segment.stat().st_size
    with segment.open("ab") as fh:
        fh.write(bytes(4096))  # the file grew, its data never reached the disk
    status, lines, err = cli(capsys, "cat", str(tmp_path))
    assert status == 1 and len(lines) == 40
    assert f"bad record magic at offset {end} (4096 bytes skipped)" in err
    journal = Journal(tmp_path)
    assert [d.offset for d in journal.damage] == [end] and journal.recovered is None
    assert journal.append(event(40), T0 + 40) == 41
    journal.close()
    assert segment.stat().st_size == end + 4096  # left as it is
    assert numbers(tmp_path) == list(range(41))


# -- verify -----------------------------------------------------------------------------------


def test_verify_lists_every_damaged_span_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 90, max_segment_bytes=3000)
    segments = list_segments(tmp_path)
    assert len(segments) >= 3
    status, out = verify(capsys, tmp_path)
    assert status == 0 and "0 damaged spans" in out[-1]
    spans = []
    for seg, nth in ((segments[0], 2), (segments[1], 5), (segments[-1], 1)):
        at = record_offsets(seg)[nth]
        data = bytearray(seg.read_bytes())
        data[at + 6] ^= 0x40  # the CRC
        seg.write_bytes(bytes(data))
        spans.append((str(seg), at))
    with segments[-1].open("ab") as fh:
        fh.write(encode_record(event(99), T0, 91)[:17])  # and a torn tail
    status, out = verify(capsys, tmp_path)
    assert status == 1
    damaged = [line for line in out if line.startswith("damaged: ")]
    assert len(damaged) == 3
    for (path, at), line in zip(spans, damaged, strict=True):
        assert f"{path}: checksum mismatch at offset {at}" in line and "1 record lost" in line
    assert any(line.startswith("torn tail: ") for line in out)
    assert "87 intact records" in out[-1] and "3 damaged spans" in out[-1]
    assert "3 records known lost, 1 torn tails" in out[-1]


def test_a_v1_journal_is_still_read_and_continued(tmp_path: Path) -> None:
    segment = tmp_path / "journal-00000001.seg"
    from bus.journal import encode_segment_header

    raws = [event(i) for i in range(5)]
    body = b"".join(encode_record(r, T0 + i, version=1) for i, r in enumerate(raws))
    segment.write_bytes(encode_segment_header(T0, None) + body)
    reader = JournalReader(tmp_path)
    old = list(reader.records())
    assert [r.raw for r in old] == raws and {r.seq for r in old} == {None}
    with Journal(tmp_path) as journal:
        assert journal.last_seq == 0 and journal.append(event(5), T0 + 5) == 1
    records = list(JournalReader(tmp_path).records())
    assert [r.seq for r in records] == [None] * 5 + [1] and verify_journal(tmp_path).ok
    assert to_json(decode_message(records[-1].raw).payload)
