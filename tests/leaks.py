"""nats-server processes a test module leaves running: found, stopped, and the module fails.

Every test process marks its environment with :data:`OWNER_ENV` (a value of its own), which
each process it starts inherits, and the processes those start: a ``nats-server`` started by a
fixture, a bench run as a subprocess or a ``NatsCluster`` node carries the mark even after the
process that started it died. At the end of each module, a ``nats-server`` still running with
this process's mark that the module did not find running at its start, and that is not the
session's shared ``nats_server``, was leaked by the module: it is killed (so the leak stops
there) and the module's last test fails, naming each with its command line.

A test process that ends before its fixtures' teardown (``kill PID``: SIGTERM; a crash that
still runs ``atexit``) kills the marked nats-servers still running as it goes: before, a killed
worker left the session's ``nats_server`` running for good.

Other people's nats-servers on the same machine (a bench, another checkout's tests) carry no
mark, or another value, and are left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from types import FrameType

import psutil
import pytest

__all__ = ["OWNER_ENV", "kill_nats_servers_left", "nats_servers_left", "no_nats_server_left"]

#: The environment variable that marks the processes a test process started, and theirs.
OWNER_ENV = "BUSGATE_TESTS_OWNER"
_OWNER = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
os.environ[OWNER_ENV] = _OWNER

#: pids of nats-servers that outlive a module on purpose (the session's ``nats_server``).
SESSION_WIDE: set[int] = set()


def nats_servers_left() -> dict[int, str]:
    """The running ``nats-server`` processes this test process started (directly or not):
    pid -> command line."""
    found: dict[int, str] = {}
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "nats-server":
            continue
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(OWNER_ENV) == _OWNER:
                found[process.pid] = " ".join(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def kill_nats_servers_left() -> None:
    """Kill every nats-server this process started that still runs (at exit, on SIGTERM)."""
    for pid in nats_servers_left():
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    kill_nats_servers_left()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # and end as SIGTERM ends a process


atexit.register(kill_nats_servers_left)
if (
    threading.current_thread() is threading.main_thread()
    and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
):
    signal.signal(signal.SIGTERM, _on_sigterm)


@pytest.fixture(scope="module", autouse=True)
def no_nats_server_left() -> Iterator[None]:
    """Fails a module that leaves a nats-server it started running (see the module doc)."""
    before = set(nats_servers_left())
    yield
    left = {
        pid: command
        for pid, command in nats_servers_left().items()
        if pid not in before and pid not in SESSION_WIDE
    }
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    if left:
        named = "; ".join(f"pid {pid}: {command}" for pid, command in sorted(left.items()))
        pytest.fail(f"this module left nats-server running (now killed): {named}")
