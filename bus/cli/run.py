"""``busgate run``: the whole product in one process, for a first try on a laptop.

Starts the embedded broker (``--bus-port``, default 4000), the Object System listener bridged to
it (``--objects-port``, default 7890; ``--objects-link HOST:PORT`` links it to other Object
System servers), the MOP listener for MOP post offices (``--mop-port``, default 4001), the demo
service (group ``demo``) and, when the gateway
package is present, the HTTP gateway with the web console
(``http://localhost:8080``, ``--port``), and with ``--metrics-port`` the broker's ``/metrics``
(Prometheus; the gateway's own is at ``/metrics`` on its port), and with ``--spark`` a Spark
Connect server the console's report is rebuilt through (:mod:`bus.cli.run_spark`). Prints the
URLs and a curl example; Ctrl-C (or SIGTERM) stops everything in order: the gateway stops taking
requests, the demo service drains and says ``Terminating``, the broker tells its clients it is
shutting down.

It must work on a fresh machine: a taken port, a port out of range or two parts given the same
port is reported in one line with the flag that changes it, before anything starts.

Authentication: ``--api-key NAME:KEY[:GROUPS:TYPES]`` (repeatable) and ``--auth auto|on|off``
set the gateway's (``BUSGATE_API_KEYS`` and the other ``BUSGATE_GATEWAY_*`` variables apply
too); with a key, the banner's curl lines carry it (``-H 'X-API-Key: ...'``) so they work as
printed, as a notebook server prints its token URL. The manager login it prints for ``busgate
status`` names a file that holds the manager's secret (readable by the user alone, removed when
``busgate run`` stops), never the secret itself: that post office is also the one the broker
trusts to say for whom the gateway's requests are (``CLR``), and a banner ends up in logs.

The options and ports are in :mod:`bus.cli.run_options`, the gateway's start in
:mod:`bus.cli.run_gateway`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from bus.asyncio.loop import run as run_main
from bus.asyncio.loop import settle_heap
from bus.cli.run_gateway import gateway_factory, gateway_settings, start_gateway
from bus.cli.run_options import (
    JOURNAL_MAX_AGE_MS,
    JOURNAL_MAX_BYTES,
    JOURNAL_SEGMENT_AGE_MS,
    JOURNAL_SEGMENT_BYTES,
    MANAGER,
    Running,
    RunOptions,
    bind_port,
    check_port_free,
    check_ports,
    connect_host,
    display_host,
    journal_directory,
)
from bus.errors import BusError, ConfigError, ConnectError
from bus.mop.listener import DEFAULT_MOP_PORT

if TYPE_CHECKING:  # pragma: no cover
    from bus.broker.journal_setting import JournalSetting

__all__ = ["MANAGER", "RunOptions", "Running", "register", "run_all"]


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
    parser.add_argument(
        "--journal",
        metavar="DIR",
        default="",
        help="the broker's journal (default: ~/.local/state/busgate/journal, per bus port; a "
        "temporary one for --bus-port 0): history, listen --since, durable subscriptions",
    )
    parser.add_argument("--no-journal", action="store_true", help="run the broker without one")
    parser.add_argument(
        "--journal-max-bytes",
        type=int,
        default=JOURNAL_MAX_BYTES,
        help="delete the oldest journal segments beyond this (default 256 MiB; 0: keep all)",
    )
    parser.add_argument(
        "--journal-max-age-ms",
        type=int,
        default=JOURNAL_MAX_AGE_MS,
        help="delete journal segments older than this (default 7 days; 0: keep all)",
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
    parser.add_argument(
        "--spark",
        action="store_true",
        help="also start a Spark Connect server (busgate spark serve): the console's report "
        "is rebuilt through it from the journal, in seconds (needs the pipeline extra)",
    )
    parser.add_argument(
        "--spark-port",
        type=int,
        default=0,
        help="the Spark Connect server's port (default: a free one)",
    )
    parser.set_defaults(func=_main)


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
        journal=None if args.no_journal else args.journal,
        journal_max_bytes=args.journal_max_bytes,
        journal_max_age_ms=args.journal_max_age_ms,
        spark=args.spark,
        spark_port=args.spark_port,
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
        settle_heap()  # the program's, not run_all's: a caller's own heap is its business
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
    gateway_app = gateway_factory() if options.gateway else None
    check_port_free(options.bus_host, options.bus_port, "--bus-port")
    check_port_free(options.bus_host, options.objects_port, "--objects-port")
    if options.metrics_port is not None:
        check_port_free(options.bus_host, options.metrics_port, "--metrics-port")
    if options.mop_port is not None:
        check_port_free(options.bus_host, options.mop_port, "--mop-port")
    if options.spark:
        check_port_free(options.bus_host, options.spark_port, "--spark-port")
    if gateway_app is not None:
        check_port_free(options.host, options.port, "--port")
        gateway_settings(options, "bus://127.0.0.1:4000", options.port)  # refuse bad ones now
    running = Running(bus_url="")
    try:
        await _start_broker(options, running)
        await _start_objects(options, running)
        await _start_demo(options, running)
        if options.spark:
            from bus.cli.run_spark import start_spark

            running.spark_url = await start_spark(options.bus_host, options.spark_port, running)
        if gateway_app is not None:
            await start_gateway(options, gateway_app, running)
    except BaseException:
        await running.stop()
        raise
    return running


def _journal_setting(options: RunOptions, running: Running) -> JournalSetting | None:
    """The broker's journal: on by default, bounded (PROTOCOL.md 8), so history, ``listen
    --since`` and durable subscriptions work on the first try."""
    from bus.broker.journal_setting import JournalSetting

    directory = journal_directory(options)
    if directory is None:
        return None
    running.journal = directory
    running.journal_temporary = not options.journal and options.bus_port == 0
    if running.journal_temporary:
        running.stoppers.append(functools.partial(_remove_tree, directory))
    return JournalSetting(
        str(directory),
        max_segment_bytes=min(JOURNAL_SEGMENT_BYTES, max(options.journal_max_bytes, 0) or 1 << 62),
        max_segment_age_ms=JOURNAL_SEGMENT_AGE_MS,
        max_bytes=options.journal_max_bytes,
        max_age_ms=options.journal_max_age_ms,
    )


async def _remove_tree(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def _write_secret(secret: str, running: Running) -> Path:
    """``secret`` in a file only this user may read (in a directory of its own, 0700, as
    ``mkdtemp`` makes it), removed when ``running`` stops: the banner names the file."""
    directory = Path(tempfile.mkdtemp(prefix="busgate-run-"))
    running.stoppers.append(functools.partial(_remove_tree, directory))
    path = directory / f"{MANAGER}.secret"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(secret + "\n")
    return path


async def _start_broker(options: RunOptions, running: Running) -> None:
    from bus.broker import Broker, BrokerConfig

    # Open mode lets the demo, the gateway and anyone on this machine connect without a secret;
    # one manager post office with a fresh secret is added so `busgate status` can be tried.
    running.manager_secret = secrets.token_urlsafe(12)
    running.manager_secret_file = _write_secret(running.manager_secret, running)
    journal = _journal_setting(options, running)
    config = BrokerConfig(
        host=options.bus_host,
        port=options.bus_port,
        open=True,
        offices={MANAGER: running.manager_secret},
        managers=frozenset({MANAGER}),
        gateways=frozenset({MANAGER}),  # its gateway connects as MANAGER and acts for callers
        journal=journal,
    )
    broker = Broker(config)
    try:
        await broker.start()
    except ConfigError as exc:  # the port was taken between our check and the broker's bind
        raise ConfigError(f"{exc}; choose another port with --bus-port PORT") from exc
    running.stoppers.append(broker.stop)
    running.local_link = broker.local_link
    running.bus_url = f"bus://{connect_host(options.bus_host)}:{broker.port}"
    if options.mop_port is not None:
        from bus.mop.listener import open_mop_listener

        try:
            mop = await open_mop_listener(broker, options.bus_host, options.mop_port)
        except (ConfigError, ConnectError) as exc:
            raise ConfigError(f"{exc}; choose another port with --mop-port PORT") from exc
        running.stoppers.append(mop.stop)
        running.mop_url = f"tcp://{connect_host(options.bus_host)}:{mop.port}"
    if options.metrics_port is not None:
        from bus.broker.metrics import start_metrics

        try:
            metrics = await start_metrics(broker, options.metrics_port)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; choose another port with --metrics-port PORT") from exc
        running.stoppers.append(metrics.stop)
        host = display_host(options.bus_host)
        running.metrics_url = f"http://{host}:{metrics.port}/metrics"


async def _start_objects(options: RunOptions, running: Running) -> None:
    from bus.objects.bridging import start_bridge

    port = options.objects_port
    if port == 0:  # a free port, found the way the broker's would be
        with contextlib.closing(bind_port(options.bus_host, 0, "--objects-port")) as sock:
            port = sock.getsockname()[1]
    # Its own gateway links in over loopback as a server (PROTOCOL.md 6.6).
    stop = await start_bridge(
        running.bus_url,
        options.bus_host,
        port,
        links=options.objects_links,
        server_peers=("127.0.0.0/8", "::1"),
        local_link=running.local_link,
    )
    running.stoppers.append(stop)
    link = f"{connect_host(options.bus_host)}:{port}"
    running.objects_url = f"tcp://{link}"
    # The gateway's /ws router links to this listener (gateway/websocket/ws.py reads the variable).
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
    if running.spark_url is not None:
        lines.append(
            f"  spark     {running.spark_url} (Spark Connect: the console's report; "
            f"busgate report --remote {running.spark_url})"
        )
    if running.journal is not None:
        kept = " (temporary)" if running.journal_temporary else ""
        lines.append(f"  journal   {running.journal}{kept}: history, listen --since (--no-journal)")
    host_port = running.bus_url.removeprefix("bus://")
    secret_file = shlex.quote(str(running.manager_secret_file))
    manager = f"--bus bus://{MANAGER}@{host_port} --secret-file {secret_file}"
    lines += [
        f"  services  busgate services --bus {running.bus_url}",
        f"  status    busgate status {manager}",
        "Ctrl-C stops.",
    ]
    print("\n".join(lines), flush=True)
