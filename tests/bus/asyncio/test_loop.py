"""The event loop of the command-line programs (bus/loop.py): uvloop unless told otherwise."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from bus.asyncio.loop import EVENT_LOOP_VARIABLE, loop_factory, run


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
