"""The NATS journal recorder (``bus/asyncio/nats_journal.py``, PROTOCOL.md 10.2), for real.

Each test starts its own ``nats-server -js`` (a lease bucket keeps the time to live it was made
with) and runs ``busgate journal record`` as child processes, killed with SIGKILL as a crash:

- kill -9 and restart mid-traffic, four times: the journal holds every event of the stream
  exactly once, in stream order, and the requests and responses of the bus besides;
- two recorders on one directory: the standby takes over within seconds of the active one's
  kill -9, nothing twice;
- two recorders on two directories (a standby on another machine): the standby's journal
  begins with the stream's first event, and after a takeover back each journal is complete;
- a real 3-node cluster: the node the recorder is connected to, then the stream's leader, is
  killed mid-traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.jetstream import stream_config
from bus.errors import BusError
from bus.journal import JournalReader, verify_journal
from bus.journal.stream_tail import last_stream_seq
from bus.message.message import decode_message
from tests.conftest import NATS_SERVER, NatsServer
from tests.nats_cluster import NatsCluster, NatsNode

pytestmark = [pytest.mark.nats, pytest.mark.slow, pytest.mark.timeout(180)]

BUSGATE = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
#: Bounds on a loaded 2-core machine, not speed checks.
WAIT = 30.0
REQUEST_WAIT = 5.0  # a request whose answer went down with a node


@pytest.fixture
def js_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with JetStream storing under tmp_path, on a free port."""
    if not os.path.exists(NATS_SERVER):
        pytest.skip("nats-server is not installed")
    server = NatsServer(0, "-js", "-sd", str(tmp_path / "jetstream")).start()
    yield server
    server.stop()


class Recorder:
    """``busgate journal record`` as a child process, its state lines read as they come."""

    def __init__(self, directory: Path, url: str, *extra: str) -> None:
        self.directory = directory
        self.command = [*BUSGATE, "journal", "record", str(directory), "--bus", url, *extra]
        self.process: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []

    async def start(self) -> Recorder:
        self.process = await asyncio.create_subprocess_exec(
            *self.command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        return self

    async def line(self, starting: str, timeout: float = WAIT) -> str:
        """The next state line that starts with ``starting`` (others are kept in lines)."""
        assert self.process is not None and self.process.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    error = await self.stderr()
                    raise AssertionError(f"recorder ended: {self.lines} {error}")
                text = raw.decode().strip()
                self.lines.append(text)
                if text.startswith(starting):
                    return text

    async def stderr(self) -> str:
        assert self.process is not None and self.process.stderr is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                return (await self.process.stderr.read()).decode(errors="replace")
        return ""

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()  # SIGKILL: nothing flushed, no lease released

    async def stop(self) -> int:
        """SIGTERM and the exit status (SIGKILL after WAIT)."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(WAIT):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        return self.process.returncode or 0


@pytest.fixture
async def recorders() -> AsyncIterator[list[Recorder]]:
    made: list[Recorder] = []
    yield made
    for recorder in made:
        if recorder.process is not None and recorder.process.returncode is None:
            recorder.process.kill()
            await recorder.process.wait()


async def _recorder(made: list[Recorder], directory: Path, url: str, *extra: str) -> Recorder:
    recorder = await Recorder(directory, url, *extra).start()
    made.append(recorder)
    return recorder


class Traffic:
    """Confirmed events, and requests to an echo service, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.published: list[str] = []  # MIDs of confirmed events, in confirmation order
        self.requests = 0
        self.failures = 0  # publishes or requests that raised
        self.last_failure = "none"
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: list[Client] = []

    async def start(self) -> Traffic:
        publisher = await connect(self.url, "pub", backoff_initial=0.05, backoff_max=0.3)
        service = await connect(self.url, "svc", backoff_initial=0.05, backoff_max=0.3)
        self._clients = [publisher, service]
        group = await service.consume("rec")

        async def serve() -> None:
            async for request in group:
                await service.send(request.ack({"n": request.payload["n"]}))

        async def publish() -> None:
            n = 0
            while not self._stop.is_set():
                n += 1
                try:
                    await publisher.publish("sensor.n", {"n": n}, confirm=True)
                    self.published.append(str(n))
                    if n % 10 == 0:  # a request lost with a node is a failure, not a stall
                        await publisher.request("rec", "echo", {"n": n}, timeout=REQUEST_WAIT)
                        self.requests += 1
                except BusError as error:  # a cluster electing a stream leader: stored or
                    self.failures += 1  # not, the stream says (the checks compare with it)
                    self.last_failure = repr(error)
                await asyncio.sleep(0.002)

        self._tasks = [asyncio.create_task(serve()), asyncio.create_task(publish())]
        return self

    async def until(self, count: int) -> None:
        """Wait until ``count`` more events have been confirmed; fail if none is for ``WAIT``
        seconds (a loaded machine may confirm slowly, but never stop)."""
        loop = asyncio.get_running_loop()
        target = len(self.published) + count
        seen, since = len(self.published), loop.time()
        while len(self.published) < target:
            await asyncio.sleep(0.02)
            if len(self.published) > seen:
                seen, since = len(self.published), loop.time()
            assert loop.time() - since < WAIT, (
                f"no event confirmed for {WAIT:.0f} s ({seen} so far, {self.failures} failed,"
                f" the last with {self.last_failure})"
            )

    async def stop(self) -> None:
        self._stop.set()
        publisher = self._tasks[1]
        async with asyncio.timeout(WAIT):
            await publisher
        self._tasks[0].cancel()
        for client in self._clients:
            await client.close()


async def _stream_last(url: str, stream: str = "BUSGATE") -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().stream_info(stream)).state.last_seq)
    finally:
        await nc.close()


