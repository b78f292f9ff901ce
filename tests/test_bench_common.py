"""``bench/_common.py``: each bench run keeps its servers' logs in a directory of its own.

All runs once wrote ``/tmp/busgate-bench-<role>.log``: two runs at once (or a test's bench beside
``make bench``) wrote over each other's logs, and a server started twice in one run kept only
its last start's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench._common import LOGS_ENV

ROOT = Path(__file__).resolve().parents[1]

# One bench run: the same role started twice, each printing its run's tag.
RUN = """
import sys
from bench._common import started
for n in (1, 2):
    say = f"print('{sys.argv[1]} start {n}')"
    with started("echo server", [sys.executable, "-c", say]) as proc:
        assert proc.process.wait(60) == 0
"""


def _runs(*envs: dict[str, str]) -> list[str]:
    """Run :data:`RUN` once per environment, all at the same time; their stderr."""
    base = {k: v for k, v in os.environ.items() if k != LOGS_ENV}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN, f"run{i}"],
            cwd=ROOT,
            env={**base, **env},
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, env in enumerate(envs)
    ]
    errs = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        errs.append(err)
    return errs


def _logs_dir(stderr: str) -> Path:
    lines = [line for line in stderr.splitlines() if line.startswith("bench logs: ")]
    assert len(lines) == 1, stderr  # said once, where the run starts using it
    return Path(lines[0].removeprefix("bench logs: "))


def test_runs_at_once_keep_their_own_logs_and_every_start_of_a_server(tmp_path: Path) -> None:
    chosen = tmp_path / "chosen" / "logs"
    errs = _runs({"TMPDIR": str(tmp_path)}, {"TMPDIR": str(tmp_path)}, {LOGS_ENV: str(chosen)})
    dirs = [_logs_dir(err) for err in errs]
    assert len(set(dirs)) == 3, dirs
    assert dirs[0].parent == dirs[1].parent == tmp_path  # under TMPDIR, each its own
    assert dirs[2] == chosen  # made when missing
    for i, directory in enumerate(dirs):
        assert sorted(p.name for p in directory.iterdir()) == [
            "echo-server-2.log",
            "echo-server.log",
        ]
        assert (directory / "echo-server.log").read_text() == f"run{i} start 1\n"
        assert (directory / "echo-server-2.log").read_text() == f"run{i} start 2\n"
