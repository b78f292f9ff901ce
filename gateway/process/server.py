"""The gateway's server process: the app under uvicorn until SIGINT or SIGTERM, then drained
(PROTOCOL.md 9.1). ``busgate gateway`` (:mod:`gateway.process.cli`), its worker processes
(:mod:`gateway.process.workers`) and ``busgate run`` start it through :func:`serve` or
:func:`make_server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from typing import Any

import uvicorn

from bus.asyncio.loop import settle_heap
from gateway.app import create_app
from gateway.process.http_protocol import KEEP_ALIVE_S, protocol_class
from gateway.process.quiet_server import QuietServer
from gateway.process.readiness import WorkerReadiness
from gateway.process.settings import GatewaySettings
from gateway.state import Gateway
from gateway.websocket.ws_frames import FrameWritingProtocol

__all__ = ["make_server", "serve", "uvicorn_config"]

log = logging.getLogger("busgate.gateway")

#: How often a worker checks that its supervising process is still there, where it cannot be
#: told (no ``pidfd_open``: not Linux 5.3+).
_ORPHAN_CHECK_S = 0.5


def uvicorn_config(app: Any, settings: GatewaySettings, log_level: str = "info") -> uvicorn.Config:
    """The uvicorn settings the gateway runs with (the benchmark runs its reference app on them).

    Args:
        app: the ASGI app.
        settings: host, port and shutdown grace.
        log_level: uvicorn's log level (``info`` logs every request).

    Returns:
        The uvicorn config.
    """
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=log_level == "debug" or log_level == "info",
        lifespan="on",
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace)),
        proxy_headers=False,
        http=protocol_class(settings.header_timeout),
        timeout_keep_alive=KEEP_ALIVE_S,
        ws_per_message_deflate=settings.ws_compression,
        ws_ping_interval=settings.ws_ping_interval or None,  # 0: no pings
        ws_ping_timeout=settings.ws_ping_timeout,
        ws=FrameWritingProtocol,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )


def make_server(settings: GatewaySettings, log_level: str = "info") -> uvicorn.Server:
    """A uvicorn server for the gateway app (not started).

    Args:
        settings: the gateway settings (host, port, shutdown grace).
        log_level: uvicorn's log level.

    Returns:
        The server; ``await server.serve()`` runs it until it is told to exit.
    """
    return QuietServer(uvicorn_config(create_app(settings), settings, log_level))


async def serve(
    settings: GatewaySettings,
    log_level: str = "info",
    sock: socket.socket | None = None,
    parent: int | None = None,
    readiness: WorkerReadiness | None = None,
) -> None:
    """Run the gateway until SIGINT or SIGTERM, then drain and return (exit status 0).

    Args:
        settings: the settings.
        log_level: uvicorn's log level.
        sock: a listening socket to serve (a worker's, see :mod:`gateway.process.workers`); default:
            bind ``settings.host:settings.port``.
        parent: a worker's supervising process: when it is gone (killed outright, it could
            not stop its workers), the gateway drains and returns as on SIGTERM.
        readiness: a worker's flag among its siblings' (``/readyz`` counts the ready ones).
    """
    app = create_app(settings)
    server = QuietServer(uvicorn_config(app, settings, log_level))
    gateway: Gateway = app.state.gateway
    # uvicorn re-raises the signal after its shutdown (exit status -15); a drained gateway
    # that stopped on request is a success, so the signals only ask the server to exit.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    requests = _ExitRequests(server, gateway)
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, requests)
    settling = asyncio.create_task(_settle_once_started(server))
    watching = None if parent is None else asyncio.create_task(_orphaned(parent, requests))
    following = None
    if readiness is not None:
        gateway.workers = readiness.count
        following = asyncio.create_task(
            readiness.follow(lambda: gateway.bridge.connected and not gateway.closing)
        )
    try:
        await server.serve(sockets=None if sock is None else [sock])
    finally:
        settling.cancel()
        for task in (watching, following):
            if task is not None:
                task.cancel()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _orphaned(parent: int, requests: _ExitRequests) -> None:
    """Stop as on SIGTERM once the process ``parent`` is no longer this one's parent: a worker
    must not serve on as an orphan holding the port and a bus link. The loop is told when the
    parent exits (a pidfd of it is readable then); only without one does it look every
    :data:`_ORPHAN_CHECK_S` seconds."""
    await _parent_gone(parent)
    log.warning("gateway worker %d: its supervisor %d is gone; stopping", os.getpid(), parent)
    requests()


async def _parent_gone(parent: int) -> None:
    """Return once ``parent`` is no longer this process's parent."""
    try:
        pidfd = os.pidfd_open(parent)
    except (AttributeError, OSError):  # not Linux 5.3+, or it is gone already
        pidfd = -1
    if pidfd < 0:
        while os.getppid() == parent:
            await asyncio.sleep(_ORPHAN_CHECK_S)
        return
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not gone.done():
            gone.set_result(None)

    try:
        loop.add_reader(pidfd, exited)
        if os.getppid() == parent:  # it could have exited before the pidfd was opened
            await gone
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


async def _settle_once_started(server: uvicorn.Server) -> None:
    """Freeze the start-up heap (:func:`bus.asyncio.loop.settle_heap`) once the app is up."""
    while not server.started:
        await asyncio.sleep(0.05)
    settle_heap()


class _ExitRequests:
    """What each Ctrl-C (or SIGTERM) does: the first starts the orderly shutdown (the grace);
    the second answers what is in flight at once, so the server has nothing left to wait for;
    a third stops without the orderly end (uvicorn's ``force_exit``)."""

    def __init__(self, server: uvicorn.Server, gateway: Gateway) -> None:
        self.server = server
        self.gateway = gateway
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        if self.count == 2:
            self.gateway.stop_now()
        elif self.count > 2:
            self.server.force_exit = True
        self.server.should_exit = True
        self.gateway.begin_shutdown()
