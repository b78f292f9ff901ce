"""``gateway/process/quiet_server.py``: uvicorn's main loop woken once a second, yet stopped at
once when asked (from the loop or from another thread), and the date header still refreshed
at each wake-up; on both loops."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvicorn

from gateway.process import quiet_server
from gateway.process.quiet_server import QuietServer

pytestmark = pytest.mark.loops


async def _app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("no request is made")


def _server() -> QuietServer:
    config = uvicorn.Config(_app, log_level="warning")
    config.load()
    return QuietServer(config)


@pytest.mark.parametrize("where", ["loop", "thread"])
async def test_asking_to_exit_wakes_the_main_loop_at_once(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.setattr(quiet_server, "TICK_S", 3600.0)  # only the request can end the wait
    server = _server()
    running = asyncio.create_task(server.main_loop())
    await asyncio.sleep(0)  # it is waiting now
    assert not running.done() and not server.should_exit
    if where == "loop":
        server.should_exit = True
    else:  # a signal handler's or a test's thread
        threading.Thread(target=setattr, args=(server, "should_exit", True)).start()
    async with asyncio.timeout(30):
        await running
    assert server.should_exit


async def test_each_wake_up_refreshes_the_date_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quiet_server, "TICK_S", 0.01)
    server = _server()
    server.server_state.default_headers = []
    counters: list[int] = []
    on_tick = server.on_tick

    async def counting(counter: int) -> bool:
        counters.append(counter)
        return await on_tick(counter) or len(counters) >= 3

    monkeypatch.setattr(server, "on_tick", counting)
    async with asyncio.timeout(30):
        await server.main_loop()
    assert all(counter % 10 == 0 for counter in counters)  # uvicorn's once-a-second refresh
    assert [name for name, _ in server.server_state.default_headers] == [b"date", b"server"]
