"""The gateway and its console inside ``busgate run``: in this process under uvicorn, or as
``--workers`` processes; a gateway that fails to start is reported in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import logging
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, Final

from bus.cli.run_options import MANAGER, Running, RunOptions, bind_port, display_host
from bus.errors import ConfigError

__all__ = ["READY_TIMEOUT", "gateway_factory", "gateway_settings", "start_gateway"]

#: Seconds ``busgate run`` waits for its gateway's bus link before printing the banner anyway.
READY_TIMEOUT: Final = 15.0


def gateway_factory() -> Callable[[Any], Any] | None:
    """The gateway's ``create_app``, or None when the gateway package is absent or broken."""
    # The gateway is a sibling package written alongside; run without it until it is there.
    try:
        module = importlib.import_module("gateway.app")
    except ImportError:
        return None
    except Exception as exc:  # a broken gateway must not stop the bus from running
        print(f"busgate: the gateway cannot load ({exc}); running without it", file=sys.stderr)
        return None
    create_app: Callable[[Any], Any] | None = getattr(module, "create_app", None)
    return create_app


def gateway_settings(
    options: RunOptions,
    bus_url: str,
    port: int,
    manager_secret: str = "",
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """The gateway's settings for ``busgate run``.

    Raises:
        ConfigError: a bad setting (an API key, an environment variable).
    """
    from gateway.process.settings import load_settings

    # BUSGATE_* variables and $BUSGATE_CONFIG apply (API keys, CORS, ...); ours win.
    overrides: dict[str, Any] = {"bus_url": bus_url, "host": options.host, "port": port}
    if manager_secret:  # the console's bus view (/v1/admin/...) needs a manager's rights
        overrides.update(bus_name=MANAGER, bus_secret=manager_secret)
    if options.auth is not None:
        overrides["auth"] = options.auth
    if options.api_keys:
        overrides["api_keys"] = ",".join(options.api_keys)
    overrides.update(extra or {})
    return load_settings(overrides)


def _auth_header(settings: Any) -> str:
    """The curl option that gets the banner's examples through the gateway's authentication."""
    if not settings.auth_enabled:
        return ""
    keys = [key for key in settings.api_keys if "*" in key.groups or "demo" in key.groups]
    if keys:
        return f"-H 'X-API-Key: {keys[0].key}' "
    return "-H 'Authorization: Bearer TOKEN' "  # a JWT of the configured issuer


async def start_gateway(
    options: RunOptions, create_app: Callable[[Any], Any], running: Running
) -> None:
    """Start the gateway on ``options.port``; add its stop and its hurry to ``running``.

    In this process, it returns once the gateway is linked to the bus too (at most
    :data:`READY_TIMEOUT` seconds), so that what the banner says works at once.

    Raises:
        ConfigError: the port is taken, or the gateway did not start (naming the cause).
    """

    # We bind the socket ourselves: a taken port is then our clear error, not uvicorn's exit.
    sock = bind_port(options.host, options.port, "--port")
    port = sock.getsockname()[1]
    settings = gateway_settings(
        options, running.bus_url, port, running.manager_secret, _report_settings(running)
    )
    if settings.spark_remote and settings.report_journal and not settings.report_dir:
        report_dir = tempfile.mkdtemp(prefix="busgate-report-")  # removed when the run stops
        running.stoppers.append(functools.partial(asyncio.to_thread, shutil.rmtree, report_dir))
        settings = dataclasses.replace(settings, report_dir=report_dir)
    running.auth_header = _auth_header(settings)
    if options.workers > 1:
        await _start_workers(options, settings, sock, running)
        running.http_url = f"http://{display_host(options.host)}:{port}"
        return
    from gateway.process.cli import uvicorn_config
    from gateway.process.quiet_server import QuietServer

    inner = create_app(settings)
    app = _StartupWatch(inner)
    # busgate gateway's settings: the shutdown grace bounds Ctrl-C, the header deadline
    server = QuietServer(uvicorn_config(app, settings, "warning"))
    # uvicorn would take over Ctrl-C; ours stops every part in order instead.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    # A failed startup is reported by us in one line, not as uvicorn's traceback.
    uvicorn_log = logging.getLogger("uvicorn.error")
    level = uvicorn_log.level
    uvicorn_log.setLevel(logging.CRITICAL)
    task = asyncio.create_task(_serve(server, sock, app, port), name="gateway")
    try:
        while not server.started:
            if task.done():
                sock.close()
                task.result()  # raises what stopped it
                raise ConfigError(f"the gateway did not start on port {port}")
            await asyncio.sleep(0.02)
    finally:
        uvicorn_log.setLevel(level)

    async def stop() -> None:
        # SSE streams end now; requests still in flight near the grace's end are answered 503
        inner.state.gateway.begin_shutdown()
        server.should_exit = True
        await task
        sock.close()

    running.stoppers.append(stop)
    # answered at once, uvicorn has nothing left to wait for (its force_exit would skip the
    # app's own shutdown and leave a traceback behind)
    running.hurry.append(inner.state.gateway.stop_now)
    running.http_url = f"http://{display_host(options.host)}:{port}"
    await _wait_linked(inner.state.gateway.bridge)


def _report_settings(running: Running) -> dict[str, Any]:
    """With ``--spark``: the gateway rebuilds its report through that server from the journal."""
    if running.spark_url is None:
        return {}
    journal = str(running.journal) if running.journal is not None else None
    return {"spark_remote": running.spark_url, "report_journal": journal}


async def _wait_linked(bridge: Any) -> None:
    """Return once the gateway's bus link is up: it is made in the background after uvicorn
    listens, and a request before it is answered 503, so the banner waits for it (a user who
    curls the moment it is printed gets the demo's answer). A link still down after
    :data:`READY_TIMEOUT` is said in one line; the gateway keeps trying, answering 503 meanwhile.
    """
    try:
        await bridge.wait_connected(READY_TIMEOUT)
    except TimeoutError:
        why = f": {bridge.last_error}" if bridge.last_error else ""
        print(
            f"busgate: the gateway is not linked to the bus yet{why}; it answers 503 until it is",
            file=sys.stderr,
        )


async def _start_workers(
    options: RunOptions, settings: Any, sock: socket.socket, running: Running
) -> None:
    from gateway.process.workers import Workers

    workers = Workers(settings, sock, options.workers, "warning")
    workers.start()

    async def stop() -> None:
        await asyncio.to_thread(workers.stop, settings.shutdown_grace)
        sock.close()

    running.stoppers.append(stop)


class _StartupWatch:
    """ASGI wrapper that remembers why the application's startup failed."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.error: BaseException | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "lifespan":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            raise


async def _serve(server: Any, sock: socket.socket, app: _StartupWatch, port: int) -> None:
    """Run uvicorn; its ``sys.exit`` on a failed startup becomes one clear error.

    (A SystemExit escaping a task would end ``busgate run`` at once, skipping every stopper.)

    Raises:
        ConfigError: the gateway did not start, naming the cause when it is known.
    """
    try:
        await server.serve(sockets=[sock])
    except SystemExit as exc:
        cause = app.error
        detail = f": {_one_line(cause)}" if cause is not None else ""
        raise ConfigError(f"the gateway did not start on port {port}{detail}") from exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
