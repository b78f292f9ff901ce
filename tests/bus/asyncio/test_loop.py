"""The event loop of the command-line programs (bus/loop.py): uvloop unless told otherwise."""

from __future__ import annotations

import asyncio

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
