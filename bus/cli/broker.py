"""``busgate broker``: run the central post office.

Every setting is a flag, a ``BUSGATE_*`` environment variable and a key of the JSON config file
(``--config``); flags win over variables, variables over the file (see
:mod:`bus.broker.config`). Without any post office and without ``--open`` the broker accepts no
one, so it says so and exits with status 2.

With ``--objects-port`` (``BUSGATE_OBJECTS_PORT``, ``objectsPort``) the Object System listener
(seed 003, usually port 7890) runs in the same process, bridged to the bus; ``--objects-link
HOST:PORT`` (repeatable; ``BUSGATE_OBJECTS_LINKS``, ``objectsLinks``) links its server to
Objectoplex or busgate servers, with a WARNING while a link is down, and
``--objects-server-peer`` names the addresses allowed to link in as servers. With ``--mop-port``
(``BUSGATE_MOP_PORT``, ``mopPort``) the MOP listener (seed 001, usually port 4001) lets MOP
post offices join the bus. With ``--metrics-port`` (``BUSGATE_METRICS_PORT``, ``metricsPort``)
the broker serves ``/metrics`` for Prometheus on that port (``bus.broker.metrics``).

With ``--tls-cert``/``--tls-key`` every listener of the broker (bus, Object System, MOP) speaks
TLS only, with that certificate (and with ``--tls-ca`` each asks for a client certificate); an
``--objects-link tls://HOST:PORT`` links over TLS (PROTOCOL.md 4.7).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from bus.asyncio.loop import run as run_main
from bus.asyncio.loop import settle_heap
from bus.broker import Broker, BrokerConfig
from bus.broker.config import JOURNAL_FSYNC_POLICIES, merge_journal, parse_offices
from bus.broker.metrics import start_metrics
from bus.errors import BusError, ConfigError
from bus.link.tls import listener_context
from bus.mop.listener import DEFAULT_MOP_PORT as MOP_PORT
from bus.mop.listener import start_mop
from bus.objects.bridging import RunningBridge, open_bridge

__all__ = ["open_objects", "register", "run_broker"]

log = logging.getLogger("bus.cli.broker")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``busgate broker`` to the parser."""
    parser = subparsers.add_parser(
        "broker",
        help="run the central post office (the bus broker)",
        description="Run the busgate broker. Settings: flags > BUSGATE_* variables > "
        "the JSON file given with --config (or BUSGATE_CONFIG).",
    )
    add = parser.add_argument
    add("--config", help="JSON config file (also the file manage.write writes)")
    add("--host", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, help="TCP port (default 4000; 0: any free port)")
    add("--ping-interval-ms", type=int, help="ping interval (default 5000)")
    add("--max-message-size", type=int, help="largest message in bytes (default 1048576)")
    add("--max-connections", type=int, help="most simultaneous connections (default 1000)")
    add("--max-subscriptions", type=int, help="patterns+groups per connection (default 1000)")
    add("--max-queue-bytes", type=int, help="output queued per connection before eviction (64 MiB)")
    add(
        "--max-total-queue-bytes",
        type=int,
        help="output queued over all connections; beyond, the biggest is evicted (256 MiB)",
    )
    add(
        "--write-deadline-ms",
        type=int,
        help="evict a connection whose output has not moved this long (10000)",
    )
    add("--connect-timeout-ms", type=int, help="deadline for the handshake (default 2000)")
    add(
        "--max-pending-connections",
        type=int,
        help="sockets in their handshake at once; beyond, the oldest of the address holding "
        "the most is closed (default 256)",
    )
    add(
        "--max-pending-per-address",
        type=int,
        help="sockets one address may have in their handshake at once; its next ones are "
        "refused (default 64)",
    )
    add(
        "--max-handshake-bytes",
        type=int,
        help="largest message before the handshake is done (default 16384)",
    )
    add(
        "--max-auth-failures",
        type=int,
        help="failed logins per address per minute before refusal (default 10; 0: off)",
    )
    add(
        "--open",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="allow connects without a secret (--no-open: refuse them)",
    )
    add("--replay-memory", type=int, help="connect ids remembered against replay (100000)")
    add(
        "--tls-cert",
        help="TLS certificate (PEM): the bus, Object System and MOP ports speak TLS only",
    )
    add("--tls-key", help="the TLS certificate's private key (PEM)")
    add(
        "--tls-ca",
        help="CA of client certificates: require one (mutual TLS; mode=tls); tls:// links "
        "trust it too",
    )
    add("--office", action="append", metavar="NAME:SECRET", help="a post office (repeatable)")
    add("--manager", action="append", metavar="NAME", help="a manager post office (repeatable)")
    add(
        "--gateway",
        action="append",
        metavar="NAME",
        help="a post office trusted to set CLR, the caller it acts for (repeatable; a gateway)",
    )
    add("--journal", metavar="DIR", help="journal every routed message in DIR")
    add("--journal-filter", help="comma-separated GRP patterns to journal (default: all)")
    add("--journal-types", help="comma-separated TYP values to journal, e.g. RQS,ACK,NAK (all)")
    add(
        "--journal-max-segment-bytes",
        type=int,
        help="start a new segment before one grows past this (default 67108864)",
    )
    add(
        "--journal-max-segment-age-ms",
        type=int,
        help="start a new segment this long after the last one began (default 3600000)",
    )
    add(
        "--journal-fsync",
        choices=JOURNAL_FSYNC_POLICIES,
        help="when journal bytes are forced to disk: none, interval (default), always",
    )
    add("--journal-fsync-interval-ms", type=int, help="least time between fsyncs (default 1000)")
    add(
        "--journal-max-bytes",
        type=int,
        help="delete the oldest segments once the journal holds more (default 0: keep all)",
    )
    add(
        "--journal-max-age-ms",
        type=int,
        help="delete a segment once the one after it is this old (default 0: keep all)",
    )
    add("--objects-port", type=int, help="also run the Object System listener on this port")
    add("--metrics-port", type=int, help="also serve /metrics (Prometheus) on this port (off)")
    add(
        "--objects-link",
        action="append",
        metavar="[tls://]HOST:PORT",
        help="link the Object System server to this one (Objectoplex or busgate; repeatable; "
        "tls:// for TLS)",
    )
    add(
        "--objects-server-peer",
        action="append",
        metavar="ADDRESS[/BITS]",
        help="let Object System connections from here subscribe as role server (repeatable)",
    )
    add(
        "--mop-port",
        type=int,
        help=f"also run the MOP listener for MOP post offices on this port ({MOP_PORT} usual)",
    )
    add("--log-level", help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL")
    parser.set_defaults(func=_main)


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    """Build the broker's config from parsed flags, the environment and the config file.

    Raises:
        ConfigError: a bad value anywhere.
    """
    overrides: dict[str, Any] = {
        name: getattr(args, name, None)
        for name in (
            "host",
            "port",
            "ping_interval_ms",
            "max_message_size",
            "max_connections",
            "max_subscriptions",
            "max_queue_bytes",
            "max_total_queue_bytes",
            "write_deadline_ms",
            "connect_timeout_ms",
            "max_pending_connections",
            "max_pending_per_address",
            "max_handshake_bytes",
            "max_auth_failures",
            "open",
            "replay_memory",
            "objects_port",
            "metrics_port",
            "mop_port",
            "log_level",
            "tls_cert",
            "tls_key",
            "tls_ca",
        )
    }
    overrides["objects_links"] = tuple(args.objects_link) if args.objects_link else None
    peers = getattr(args, "objects_server_peer", None)
    overrides["objects_server_peers"] = tuple(peers) if peers else None
    config = BrokerConfig.load(args.config, **overrides)
    offices = dict(config.offices)
    for entry in args.office or ():
        offices.update(parse_offices(entry))
    managers = set(config.managers) | set(args.manager or ())
    gateways = set(config.gateways) | set(getattr(args, "gateway", None) or ())
    journal = merge_journal(
        config.journal,
        {
            "directory": getattr(args, "journal", None) or None,
            "filter": getattr(args, "journal_filter", None),
            "types": getattr(args, "journal_types", None),
            "max_segment_bytes": getattr(args, "journal_max_segment_bytes", None),
            "max_segment_age_ms": getattr(args, "journal_max_segment_age_ms", None),
            "fsync": getattr(args, "journal_fsync", None),
            "fsync_interval_ms": getattr(args, "journal_fsync_interval_ms", None),
            "max_bytes": getattr(args, "journal_max_bytes", None),
            "max_age_ms": getattr(args, "journal_max_age_ms", None),
        },
    )
    return replace(
        config,
        offices=offices,
        managers=frozenset(managers),
        gateways=frozenset(gateways),
        journal=journal,
    )


async def run_broker(
    config: BrokerConfig, objects_port: int | None = None, ready: Callable[[Broker], None] = print
) -> None:
    """Run the broker (and the Object System and MOP listeners) until SIGINT/SIGTERM.

    Args:
        config: the settings (``objects_links``, ``objects_server_peers`` and ``mop_port`` are
            read from it).
        objects_port: run the Object System listener too (None: not; with ``objects_links``
            the object server runs without a listener).
        ready: called once listening (default: prints the address).
    """
    broker = Broker(config)
    await broker.start()
    stoppers: list[Callable[[], Awaitable[None]]] = [broker.stop]
    try:
        if config.metrics_port is not None:
            stoppers.append((await start_metrics(broker, config.metrics_port)).stop)
        if objects_port is not None or config.objects_links:
            stoppers.append(await _start_objects(broker, objects_port))
        if config.mop_port is not None:
            stoppers.append(await _start_mop(broker, config.mop_port))
    except BaseException:
        for stopper in reversed(stoppers):
            with contextlib.suppress(Exception):
                await stopper()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    ready(broker)
    settle_heap()
    try:
        await stop.wait()
    finally:
        for stopper in reversed(stoppers):
            with contextlib.suppress(Exception):
                await stopper()


def _bus_url(broker: Broker) -> str:
    host = broker.config.host
    scheme = "bus" if broker.config.tls_cert is None else "bus+tls"  # its own listener's
    return (
        f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '', 'localhost') else host}:{broker.port}"
    )


