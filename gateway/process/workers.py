"""Several gateway processes on one listening socket: ``busgate gateway --workers N``.

The gateway is stateless towards its clients (``README``: several gateways behind a balancer
form one service), so a machine's cores can serve HTTP by running N of them on the same socket:
the kernel hands each new connection to one of them. Each worker is a fresh interpreter
(``spawn``, as uvicorn's own ``--workers``) with its own bus link, event loop and counters; the
parent only binds the socket, starts the workers, restarts one that dies, and on SIGINT or
SIGTERM asks each to drain (SIGTERM) before it exits. It sleeps until one of those happens (a
worker's exit or a signal wakes it; it polls nothing: an idle gateway's parent costs no CPU).
A parent killed outright cannot stop its workers: they see it gone at once (a pidfd of it in
their loop) and drain and exit by themselves.

Per worker, not per gateway: ``/metrics`` and ``/v1/stats`` (each answers for its own process),
and the ``Last-Event-ID`` replay buffer of SSE streams (as between gateways).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Iterator, MutableSequence
from multiprocessing.connection import wait
from multiprocessing.context import SpawnProcess
from types import FrameType
from typing import Final

from bus.asyncio.listen import listen_socket as bind
from bus.errors import ConfigError
from gateway.process.readiness import WorkerReadiness
from gateway.process.settings import GatewaySettings

__all__ = ["MAX_WORKERS", "Workers", "listen_socket"]

log = logging.getLogger("busgate.gateway")

#: More workers than this is a typo, not a plan.
MAX_WORKERS: Final = 64
#: A worker that dies sooner than this after its start is not restarted again and again.
_QUICK_DEATH: Final = 2.0


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket for the workers (see :func:`bus.asyncio.listen.listen_socket`).

    Raises:
        ConfigError: the address cannot be bound.
    """
    try:
        return bind(host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def _worker_main(
    settings: GatewaySettings,
    sock: socket.socket,
    log_level: str,
    supervisor: int,
    flags: MutableSequence[int],
    index: int,
) -> None:
    """One worker: the gateway on the inherited socket, until SIGTERM or until ``supervisor``
    (the parent's pid, from the parent: one read here could already be init's) is gone (runs in
    the child). ``flags[index]`` is its readiness (:mod:`gateway.process.readiness`)."""
    from bus.asyncio.loop import run  # noqa: PLC0415  (the child imports what it needs)
    from gateway.process.server import serve  # noqa: PLC0415

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which says SIGTERM
    readiness = WorkerReadiness(flags, index)
    run(serve(settings, log_level, sock=sock, parent=supervisor, readiness=readiness))


class Workers:
    """N worker processes serving one socket.

    Args:
        settings: every worker's settings (its own bus link each).
        sock: the listening socket (see :func:`listen_socket`).
        count: how many workers, 1..:data:`MAX_WORKERS`.
        log_level: the workers' log level.

    Raises:
        ConfigError: ``count`` out of range.
    """

    def __init__(
        self, settings: GatewaySettings, sock: socket.socket, count: int, log_level: str
    ) -> None:
        if not 1 <= count <= MAX_WORKERS:
            raise ConfigError(f"--workers must be 1..{MAX_WORKERS}, not {count}")
        self.settings = settings
        self.sock = sock
        self.count = count
        self.log_level = log_level
        self._context = multiprocessing.get_context("spawn")
        #: one readiness flag per worker, shared with them (``/readyz`` counts them)
        self.flags: MutableSequence[int] = self._context.RawArray("b", count)
        self._processes: list[SpawnProcess] = []
        self._started: dict[int, float] = {}
        self._stopping = False

    def start(self) -> None:
        """Start every worker."""
        for index in range(self.count):
            self._processes.append(self._spawn(index))

    def _spawn(self, index: int) -> SpawnProcess:
        self.flags[index] = 0  # a worker that died could not clear its own flag
        process = self._context.Process(
            target=_worker_main,
            args=(self.settings, self.sock, self.log_level, os.getpid(), self.flags, index),
            name="busgate-gateway-worker",
            daemon=False,
        )
        process.start()
        assert process.pid is not None
        self._started[process.pid] = time.monotonic()
        return process

    @property
    def pids(self) -> list[int]:
        """The running workers' process ids."""
        return [p.pid for p in self._processes if p.pid is not None and p.is_alive()]

    def check(self) -> None:
        """Restart a worker that died (unless it died right after starting: then stop it)."""
        for index, process in enumerate(self._processes):
            if self._stopping or process.is_alive():
                continue
            started = self._started.pop(process.pid or 0, 0.0)
            if time.monotonic() - started < _QUICK_DEATH:
                raise ConfigError(
                    f"gateway worker {process.pid} exited at start (status {process.exitcode})"
                )
            log.warning("gateway worker %s exited (status %s); starting another",
                        process.pid, process.exitcode)  # fmt: skip
            self._processes[index] = self._spawn(index)

    def stop(self, grace: float) -> None:
        """SIGTERM every worker (each drains for up to ``grace`` s), then kill what is left."""
        self._stopping = True
        for process in self._processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace + 5.0
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5.0)

    def wait(self, woken_by: int, timeout: float | None = None) -> None:
        """Sleep until a worker exits, ``woken_by`` (a descriptor) is readable or ``timeout``
        seconds pass; what woke it is read out (a signal's byte), nothing else is done."""
        sentinels = [p.sentinel for p in self._processes if p.exitcode is None]
        ready = wait([woken_by, *sentinels], timeout)
        if woken_by in ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(woken_by, 512)

    def run_until_signal(self) -> int:
        """Supervise until SIGINT or SIGTERM, then stop the workers; the exit status."""
        stop = False

        def ask_stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stop
            stop = True

        previous = {sig: signal.signal(sig, ask_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with _signal_wakeups() as woken_by:
                self.start()
                while not stop:
                    self.wait(woken_by)
                    self.check()
        except ConfigError as exc:
            print(f"busgate gateway: {exc}", flush=True)
            self.stop(0.0)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stop(self.settings.shutdown_grace)
        return 0


@contextlib.contextmanager
def _signal_wakeups() -> Iterator[int]:
    """A descriptor that becomes readable when a signal arrives (``signal.set_wakeup_fd``): the
    supervisor sleeps on it and on its workers, so a signal wakes it at once."""
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    previous = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    try:
        yield reader
    finally:
        signal.set_wakeup_fd(previous)
        os.close(reader)
        os.close(writer)
