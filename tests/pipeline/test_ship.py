"""``busgate journal ship DIR URL`` (pipeline/ship.py) as a user runs it, against a WebHDFS server
answering as a NameNode, with Hadoop's own client: closed segments only, idempotent, resumable,
never overwriting another segment of the same name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.journal import Journal, closed_segments, list_segments
from bus.message.message import Message, encode_message
from tests.pipeline.webhdfs_server import WebHdfsServer, core_site

pytestmark = [pytest.mark.slow, pytest.mark.spark]

T0 = 1_700_000_000.0
BUSGATE = str(Path(sys.executable).with_name("busgate"))


def _append(journal: Journal, first: int, count: int) -> None:
    for i in range(first, first + count):
        journal.append(encode_message(Message.event("sensor.t", {"i": i})), T0 + i)


def _ship(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BUSGATE, "journal", "ship", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebHdfsServer]:
    with WebHdfsServer(tmp_path_factory.mktemp("hdfs")) as served:
        yield served


def _root(server: WebHdfsServer) -> Path:
    return Path(server._server.root)


def test_ship_sends_closed_segments_once_and_never_the_one_being_written(
    server: WebHdfsServer, tmp_path: Path
) -> None:
    local = tmp_path / "journal"
    url = server.url("webhdfs", "/busgate/live")
    remote = _root(server) / "busgate" / "live"
    journal = Journal(local, max_segment_bytes=3_000)
    try:
        _append(journal, 0, 100)
        closed = [info.path.name for info in closed_segments(local)]
        newest = list_segments(local)[-1].name
        assert closed and newest not in closed  # the writer is still on it
        done = _ship(str(local), url)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in remote.glob("*.seg")) == closed
        for name in closed:  # the very bytes, and each index beside its segment
            assert (remote / name).read_bytes() == (local / name).read_bytes()
            idx = name.replace(".seg", ".idx")
            assert (remote / idx).read_bytes() == (local / idx).read_bytes()
        assert done.stdout.count("(shipped)") == len(closed)

        again = _ship(str(local), url)  # idempotent: nothing new, nothing written
        assert again.returncode == 0, again.stderr
        assert again.stdout.count("(already there)") == len(closed)
        assert "(shipped)" not in again.stdout

        _append(journal, 100, 50)  # the writer moves on: the segment it left is closed now
    finally:
        journal.close()  # a clean close indexes the newest: closed too
    third = _ship(str(local), url)
    assert third.returncode == 0, third.stderr
    assert sorted(p.name for p in remote.glob("*.seg")) == [p.name for p in list_segments(local)]
    assert f"{newest}: " in third.stdout and third.stdout.count("(shipped)") >= 2
    assert not [p for p in remote.iterdir() if p.name.startswith(".")]  # no temporary files


def test_a_stopped_ship_is_finished_by_the_next_through_hdfs_urls(
    server: WebHdfsServer, tmp_path: Path
) -> None:
    local = tmp_path / "journal"
    with Journal(local, max_segment_bytes=3_000) as journal:
        _append(journal, 0, 80)
    segments = list_segments(local)
    remote = _root(server) / "busgate" / "resumed"
    remote.mkdir(parents=True)
    (remote / segments[0].name).write_bytes(segments[0].read_bytes())  # shipped before the stop
    stale = remote / f".{segments[1].name}.123-abcd.shipping"
    stale.write_bytes(segments[1].read_bytes()[:1000])  # half of the next one, never renamed
    conf = core_site(tmp_path / "conf")  # hdfs:// is Hadoop's WebHDFS client (fs.hdfs.impl)
    done = _ship(
        str(local), server.url("hdfs", "/busgate/resumed"), env={"HADOOP_CONF_DIR": str(conf)}
    )
    assert done.returncode == 0, done.stderr
    assert f"{segments[0].name}: " in done.stdout and "1 already there" in done.stderr
    for segment in segments:
        assert (remote / segment.name).read_bytes() == segment.read_bytes()
    assert not stale.exists()


def test_another_segment_of_the_same_name_is_never_overwritten(
    server: WebHdfsServer, tmp_path: Path
) -> None:
    local = tmp_path / "journal"
    with Journal(local, max_segment_bytes=3_000) as journal:
        _append(journal, 0, 80)
    segments = list_segments(local)
    remote = _root(server) / "busgate" / "other"
    remote.mkdir(parents=True)
    theirs = remote / segments[1].name  # a segment of another journal with the same number
    with Journal(tmp_path / "other", max_segment_bytes=3_000) as other:
        _append(other, 1000, 80)
    foreign = list_segments(tmp_path / "other")[1].read_bytes()
    theirs.write_bytes(foreign)
    done = _ship(str(local), server.url("webhdfs", "/busgate/other"))
    assert done.returncode == 1
    assert f"another {segments[1].name}" in done.stderr and "not overwritten" in done.stderr
    assert theirs.read_bytes() == foreign
    assert (remote / segments[0].name).is_file()  # what came before it was shipped
    assert not (remote / segments[2].name).exists()  # and nothing after it: no gap at the target


def test_bad_input_and_an_unreachable_target_are_clear_errors(tmp_path: Path) -> None:
    missing = _ship(str(tmp_path / "nope"), "webhdfs://127.0.0.1:9/x")
    assert missing.returncode == 2 and "no such journal directory" in missing.stderr
    with Journal(tmp_path / "journal", max_segment_bytes=3_000) as journal:
        _append(journal, 0, 50)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # a port nobody listens on
    port = sock.getsockname()[1]
    sock.close()
    down = _ship(str(tmp_path / "journal"), f"webhdfs://127.0.0.1:{port}/x")
    assert down.returncode == 1
    assert "cannot reach the target" in down.stderr and "Connection refused" in down.stderr
    assert "Traceback" not in down.stderr


def test_follow_ships_each_segment_as_it_closes_until_stopped(
    server: WebHdfsServer, tmp_path: Path
) -> None:
    local = tmp_path / "journal"
    remote = _root(server) / "busgate" / "followed"
    journal = Journal(local, max_segment_bytes=3_000)
    url = server.url("webhdfs", "/busgate/followed")
    command = [BUSGATE, "journal", "ship", str(local), url, "--follow", "--interval", "0.3"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def shipped_names() -> set[str]:
        return {p.name for p in remote.glob("*.seg")} if remote.is_dir() else set()

    def wait_for(names: set[str]) -> None:
        deadline = time.monotonic() + 90
        while not names <= shipped_names():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{names} not shipped: {shipped_names()}"
            time.sleep(0.2)

    try:
        _append(journal, 0, 60)
        first = {info.path.name for info in closed_segments(local)}
        wait_for(first)
        _append(journal, 60, 60)  # more segments close while it runs
        wait_for({info.path.name for info in closed_segments(local)})
        assert list_segments(local)[-1].name not in shipped_names()  # the one being written
    finally:
        journal.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
