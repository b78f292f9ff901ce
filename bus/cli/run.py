"""``busgate run``: the whole product in one process, for a first try on a laptop.

Starts the embedded broker (``--bus-port``, default 4000), the Object System listener bridged to
it (``--objects-port``, default 7890; ``--objects-link HOST:PORT`` links it to other Object
System servers), the MOP listener for MOP post offices (``--mop-port``, default 4001), the demo
service (group ``demo``) and, when the gateway
package is present, the HTTP gateway with the web console
(``http://localhost:8080``, ``--port``), and with ``--metrics-port`` the broker's ``/metrics``
(Prometheus; the gateway's own is at ``/metrics`` on its port). Prints the URLs and a curl
example; Ctrl-C (or SIGTERM) stops everything in order: the gateway stops taking requests, the
demo service drains and says ``Terminating``, the broker tells its clients it is shutting down.

It must work on a fresh machine: a taken port, a port out of range or two parts given the same
port is reported in one line with the flag that changes it, before anything starts.

Authentication: ``--api-key NAME:KEY[:GROUPS:TYPES]`` (repeatable) and ``--auth auto|on|off``
set the gateway's (``BUSGATE_API_KEYS`` and the other ``BUSGATE_GATEWAY_*`` variables apply
too); with a key, the banner's curl lines carry it (``-H 'X-API-Key: ...'``) so they work as
printed, as a notebook server prints its token URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import functools
import importlib
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bus.asyncio.listen import listen_socket
from bus.asyncio.loop import run as run_main
from bus.errors import BusError, ConfigError, ConnectError
from bus.mop.listener import DEFAULT_MOP_PORT

__all__ = ["MANAGER", "RunOptions", "Running", "register", "run_all"]

#: The manager post office ``busgate run`` adds (its secret is new at every start).
MANAGER = "admin"


@dataclass(frozen=True)
class RunOptions:
    """What ``busgate run`` starts.

    Attributes:
        host: the address the gateway listens on (loopback by default).
        port: the gateway's HTTP port (8080; 0 picks a free one).
        bus_host: the address the broker listens on (loopback: it runs in open mode).
        bus_port: the broker's port (4000, seed 001's default; 0 picks a free one).
        objects_port: the Object System listener's port (7890, the original server's; 0 picks a
            free one); the gateway's ``/ws`` links to it, so WebSocket clients reach the bus.
        metrics_port: serve the broker's ``/metrics`` on this port (None: not; 0: a free one).
        mop_port: the MOP listener's port (None: not; 0: a free one; the command's default is
            4001, MOP's 4000 being the bus's).
        objects_links: ``HOST:PORT`` of Object System servers the listener links to.
        gateway: start the gateway and console when the gateway package is present.
        demo_instances: how many demo service instances to run.
        workers: gateway processes on the port (1: the gateway runs in this process; more:
            ``busgate gateway --workers``, each worker its own process and bus link).
        auth: the gateway's ``auth`` setting (None: its own default, ``auto``).
        api_keys: API keys for the gateway, ``NAME:KEY[:GROUPS:TYPES]`` each.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    bus_host: str = "127.0.0.1"
    bus_port: int = 4000
    objects_port: int = 7890
    metrics_port: int | None = None
    mop_port: int | None = None
    objects_links: tuple[str, ...] = ()
    gateway: bool = True
    demo_instances: int = 1
    workers: int = 1
    auth: str | None = None
    api_keys: tuple[str, ...] = ()