async def _start_objects(broker: Broker, port: int | None) -> Callable[[], Awaitable[None]]:
    return (await open_objects(broker, port)).stop


async def open_objects(broker: Broker, port: int | None) -> RunningBridge:
    """Start the broker's Object System server, bridged to it, with its listener on ``port``
    (None: none; 0: any free one) and its links, over TLS as the broker's settings say.

    Raises:
        ConnectError: the port cannot be bound.
        ConfigError: a TLS file, a link or a server peer is bad.
    """
    config = broker.config
    return await open_bridge(
        _bus_url(broker),
        config.host,
        port,
        links=config.objects_links,
        server_peers=config.objects_server_peers,
        tls=listener_context(config.tls_cert, config.tls_key, config.tls_ca),
        link_ca=config.tls_ca,
        tls_handshake_timeout=config.connect_timeout_ms / 1000,
        local_link=broker.local_link,  # in process: its own TLS and secrets are no obstacle
    )


async def _start_mop(broker: Broker, port: int) -> Callable[[], Awaitable[None]]:
    """Start the MOP listener: MOP post offices join the bus under their own names."""
    return await start_mop(broker, broker.config.host, port)


def _main(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"busgate broker: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not config.offices and not config.open:
        print(
            "busgate broker: no post office configured; add --office NAME:SECRET "
            "(or BUSGATE_OFFICES) or --open for local development",
            file=sys.stderr,
        )
        return 2

    def ready(broker: Broker) -> None:
        print(f"busgate broker listening on {config.host}:{broker.port}", flush=True)

    try:
        run_main(run_broker(config, config.objects_port, ready))
    except BusError as exc:
        print(f"busgate broker: {exc}", file=sys.stderr)
        return 1
    return 0
