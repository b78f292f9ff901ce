"""Where a journal recorded from a stream ends (``bus/journal/stream_tail.py``, PROTOCOL 10.2)."""

from __future__ import annotations

from pathlib import Path

from bus.journal import Journal, list_segments
from bus.journal.stream_tail import last_stream_seq
from bus.message.message import Message, encode_message
from bus.recording import stream_record

T0 = 1_700_000_000.0


def _event(stream_seq: int) -> bytes:
    body = stream_record(
        encode_message(Message.event("sensor.temp", {"i": stream_seq})), stream_seq
    )
    assert body is not None
    return body


def _request(i: int) -> bytes:
    message = Message.request("demo", "echo", {"i": i})
    message.frame["SEQ"] = 10_000 + i  # a request's own fields do not count
    return encode_message(message)


def test_an_empty_or_missing_journal_ends_before_the_stream(tmp_path: Path) -> None:
    assert last_stream_seq(tmp_path / "missing") == 0
    with Journal(tmp_path / "j") as journal:
        journal.append(_request(1), T0)
    assert last_stream_seq(tmp_path / "j") == 0


def test_the_newest_event_with_a_stream_sequence_is_the_tail(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        for seq in (3, 4, 7):  # stream sequences need not be contiguous
            journal.append(_event(seq), T0)
            journal.append(_request(seq), T0)
        journal.append(_request(99), T0)
    assert last_stream_seq(tmp_path) == 7


def test_an_older_segment_answers_when_the_newest_holds_no_event(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append(_event(12), T0)
    with Journal(tmp_path) as journal:  # a new segment: requests only (a restart, a quiet bus)
        journal.append(_request(1), T0 + 1)
    assert len(list_segments(tmp_path)) == 2
    assert last_stream_seq(tmp_path) == 12


def test_an_event_far_from_the_segment_end_is_found(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append(_event(5), T0)
        for i in range(3000):  # more than the scan keeps at hand
            journal.append(_request(i), T0)
    assert last_stream_seq(tmp_path) == 5


def test_a_torn_last_record_is_read_around(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append(_event(20), T0)
        journal.append(_event(21), T0)
    segment = list_segments(tmp_path)[-1]
    segment.write_bytes(segment.read_bytes()[:-3])  # a crash mid-write of event 21
    assert last_stream_seq(tmp_path) == 20
