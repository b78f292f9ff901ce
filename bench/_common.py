"""What the benchmarks share: processes started side by side, CPU accounting, wrk.

Every measured server runs in its own process (as users run them), all of them up at once; the
load comes from ``wrk`` (HTTP: C, one thread) or from Python driver processes (bus level), never
from a loop inside this process. Each row says how much CPU every process spent per operation
(user + system, from ``/proc`` via psutil, children included) and on which cores the processes
were allowed to run, so a ratio can be read with the machine in mind.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psutil

__all__ = [
    "BUSGATE",
    "HERE",
    "LOGS_ENV",
    "NATS_SERVER",
    "Proc",
    "WRK",
    "WrkResult",
    "cpu_seconds",
    "free_port",
    "parse_wrk",
    "placement",
    "post_script",
    "run_file",
    "started",
    "wait_port",
    "wrk",
]

HERE: Final = Path(__file__).parent
BUSGATE: Final = str(Path(sys.executable).with_name("busgate"))
NATS_SERVER: Final = shutil.which("nats-server") or "/usr/sbin/nats-server"
WRK: Final = shutil.which("wrk") or "/usr/bin/wrk"


#: A directory for this run's logs and scratch files (made when missing); unset, each run makes
#: its own under the temp directory (``TMPDIR``), so two runs at once never share a file.
LOGS_ENV: Final = "BUSGATE_BENCH_LOGS"
_run_dir: Path | None = None
_taken: set[str] = set()


def run_file(name: str) -> Path:
    """A path for ``name`` in this run's own directory (see :data:`LOGS_ENV`), which is made, and
    printed on stderr, at the first call. A name asked for again gets a new path (``-2``, ...):
    the log of a server started twice in one run keeps both starts."""
    global _run_dir
    if _run_dir is None:
        chosen = os.environ.get(LOGS_ENV)
        if chosen:
            Path(chosen).mkdir(parents=True, exist_ok=True)
        _run_dir = Path(chosen or tempfile.mkdtemp(prefix="busgate-bench-"))
        print(f"bench logs: {_run_dir}", file=sys.stderr, flush=True)
    stem, dot, suffix = name.partition(".")
    unique, n = name, 1
    while unique in _taken:
        n += 1
        unique = f"{stem}-{n}{dot}{suffix}"
    _taken.add(unique)
    return _run_dir / unique


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    """Wait until something listens on ``127.0.0.1:port``."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on port {port} after {timeout:g} s")
        time.sleep(0.05)


@dataclass
class Proc:
    """A started process and its role in a row."""

    role: str
    process: subprocess.Popen[bytes]
    log: Path | None = None
    extra: list[int] = field(default_factory=list)  # more pids counted as this role

    def cpu(self) -> float:
        """CPU seconds spent so far by the process and its children."""
        return cpu_seconds(self.process.pid, self.extra)


def cpu_seconds(pid: int, extra: Sequence[int] = ()) -> float:
    """User + system CPU seconds of a process, its children and ``extra`` pids."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    procs += [psutil.Process(p) for p in extra if psutil.pid_exists(p)]
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@contextmanager
def started(
    role: str, command: Sequence[str], *, env: dict[str, str] | None = None, port: int = 0
) -> Iterator[Proc]:
    """Start a process (its output in a log file), wait for ``port``, stop it at the end."""
    log = run_file(f"{role.replace(' ', '-').replace('/', '-')}.log")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=HERE,
        )
    try:
        if port:
            wait_port(port)
        yield Proc(role, process, log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def placement(procs: Sequence[Proc]) -> str:
    """Where the processes may run: the cores each is allowed on, and whether any is pinned."""
    cores = os.cpu_count() or 1
    seen = set()
    for proc in procs:
        try:
            seen.add(tuple(sorted(os.sched_getaffinity(proc.process.pid))))
        except OSError:
            continue
    allowed = ", ".join("{" + ",".join(map(str, c)) + "}" for c in sorted(seen)) or "all"
    pinned = "no process pinned" if all(len(c) == cores for c in seen) else "pinned as shown"
    return f"{cores} cores; processes allowed on {allowed} ({pinned}; the kernel places them)"


@dataclass(frozen=True)
class WrkResult:
    """One wrk run."""

    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


_UNITS: Final = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(out: str, seconds: float) -> WrkResult:
    """What ``wrk --latency`` printed, as numbers (errors: non-2xx answers and socket errors)."""
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    # The latency distribution's own lines: "85.50%" in the thread stats above is not one.
    p50 = _ms(re.search(r"^\s*50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s*99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    errors = 0
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        errors += int(non2xx.group(1))
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    if socket_errors:
        errors += sum(int(n) for n in socket_errors.groups())
    return WrkResult(requests, seconds, rps, p50, p99, errors)


def post_script(body: bytes) -> str:
    """A wrk Lua script that POSTs ``body`` as JSON (written to the temp directory)."""
    if b"'" in body or b"\\" in body:
        raise ValueError("the body goes into a Lua string: no quotes or backslashes")
    path = run_file("post.lua")
    path.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = '{body.decode()}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    return str(path)


def wrk(
    url: str, *, connections: int, seconds: float, body: bytes | None = None
) -> tuple[WrkResult, float]:
    """Run ``wrk -t1`` (POST ``body`` when given); its result and the CPU seconds wrk spent."""
    command = [WRK, "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency"]
    if body is not None:
        command += ["-s", post_script(body)]
    out_path = run_file("wrk.out")
    with open(out_path, "w") as out:
        process = subprocess.Popen([*command, url], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    text = out_path.read_text()
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed: {text}")
    return parse_wrk(text, seconds), usage.ru_utime + usage.ru_stime