async def _acked(url: str, stream: str = "BUSGATE") -> int:
    """The stream sequence the recorder's consumer has acknowledged up to."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().consumer_info(stream, "busgate-bus-journal")
        return int(info.ack_floor.stream_seq) if info.ack_floor else 0
    finally:
        await nc.close()


async def _caught_up(directory: Path, last: int) -> None:
    """Wait until the journal holds stream event ``last``."""
    deadline = time.monotonic() + WAIT
    while (tail := await asyncio.to_thread(last_stream_seq, directory)) < last:
        assert time.monotonic() < deadline, f"the journal ends at stream event {tail} of {last}"
        await asyncio.sleep(0.1)


def _events(directory: Path) -> list[tuple[int, str]]:
    """(SEQ, payload n) of every event record, in journal order."""
    found = []
    for record in JournalReader(directory).records():
        message = decode_message(record.raw)
        if message.typ == "EVT":
            assert message.seq is not None, record
            found.append((message.seq, str(message.payload["n"])))
    return found


def _kinds(directory: Path) -> dict[str, set[str]]:
    """MIDs of the records by TYP."""
    kinds: dict[str, set[str]] = {}
    for record in JournalReader(directory).records():
        message = decode_message(record.raw)
        mids = kinds.setdefault(message.typ or "?", set())
        assert message.mid not in mids, f"{message.typ} {message.mid} journaled twice"
        mids.add(message.mid or "")
    return kinds


def _complete(directory: Path, last: int, published: list[str]) -> None:
    """The journal holds stream events 1..last, each once, in stream order, and among them
    every event whose publish was confirmed."""
    events = _events(directory)
    seqs = [seq for seq, _ in events]
    assert seqs == list(range(1, last + 1)), (seqs[:5], seqs[-5:], len(seqs), last)
    assert set(published) <= {n for _, n in events}


async def test_kill_9_mid_traffic_loses_no_event_and_journals_none_twice(
    js_server: NatsServer, tmp_path: Path, recorders: list[Recorder]
) -> None:
    journal = tmp_path / "journal"
    traffic = await Traffic(js_server.url).start()
    recorder = await _recorder(recorders, journal, js_server.url)
    await recorder.line("recording")
    kills = 4
    floors: list[int] = []
    for _ in range(kills):
        await traffic.until(150)  # published while it records
        await asyncio.sleep(0.05 * _)  # kill at a different point of the fetch cycle each time
        recorder.kill()
        await recorder.process.wait()  # type: ignore[union-attr]
        # JetStream was told of no event the journal does not hold
        acked = await _acked(js_server.url)
        assert acked <= await asyncio.to_thread(last_stream_seq, journal), acked
        floors.append(acked)
        await traffic.until(100)  # published while no recorder runs
        recorder = await _recorder(recorders, journal, js_server.url)
        await recorder.line("recording")
    await traffic.until(100)
    await traffic.stop()
    last = await _stream_last(js_server.url)
    assert last == len(traffic.published)
    await _caught_up(journal, last)
    assert await recorder.stop() == 0
    _complete(journal, last, traffic.published)
    assert verify_journal(journal).ok  # kill -9 leaves torn tails at most, never damage
    kinds = _kinds(journal)
    # only bus messages: events, requests and their answers (no JetStream PubAcks, no statuses)
    assert set(kinds) == {"EVT", "RQS", "ACK"}, set(kinds)
    assert 0 < len(kinds["RQS"]) <= traffic.requests  # at most once: some fell between runs
    assert max(floors) > 0  # and it was told (a round killed within 1 s may have told none)
    print(f"\n{kills} kills: {last} events, {len(kinds['RQS'])}/{traffic.requests} requests")


async def test_a_standby_on_the_same_directory_takes_over_within_seconds(
    js_server: NatsServer, tmp_path: Path, recorders: list[Recorder]
) -> None:
    journal = tmp_path / "journal"
    traffic = await Traffic(js_server.url).start()
    active = await _recorder(recorders, journal, js_server.url, "--fsync", "always")
    await active.line("recording")
    standby = await _recorder(recorders, journal, js_server.url, "--fsync", "always")
    line = await standby.line("standby")
    assert str(journal) in line and "being written" in line, line
    await traffic.until(200)
    active.kill()
    killed = time.monotonic()
    line = await standby.line("recording")
    took = time.monotonic() - killed
    assert "took over" in line, line
    assert took < 5.0 + 5.0, took  # the lease's 5 s, and a loaded machine's slack
    await traffic.until(200)
    await traffic.stop()
    last = await _stream_last(js_server.url)
    await _caught_up(journal, last)
    assert await standby.stop() == 0
    _complete(journal, last, traffic.published)
    print(f"\ntakeover after kill -9: {took:.2f} s")


async def test_a_standby_with_its_own_directory_catches_up_and_so_does_the_old_one(
    js_server: NatsServer, tmp_path: Path, recorders: list[Recorder]
) -> None:
    # Two machines, two disks: each journal holds the stream from its first event on, each
    # event once; the one that was away catches up from its own tail when it takes over.
    first, second = tmp_path / "a", tmp_path / "b"
    traffic = await Traffic(js_server.url).start()
    a = await _recorder(recorders, first, js_server.url, "--fsync", "none")
    await a.line("recording")
    b = await _recorder(recorders, second, js_server.url, "--fsync", "none")
    line = await b.line("standby")
    assert "records bus.journal" in line and str(first) in line, line
    await traffic.until(200)
    before = len(traffic.published)  # stored before the kill, journaled by b after it
    a.kill()
    killed = time.time()
    await b.line("recording")
    await traffic.until(200)
    a = await _recorder(recorders, first, js_server.url)
    await a.line("standby")  # b holds the lease now
    assert await b.stop() == 0  # a clean stop hands the lease on at once
    await a.line("recording")
    await traffic.stop()
    last = await _stream_last(js_server.url)
    await _caught_up(first, last)
    assert await a.stop() == 0
    _complete(first, last, traffic.published)
    events = _events(second)
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert len(events) > 200  # from the stream's first event, then live
    # a record's time is when the stream stored the event, not when a recorder caught up
    stamps = [
        record.ts
        for record in JournalReader(second).records()
        if (decode_message(record.raw).seq or before + 1) <= before
    ]
    assert len(stamps) == before and max(stamps) < killed, (max(stamps), killed)


async def test_a_recorder_that_was_frozen_past_its_lease_writes_nothing_more(
    js_server: NatsServer, tmp_path: Path, recorders: list[Recorder]
) -> None:
    # Split brain: the active recorder stops (SIGSTOP: a long pause, a VM frozen) while its
    # lease runs out; the standby takes over; the old one wakes up and must not write on.
    first, second = tmp_path / "a", tmp_path / "b"
    traffic = await Traffic(js_server.url).start()
    a = await _recorder(recorders, first, js_server.url)
    await a.line("recording")
    b = await _recorder(recorders, second, js_server.url)
    await b.line("standby")
    await traffic.until(100)
    assert a.process is not None
    a.process.send_signal(signal.SIGSTOP)
    try:
        await b.line("recording")
        frozen = [(r.path, r.offset) for r in JournalReader(first).records()]
    finally:
        a.process.send_signal(signal.SIGCONT)
    line = await a.line("standby")
    assert "lost" in line or "records bus.journal" in line, line
    await traffic.until(300)
    assert [(r.path, r.offset) for r in JournalReader(first).records()] == frozen
    await traffic.stop()
    last = await _stream_last(js_server.url)
    await _caught_up(second, last)
    assert await b.stop() == 0
    _complete(second, last, traffic.published)
    events = _events(first)  # what a wrote before it froze: a gapless prefix of the stream
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))


async def test_a_new_journal_begins_where_since_says(
    js_server: NatsServer, tmp_path: Path, recorders: list[Recorder]
) -> None:
    client = await connect(js_server.url, "pub")
    try:
        for n in range(1, 11):
            await client.publish("sensor.n", {"n": n}, confirm=True)
    finally:
        await client.close()
    journal = tmp_path / "journal"
    recorder = await _recorder(recorders, journal, js_server.url, "--since", "6")
    await recorder.line("recording")
    await _caught_up(journal, 10)
    assert await recorder.stop() == 0
    assert [seq for seq, _ in _events(journal)] == [7, 8, 9, 10]
    # once the journal holds stream events, --since no longer counts: it resumes at its tail
    recorder = await _recorder(recorders, journal, js_server.url, "--since", "2")
    await recorder.line("recording")
    assert await recorder.stop() == 0
    assert [seq for seq, _ in _events(journal)] == [7, 8, 9, 10]


async def test_the_recorder_rides_out_the_loss_of_its_node_and_of_the_stream_leader(
    nats_cluster: NatsCluster, tmp_path: Path, recorders: list[Recorder]
) -> None:
    query = "?stream=RECORDED&prefix=rec"
    nc = await nats.connect(nats_cluster.url.split(","))
    try:  # the stream in three copies, as a cluster deployment makes it
        config = stream_config("RECORDED", "rec")
        config.num_replicas = 3
        await nc.jetstream().add_stream(config)
    finally:
        await nc.close()
    journal = tmp_path / "journal"
    recorder = await _recorder(recorders, journal, nats_cluster.url + query)
    await recorder.line("recording")
    traffic = await Traffic(nats_cluster.url + query).start()
    await traffic.until(200)
    # first the node the recorder is connected to, then the one leading the stream
    for pick in (_recorders_node, lambda cluster: cluster.stream_leader("RECORDED")):
        lost = pick(nats_cluster)
        assert lost >= 0
        nats_cluster.kill(lost)
        try:
            await traffic.until(300)
        finally:
            nats_cluster.restart(lost)
            await asyncio.to_thread(nats_cluster.wait_healthy)
    await traffic.stop()
    last = await _stream_last(nats_cluster.url.split(",")[0], "RECORDED")
    await _caught_up(journal, last)
    assert await recorder.stop() == 0
    _complete(journal, last, traffic.published)
    print(f"\ncluster: {last} events journaled, {traffic.failures} publishes failed over")


def _recorders_node(cluster: NatsCluster) -> int:
    return next(i for i, node in enumerate(cluster.nodes) if _serves_recorder(node))


def _serves_recorder(node: NatsNode) -> bool:
    _, body = node.monitor("/connz")
    return any(c.get("name") == "busgate-journal" for c in body.get("connections") or [])
