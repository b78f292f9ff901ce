"""nats-server processes a test module leaves running: found, stopped, and the module fails.

Every test process marks its environment with :data:`OWNER_ENV` (a value of its own), which
each process it starts inherits, and the processes those start: a ``nats-server`` started by a
fixture, a bench run as a subprocess or a ``NatsCluster`` node carries the mark even after the
process that started it died. At the end of each module, a ``nats-server`` still running with
this process's mark that the module did not find running at its start, and that is not the
session's shared ``nats_server``, was leaked by the module: it is killed (so the leak stops
there) and the module's last test fails, naming each with its command line.

Other people's nats-servers on the same machine (a bench, another checkout's tests) carry no
mark, or another value, and are left alone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psutil
import pytest

__all__ = ["OWNER_ENV", "nats_servers_left", "no_nats_server_left"]

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