@dataclass
class Running:
    """What :func:`run_all` started, and the URLs to reach it."""

    bus_url: str
    http_url: str | None = None
    objects_url: str | None = None
    metrics_url: str | None = None
    mop_url: str | None = None
    manager_secret: str = ""
    #: A header that gets the gateway's curl examples through its authentication ("" if none).
    auth_header: str = ""
    stoppers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    #: What a second Ctrl-C calls: stop without waiting for what is in flight.
    hurry: list[Callable[[], None]] = field(default_factory=list)

    async def stop(self) -> None:
        """Stop everything, the last started first."""
        for stop in reversed(self.stoppers):
            with contextlib.suppress(Exception):
                await stop()
        self.stoppers.clear()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``busgate run`` to the parser."""
    parser = subparsers.add_parser(
        "run",
        help="start the broker, the demo service and the gateway with its console",
        description="Start the embedded broker, the demo service (group demo) and the HTTP "
        "gateway with the web console, all in this process. Ctrl-C stops everything.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="gateway listen address (default %(default)s)"
    )
    parser.add_argument(
        "--bus-host",
        default="127.0.0.1",
        help="broker listen address (default %(default)s; the broker runs in open mode, so "
        "keep it on loopback unless every host that can reach it is trusted)",
    )
    parser.add_argument("--port", type=int, default=8080, help="gateway HTTP port (default 8080)")
    parser.add_argument("--bus-port", type=int, default=4000, help="broker port (default 4000)")
    parser.add_argument(
        "--objects-port",
        type=int,
        default=7890,
        help="Object System TCP port, bridged to the bus (default 7890)",
    )
    parser.add_argument(
        "--objects-link",
        action="append",
        metavar="[tls://]HOST:PORT",
        help="link the Object System listener to this server (Objectoplex or busgate; "
        "repeatable; tls:// for TLS, trusting BUSGATE_BUS_TLS_CA)",
    )
    parser.add_argument(
        "--mop-port",
        type=int,
        default=DEFAULT_MOP_PORT,
        help=f"MOP listener port for MOP post offices (default {DEFAULT_MOP_PORT}; "
        "MOP's 4000 is the bus's)",
    )
    parser.add_argument("--no-mop", action="store_true", help="no MOP listener")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="also serve the broker's /metrics (Prometheus) on this port (default: off)",
    )
    parser.add_argument("--no-gateway", action="store_true", help="broker and demo service only")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway processes on the HTTP port, each with its own bus link (default 1)",
    )
    parser.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        default=[],
        metavar="NAME:KEY[:GROUPS:TYPES]",
        help="an API key the gateway accepts (repeatable; turns authentication on)",
    )
    parser.add_argument(
        "--auth",
        choices=("auto", "on", "off"),
        default=None,
        help="the gateway's authentication (default auto: on once a key is configured)",
    )
    parser.set_defaults(func=_main)


#: The flags of each port, in the order they are checked.
_PORT_FLAGS = (
    ("port", "--port"),
    ("bus_port", "--bus-port"),
    ("objects_port", "--objects-port"),
    ("metrics_port", "--metrics-port"),
    ("mop_port", "--mop-port"),
)


def check_ports(options: RunOptions) -> None:
    """Refuse a port out of range, or one port given to two parts, before anything starts.

    Raises:
        ConfigError: one line naming the flag(s) to change.
    """
    taken: dict[int, str] = {}
    for name, flag in _PORT_FLAGS:
        port = getattr(options, name)
        if port is None or (name == "port" and not options.gateway):
            continue
        if not 0 <= port <= 65535:
            raise ConfigError(f"{flag} {port} is not a TCP port: give one in 0..65535")
        if port == 0:
            continue  # a free one each
        if port in taken:
            raise ConfigError(
                f"{taken[port]} and {flag} are both {port}: each part needs its own port"
            )
        taken[port] = flag


def _main(args: argparse.Namespace) -> int:
    options = RunOptions(
        host=args.host,
        port=args.port,
        bus_host=args.bus_host,
        bus_port=args.bus_port,
        objects_port=args.objects_port,
        metrics_port=args.metrics_port,
        mop_port=None if args.no_mop else args.mop_port,
        objects_links=tuple(args.objects_link or ()),
        gateway=not args.no_gateway,
        workers=args.workers,
        auth=args.auth,
        api_keys=tuple(args.api_keys),
    )
    try:
        check_ports(options)
    except ConfigError as exc:
        print(f"busgate: error: {exc}", file=sys.stderr)
        return 2
    try:
        return run_main(_run_until_stopped(options))
    except BusError as exc:  # a taken port, a bad setting, a broker that cannot start
        print(f"busgate: error: {exc}", file=sys.stderr)
        return 1


async def _run_until_stopped(options: RunOptions) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    running = await run_all(options)
    try:
        _print_banner(running)
        await stop.wait()
        print("busgate: stopping ... (Ctrl-C again: stop now)", flush=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, _hurry, running)
    finally:
        await running.stop()
    print("busgate: stopped", flush=True)
    return 0


def _hurry(running: Running) -> None:
    """A second Ctrl-C: what waits for requests in flight stops waiting."""
    print("busgate: stopping now", flush=True)
    for hurry in running.hurry:
        hurry()


async def run_all(options: RunOptions) -> Running:
    """Start the broker, the demo service and (if present) the gateway.

    Args:
        options: ports and parts to start.

    Returns:
        The running parts; ``await running.stop()`` stops them.

    Raises:
        ConfigError: the broker's or the gateway's port is in use.
    """
    check_ports(options)
    gateway_app = _gateway_factory() if options.gateway else None
    _check_port(options.bus_host, options.bus_port, "--bus-port")
    _check_port(options.bus_host, options.objects_port, "--objects-port")
    if options.metrics_port is not None:
        _check_port(options.bus_host, options.metrics_port, "--metrics-port")
    if options.mop_port is not None:
        _check_port(options.bus_host, options.mop_port, "--mop-port")
    if gateway_app is not None:
        _check_port(options.host, options.port, "--port")
        _gateway_settings(options, "bus://127.0.0.1:4000", options.port)  # refuse bad ones now
    running = Running(bus_url="")
    try:
        await _start_broker(options, running)
        await _start_objects(options, running)
        await _start_demo(options, running)
        if gateway_app is not None:
            await _start_gateway(options, gateway_app, running)
    except BaseException:
        await running.stop()
        raise
    return running


def _check_port(host: str, port: int, flag: str) -> None:
    if port != 0:
        _listen_socket(host, port, flag).close()


def _listen_socket(host: str, port: int, flag: str) -> socket.socket:
    try:
        sock = listen_socket(host, port, backlog=128)
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise ConfigError(
                f"port {port} on {host} is in use (another busgate run?); "
                f"choose another with {flag} PORT"
            ) from exc
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


async def _start_broker(options: RunOptions, running: Running) -> None:
    from bus.broker import Broker, BrokerConfig

    # Open mode lets the demo, the gateway and anyone on this machine connect without a secret;
    # one manager post office with a fresh secret is added so `busgate status` can be tried.
    running.manager_secret = secrets.token_urlsafe(12)
    config = BrokerConfig(
        host=options.bus_host,
        port=options.bus_port,
        open=True,
        offices={MANAGER: running.manager_secret},
        managers=frozenset({MANAGER}),
        gateways=frozenset({MANAGER}),  # its gateway connects as MANAGER and acts for callers
    )
    broker = Broker(config)
    try:
        await broker.start()
    except ConfigError as exc:  # the port was taken between our check and the broker's bind
        raise ConfigError(f"{exc}; choose another port with --bus-port PORT") from exc
    running.stoppers.append(broker.stop)
    running.bus_url = f"bus://{_connect_host(options.bus_host)}:{broker.port}"
    if options.mop_port is not None:
        from bus.mop.listener import open_mop_listener

        try:
            mop = await open_mop_listener(broker, options.bus_host, options.mop_port)
        except (ConfigError, ConnectError) as exc:
            raise ConfigError(f"{exc}; choose another port with --mop-port PORT") from exc
        running.stoppers.append(mop.stop)
        running.mop_url = f"tcp://{_connect_host(options.bus_host)}:{mop.port}"
    if options.metrics_port is not None:
        from bus.broker.metrics import start_metrics

        try:
            metrics = await start_metrics(broker, options.metrics_port)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; choose another port with --metrics-port PORT") from exc
        running.stoppers.append(metrics.stop)
        host = _display_host(options.bus_host)
        running.metrics_url = f"http://{host}:{metrics.port}/metrics"


async def _start_objects(options: RunOptions, running: Running) -> None:
    from bus.objects.bridge import start_bridge

    port = options.objects_port
    if port == 0:  # a free port, found the way the broker's would be
        with contextlib.closing(_listen_socket(options.bus_host, 0, "--objects-port")) as sock:
            port = sock.getsockname()[1]
    # Its own gateway links in over loopback as a server (PROTOCOL.md 6.6).
    stop = await start_bridge(
        running.bus_url,
        options.bus_host,
        port,
        links=options.objects_links,
        server_peers=("127.0.0.0/8", "::1"),
    )
    running.stoppers.append(stop)
    link = f"{_connect_host(options.bus_host)}:{port}"
    running.objects_url = f"tcp://{link}"
    # The gateway's /ws router links to this listener (gateway/ws.py reads the variable).
    os.environ["BUSGATE_OBJECTS_LINK"] = link


async def _start_demo(options: RunOptions, running: Running) -> None:
    from bus.asyncio.client import connect
    from bus.demo import create_demo_service

    client = await connect(running.bus_url)
    running.stoppers.append(client.close)
    for _ in range(options.demo_instances):
        # It stops after the gateway, whose grace its requests already had: one second more
        # (a second Ctrl-C: none).
        svc = create_demo_service(client)
        svc.drain_timeout = 1.0
        await svc.start()
        running.stoppers.append(svc.stop)
        running.hurry.append(functools.partial(setattr, svc, "drain_timeout", 0.0))


def _gateway_factory() -> Callable[[Any], Any] | None:
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


def _gateway_settings(
    options: RunOptions, bus_url: str, port: int, manager_secret: str = ""
) -> Any:
    from gateway.settings import load_settings

    # BUSGATE_* variables and $BUSGATE_CONFIG apply (API keys, CORS, ...); ours win.
    overrides: dict[str, Any] = {"bus_url": bus_url, "host": options.host, "port": port}
    if manager_secret:  # the console's bus view (/v1/admin/...) needs a manager's rights
        overrides.update(bus_name=MANAGER, bus_secret=manager_secret)
    if options.auth is not None:
        overrides["auth"] = options.auth
    if options.api_keys:
        overrides["api_keys"] = ",".join(options.api_keys)
    return load_settings(overrides)


def _auth_header(settings: Any) -> str:
    """The curl option that gets the banner's examples through the gateway's authentication."""
    if not settings.auth_enabled:
        return ""
    keys = [key for key in settings.api_keys if "*" in key.groups or "demo" in key.groups]
    if keys:
        return f"-H 'X-API-Key: {keys[0].key}' "
    return "-H 'Authorization: Bearer TOKEN' "  # a JWT of the configured issuer


async def _start_gateway(
    options: RunOptions, create_app: Callable[[Any], Any], running: Running
) -> None:
    import uvicorn

    # We bind the socket ourselves: a taken port is then our clear error, not uvicorn's exit.
    sock = _listen_socket(options.host, options.port, "--port")
    port = sock.getsockname()[1]
    settings = _gateway_settings(options, running.bus_url, port, running.manager_secret)
    running.auth_header = _auth_header(settings)
    if options.workers > 1:
        await _start_workers(options, settings, sock, running)
        running.http_url = f"http://{_display_host(options.host)}:{port}"
        return
    from gateway.cli import uvicorn_config

    inner = create_app(settings)
    app = _StartupWatch(inner)
    # busgate gateway's settings: the shutdown grace bounds Ctrl-C, the header deadline
    server = uvicorn.Server(uvicorn_config(app, settings, "warning"))
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
    running.http_url = f"http://{_display_host(options.host)}:{port}"


async def _start_workers(
    options: RunOptions, settings: Any, sock: socket.socket, running: Running
) -> None:
    from gateway.workers import Workers

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


def _display_host(host: str) -> str:
    return "localhost" if host in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "::") else host


def _connect_host(host: str) -> str:
    """Where a local client reaches a server listening on ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "localhost") else host


