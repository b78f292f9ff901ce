"""tests/leaks.py: a module that leaves a nats-server running fails, and the server is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.leaks import OWNER_ENV, nats_servers_left
from tests.nats_cluster import NATS_SERVER

ROOT = Path(__file__).resolve().parent.parent


def _nats(env: dict[str, str]) -> subprocess.Popen[bytes]:
    # -p -1: a random free port
    return subprocess.Popen(
        [NATS_SERVER, "-a", "127.0.0.1", "-p", "-1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_only_the_nats_servers_this_process_started_are_counted() -> None:
    ours = _nats(dict(os.environ))
    theirs = _nats({**os.environ, OWNER_ENV: "someone-else"})
    try:
        left = nats_servers_left()
        assert ours.pid in left and NATS_SERVER in left[ours.pid]
        assert theirs.pid not in left
    finally:
        for process in (ours, theirs):
            process.kill()
            process.wait(10)
    assert ours.pid not in nats_servers_left()


def test_a_module_that_leaves_a_nats_server_running_fails_naming_it(tmp_path: Path) -> None:
    start = (
        "import subprocess\n"
        "from tests.leaks import no_nats_server_left\n"
        "from tests.nats_cluster import NATS_SERVER\n"
        "ARGV = [NATS_SERVER, '-a', '127.0.0.1', '-p', '-1']\n"
    )
    (tmp_path / "test_leaky.py").write_text(
        start + "def test_leaky():\n    subprocess.Popen(ARGV)\n", encoding="utf-8"
    )
    (tmp_path / "test_tidy.py").write_text(
        start
        + textwrap.dedent(
            """
            def test_tidy():
                server = subprocess.Popen(ARGV)
                server.terminate()
                server.wait(10)
            """
        ),
        encoding="utf-8",
    )
    # no third-party plugins: the inner run needs none, and loading them is most of its time
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop(OWNER_ENV)  # the inner run marks its own
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-c", os.devnull, "--rootdir", str(tmp_path), "test_leaky.py", "test_tidy.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed, 1 error" in done.stdout, done.stdout
    assert "ERROR at teardown of test_leaky" in done.stdout, done.stdout
    said = "this module left nats-server running (now killed): pid "
    assert said in done.stdout, done.stdout
    pid = int(done.stdout.split(said, 1)[1].split(":", 1)[0])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_test_process_ended_by_sigterm_takes_its_nats_servers_with_it(tmp_path: Path) -> None:
    """``kill`` of a test process runs no fixture teardown: its nats-servers went on running."""
    pids = tmp_path / "pids"
    (tmp_path / "test_killed.py").write_text(
        textwrap.dedent(
            f"""
            import os, signal, subprocess
            import tests.leaks
            from tests.nats_cluster import NATS_SERVER

            def test_killed():
                server = subprocess.Popen([NATS_SERVER, "-a", "127.0.0.1", "-p", "-1"])
                with open({str(pids)!r}, "w") as out:
                    out.write(str(server.pid))
                os.kill(os.getpid(), signal.SIGTERM)
            """
        ),
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop(OWNER_ENV)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
         "--rootdir", str(tmp_path), "test_killed.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGTERM, done.stdout + done.stderr
    server = psutil.Process(int(pids.read_text()))  # its parent is gone: no longer our child
    deadline = time.monotonic() + 30
    try:
        while server.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                server.kill()
                pytest.fail("the test process ended by SIGTERM left its nats-server running")
            time.sleep(0.1)
    except psutil.NoSuchProcess:
        pass  # gone, and reaped already
