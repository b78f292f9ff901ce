"""``busgate run --spark``: a resident Spark Connect server beside the stack.

Starts ``busgate spark serve --port PORT`` (``--spark-port``; 0, the default, a free one) as a
process of its own (its JVM must not share the stack's process), waits until it serves and warmed
up, and stops it with the stack (SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT`). The gateway
then rebuilds its report through it (``spark_remote``, ``report_journal``; see
``gateway.routes.report_refresh``), so the console's report page refreshes in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections import deque
from typing import Final

from bus.cli.run_options import Running, bind_port, connect_host
from bus.errors import ConfigError

__all__ = ["READY_TIMEOUT", "STOP_TIMEOUT", "start_spark"]

#: Seconds a cold Spark Connect server may take to serve (about 15 s on an idle 2-core host).
READY_TIMEOUT: Final = 300.0
#: Seconds it has to stop after SIGTERM before it is killed.
STOP_TIMEOUT: Final = 60.0
_CLI: Final = ("-c", "import sys; from bus.cli import main; sys.exit(main())")


async def start_spark(host: str, port: int, running: Running) -> str:
    """Start the server on ``host:port`` (0: a free port); add its stop to ``running``.

    Returns:
        Its ``sc://`` URL, once it serves.

    Raises:
        ConfigError: the port is taken, or the server did not start (with its last words).
    """
    # Spark cannot bind port 0: find a free one (or refuse a taken one) the way the others do
    with contextlib.closing(bind_port(host, port, "--spark-port")) as sock:
        port = sock.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *_CLI,
        "spark",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # Ctrl-C reaches the stack, which stops it in order
    )
    assert proc.stderr is not None
    said: deque[str] = deque(maxlen=20)  # its log is drained (a full pipe would stall it)
    drain = asyncio.create_task(_drain(proc.stderr, said), name="spark-log")
    running.stoppers.append(functools.partial(_stop, proc, drain))
    url = f"sc://{connect_host(host)}:{port}"
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT)
    except TimeoutError:
        raise ConfigError(
            f"the Spark Connect server did not start within {READY_TIMEOUT:g} s"
        ) from None
    if b"listening on" not in line:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(drain), STOP_TIMEOUT)
        err = said[-1] if said else f"it exited with {proc.returncode}"
        raise ConfigError(f"the Spark Connect server did not start: {err}")
    return url


async def _drain(stream: asyncio.StreamReader, said: deque[str]) -> None:
    """Read the server's log to its end, keeping its last lines."""
    while line := await stream.readline():
        text = line.decode("utf-8", "replace").strip()
        if text:
            said.append(text)


async def _stop(proc: asyncio.subprocess.Process, drain: asyncio.Task[None]) -> None:
    """SIGTERM, then SIGKILL to its whole process group (the JVM with it)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    # whatever it started (the JVM) goes with it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    drain.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await drain