def _print_banner(running: Running) -> None:
    lines = [f"busgate is running. Broker: {running.bus_url}, demo service: group demo"]
    if running.http_url is not None:
        url = running.http_url
        key = running.auth_header
        lines += [
            f"  console   {url}/",
            f"  API docs  {url}/docs",
            f"  try       curl {key}" + '-d \'{"CMD":"echo","x":1}\' ' + f"{url}/v1/request/demo",
            f"  a stream  curl {key}-H 'Accept: application/x-ndjson' "
            + '-d \'{"CMD":"count","n":3,"interval":0.5}\' '
            + f"{url}/v1/request/demo",
        ]
        if key.startswith("-H 'Authorization"):
            lines.append("            (TOKEN: a JWT your --jwt-secret or JWKS issuer signed)")
    else:
        lines.append(f"  (no gateway) try: busgate request demo echo x=1 --bus {running.bus_url}")
    if running.objects_url is not None:
        lines.append(f"  objects   {running.objects_url} (Object System, JSON + NUL objects)")
    if running.mop_url is not None:
        lines.append(f"  MOP       {running.mop_url} (MOP post offices; cpoPort)")
    if running.metrics_url is not None:
        lines.append(f"  metrics   {running.metrics_url} (the broker's, for Prometheus)")
    host_port = running.bus_url.removeprefix("bus://")
    manager_url = f"bus://{MANAGER}:{running.manager_secret}@{host_port}"
    lines += [
        f"  services  busgate services --bus {running.bus_url}",
        f"  status    busgate status --bus {manager_url}",
        "Ctrl-C stops.",
    ]
    print("\n".join(lines), flush=True)
