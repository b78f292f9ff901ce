"""``busgate journal cat|tail|replay`` through the real command line and a real broker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.cli import main
from bus.cli.journal import parse_time
from bus.journal import SEGMENT_HEADER_SIZE, Journal, encode_record, list_segments
from bus.message.message import Message, encode_message

T0 = 1_700_000_000.0


def write_events(directory: Path, count: int) -> None:
    with Journal(directory) as journal:
        for i in range(count):
            journal.append(encode_message(Message.event("sensor.temp", {"i": i})), T0 + i)
        journal.append(encode_message(Message.request("demo", "echo", {"x": 1})), T0 + count)


def lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_cat_prints_every_record_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_events(tmp_path, 5)
    assert main(["journal", "cat", str(tmp_path)]) == 0
    got = lines(capsys)
    assert [r["message"]["PLD"].get("i") for r in got] == [0, 1, 2, 3, 4, None]
    assert got[0]["ts"] == "2023-11-14T22:13:20.000000Z"
    assert got[0]["offset"] == SEGMENT_HEADER_SIZE and [r["seq"] for r in got] == [1, 2, 3, 4, 5, 6]
    assert got[0]["message"]["GRP"] == "sensor.temp" and got[-1]["message"]["CMD"] == "echo"
    assert got[0]["segment"] == "journal-00000001.seg"


def test_cat_time_range_and_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_events(tmp_path, 10)
    assert (
        main(
            [
                "journal",
                "cat",
                str(tmp_path),
                "--since",
                str(T0 + 3),
                "--until",
                "2023-11-14T22:13:26Z",
            ]
        )
        == 0
    )
    assert [r["message"]["PLD"]["i"] for r in lines(capsys)] == [3, 4, 5]
    assert main(["journal", "tail", str(tmp_path), "-n", "2"]) == 0
    got = lines(capsys)
    assert [r["message"]["TYP"] for r in got] == ["EVT", "RQS"]


def test_torn_tail_is_reported_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_events(tmp_path, 3)
    seg = list_segments(tmp_path)[0]
    with seg.open("ab") as fh:
        fh.write(encode_record(b"half", T0)[:10])
    assert main(["journal", "cat", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 4
    assert "torn tail" in captured.err and str(seg) in captured.err


def test_damage_exits_1_naming_file_and_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_events(tmp_path, 3)
    seg = list_segments(tmp_path)[0]
    data = bytearray(seg.read_bytes())
    data[SEGMENT_HEADER_SIZE + 35] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert main(["journal", "cat", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"{seg}: checksum mismatch at offset {SEGMENT_HEADER_SIZE}" in captured.err
    assert "1 record lost" in captured.err
    # every intact record is still printed
    assert [orjson.loads(line)["seq"] for line in captured.out.splitlines()] == [2, 3, 4]


def test_bad_time_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "cat", str(tmp_path), "--since", "last tuesday"]) == 2
    assert "bad input" in capsys.readouterr().err


def test_parse_time_forms() -> None:
    assert parse_time("15m", now=T0) == T0 - 900
    assert parse_time("2h", now=T0) == T0 - 7200
    assert parse_time("1700000000.5", now=0) == 1_700_000_000.5
    assert parse_time("2023-11-14T22:13:20", now=0) == T0
    assert parse_time("2023-11-14T23:13:20+01:00", now=0) == T0


async def test_replay_republishes_a_time_range(
    tmp_path: Path, make_broker: Any, make_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    write_events(tmp_path, 6)
    broker = await make_broker(open=True)
    url = f"bus://127.0.0.1:{broker.port}"
    listener = await make_client(url, name="bob")
    sub = await listener.subscribe("sensor.*")
    args = ["journal", "replay", str(tmp_path), "--bus", url, "--name", "alice"]
    args += ["--secret", "alice-secret", "--since", str(T0 + 2), "--until", str(T0 + 5)]
    args += ["--type", "EVT"]
    assert await asyncio.to_thread(main, args) == 0
    got = [await asyncio.wait_for(sub.get(), 5) for _ in range(3)]
    assert [m.payload["i"] for m in got] == [2, 3, 4]
    assert "replayed 3 messages" in capsys.readouterr().err  # --until excluded, RQS left out


async def test_replay_leaves_the_recorded_stream_sequences_behind(
    tmp_path: Path, make_broker: Any, make_client: Any
) -> None:
    # A journal recorded on NATS holds each event with its stream sequence (SEQ, PROTOCOL.md
    # 10.2): replayed onto another bus, that number would pass for the new bus's own.
    from bus.recording import stream_record

    with Journal(tmp_path) as journal:
        for i in range(3):
            event = encode_message(Message.event("sensor.temp", {"i": i}))
            journal.append(stream_record(event, 500 + i) or b"", T0 + i)
    broker = await make_broker(open=True)
    url = f"bus://127.0.0.1:{broker.port}"
    listener = await make_client(url, name="bob")
    sub = await listener.subscribe("sensor.*")
    args = ["journal", "replay", str(tmp_path), "--bus", url, "--name", "alice"]
    args += ["--secret", "alice-secret", "--since", str(T0)]
    assert await asyncio.to_thread(main, args) == 0
    got = [await asyncio.wait_for(sub.get(), 5) for _ in range(3)]
    assert [(m.payload["i"], m.seq) for m in got] == [(0, None), (1, None), (2, None)]


def test_tail_follow_prints_new_records(tmp_path: Path) -> None:
    import subprocess
    import sys

    write_events(tmp_path, 2)
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["journal", "tail", str(tmp_path), "-n", "1", "--follow", "--interval", "0.05"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert orjson.loads(proc.stdout.readline())["message"]["TYP"] == "RQS"
        with Journal(tmp_path) as journal:  # a restarted broker: a new segment
            journal.append(encode_message(Message.event("sensor.new", {"n": 1})), T0 + 100)
        line = orjson.loads(proc.stdout.readline())
        assert line["message"]["GRP"] == "sensor.new" and line["segment"] == "journal-00000002.seg"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize(
    "extra",
    [
        ["--bus", "bus://127.0.0.1:4000"],  # the broker journals itself (--journal DIR)
        ["--bus", "nats://127.0.0.1:4222", "--name", "a.b"],  # a lease key and consumer name
        ["--bus", "nats://127.0.0.1:4222", "--lease", "0.5"],  # nats-server expires no finer
        ["--bus", "nats://127.0.0.1:4222", "--fsync", "sometimes"],
        ["--bus", "nats://127.0.0.1:4222", "--since", "yesterday-ish"],
    ],
)
def test_record_refuses_bad_input_before_it_connects(
    tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(["journal", "record", str(tmp_path / "j"), *extra])
    except SystemExit as exc:  # argparse's own refusals
        status = int(exc.code or 0)
    assert status == 2
    assert capsys.readouterr().err.strip()
    assert not (tmp_path / "j").exists()
