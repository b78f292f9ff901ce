"""The event loop of the command-line programs (bus/loop.py): uvloop unless told otherwise."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from bus.asyncio.loop import EVENT_LOOP_VARIABLE, loop_factory, run, until_tick


def test_uvloop_is_taken_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.delenv(EVENT_LOOP_VARIABLE, raising=False)
    assert loop_factory() is uvloop.new_event_loop


def test_the_standard_loop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_VARIABLE, "asyncio")
    assert loop_factory() is None


def test_run_runs_the_coroutine_on_the_chosen_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")

    async def main() -> str:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.delenv(EVENT_LOOP_VARIABLE, raising=False)
    assert run(main()).startswith("uvloop")
    monkeypatch.setenv(EVENT_LOOP_VARIABLE, "asyncio")
    assert run(main()).startswith("asyncio")


@pytest.mark.parametrize("name", ["asyncio", "uvloop"])
def test_chores_that_sleep_until_the_tick_wake_together(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An idle gateway worker woke for each periodic chore on its own (5-6 times a second):
    # started at different moments, chores of periods 1 s and 0.5 s now fall due at once.
    monkeypatch.setenv(EVENT_LOOP_VARIABLE, name)

    async def chore(start: float, period: float, woke: list[float]) -> None:
        await asyncio.sleep(start)
        delay = until_tick(period)
        assert 0 < delay <= period
        await asyncio.sleep(delay)
        woke.append(asyncio.get_running_loop().time())

    async def main() -> list[float]:
        woke: list[float] = []
        await asyncio.sleep(until_tick(1.0))  # a second of its own ahead for each chore
        await asyncio.gather(chore(0.1, 1.0, woke), chore(0.6, 0.5, woke), chore(0.4, 1.0, woke))
        return woke

    woke = run(main())
    assert max(woke) - min(woke) < 0.002  # one instant: one wake-up of the process


def test_settle_heap_takes_the_start_up_heap_out_of_full_collections() -> None:
    """After start-up a full collection walks only what was made since (in a subprocess: the
    test process's own heap stays as it is)."""
    script = (
        "import gc, json\n"
        "import gateway.app, bus.broker\n"  # what a gateway or a broker holds after start-up
        "from bus.asyncio.loop import settle_heap\n"
        "before = len(gc.get_objects())\n"
        "frozen = settle_heap()\n"
        "print(json.dumps([before, frozen, len(gc.get_objects())]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    before, frozen, walked = json.loads(done.stdout)
    assert frozen >= before * 0.9  # the start-up objects are frozen
    assert walked < before / 20  # and a full pass no longer walks them


_TLS_ECHO = """
import asyncio, json, resource, ssl, sys
import trustme
from bus.asyncio.loop import run

async def main():
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    loop = asyncio.get_running_loop()
    answers = asyncio.Queue()

    class Reader(asyncio.Protocol):
        def data_received(self, data):
            answers.put_nowait(data)

    listener = await loop.create_server(Echo, "127.0.0.1", 0, ssl=server)
    port = listener.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(Reader, "127.0.0.1", port, ssl=client)
    for _ in range(50):  # warm up: buffers and pools as a running program has them
        transport.write(b"x" * 100)
        await answers.get()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(500):
        transport.write(b"x" * 100)
        await answers.get()
    print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 500))
    transport.close()
    listener.close()

run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_tls_read_takes_no_fresh_memory_from_the_kernel() -> None:
    """run() keeps each TLS read's 256 KiB buffer in the heap (tune_allocator): a TLS round
    trip on uvloop costs no page fault. Left to glibc's defaults (a GLIBC_TUNABLES setting of
    the user's turns the tuning off), every read maps, faults and unmaps a fresh block."""
    pytest.importorskip("uvloop")

    def faults_per_round_trip(**environment: str) -> float:
        env = {**os.environ, EVENT_LOOP_VARIABLE: "uvloop", **environment}
        done = subprocess.run(
            [sys.executable, "-c", _TLS_ECHO],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=env,
        )
        return float(done.stdout)

    assert faults_per_round_trip() < 0.1
    assert faults_per_round_trip(GLIBC_TUNABLES="glibc.malloc.check=0") >= 1
