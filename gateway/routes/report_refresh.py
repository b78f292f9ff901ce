"""The report rebuilt through a resident Spark when ``GET /v1/reports`` is asked (PROTOCOL.md 9,
``GET /v1/reports``).

With ``report_journal``, ``report_dir`` and ``spark_remote`` set (``busgate run --spark`` sets
them), ``GET /v1/reports`` first rebuilds the report in ``report_dir`` when the journal was
written since the last one: ``busgate report --remote URL --journal J --until NOW --out DIR`` in
a process of its own (a thin Spark Connect client: seconds, not a cold Spark). One build at a
time: callers that ask meanwhile wait for it; at most one build per :data:`MIN_INTERVAL`. A
build that fails keeps the last report served and says why in one line (``error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Final

from bus.journal.segments import list_segments

__all__ = ["BUILD_TIMEOUT", "MIN_INTERVAL", "ReportRefresher"]

#: Seconds between two builds at least (the console asks every 10 s).
MIN_INTERVAL: Final = 5.0
#: Seconds a build may take before it is stopped (a warm server takes a few).
BUILD_TIMEOUT: Final = 300.0
_CLI: Final = ("-c", "from bus.cli import run; run()")  # the busgate program, as its script


class ReportRefresher:
    """Rebuilds ``out`` from ``journal`` through the Spark Connect server at ``remote``.

    Args:
        journal: the broker's journal directory.
        out: the report directory the gateway serves.
        remote: ``sc://HOST:PORT``.
        min_interval: seconds between two builds at least.
        timeout: seconds a build may take.
    """

    def __init__(
        self,
        journal: str,
        out: str,
        remote: str,
        *,
        min_interval: float = MIN_INTERVAL,
        timeout: float = BUILD_TIMEOUT,
    ) -> None:
        # absolute: the server resolves the journal's path, in its own working directory
        self.journal = str(Path(journal).resolve())
        self.out = str(Path(out).resolve())
        self.remote = remote
        self.min_interval = min_interval
        self.timeout = timeout
        #: The end (excluded, epoch seconds) of the last report built here (None: none yet).
        self.until: float | None = None
        #: Why the last build failed (None: it did not).
        self.error: str | None = None
        self._started = float("-inf")
        self._lock = asyncio.Lock()

    def stale(self, now: float) -> bool:
        """Whether a build is due: the journal was written after the last report's end, and
        the last build started :attr:`min_interval` ago or more."""
        if now - self._started < self.min_interval:
            return False
        segments = list_segments(self.journal)
        if not segments:
            return False
        written = max(_mtime(path) for path in segments)
        return self.until is None or written >= self.until

    async def refresh(self) -> None:
        """Build the report if :meth:`stale` (waiting for a build already under way)."""
        async with self._lock:
            now = time.time()
            if not self.stale(now):
                return
            self._started = now
            self.error = await self._build(now)
            if self.error is None:
                self.until = now

    async def _build(self, until: float) -> str | None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *_CLI,
            "report",
            "--remote",
            self.remote,
            "--journal",
            self.journal,
            "--until",
            repr(until),
            "--out",
            self.out,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return f"the report took more than {self.timeout:g} s through {self.remote}"
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        if proc.returncode == 0:
            return None
        lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1] if lines else f"busgate report exited with {proc.returncode}"


def _mtime(path: str | Path) -> float:
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return 0.0
