"""What ``busgate run`` starts and what it started: its options, its ports and its parts.

:func:`check_ports` refuses a port out of range or one port given to two parts before anything
starts; :func:`bind_port` turns a taken port into one line naming the flag that changes it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bus.asyncio.listen import listen_socket
from bus.errors import ConfigError

__all__ = [
    "MANAGER",
    "RunOptions",
    "Running",
    "bind_port",
    "check_port_free",
    "check_ports",
    "connect_host",
    "display_host",
    "journal_directory",
]

#: The manager post office ``busgate run`` adds (its secret is new at every start).
MANAGER = "admin"
#: The journal ``busgate run`` keeps by default: at most this many bytes ...
JOURNAL_MAX_BYTES: Final = 256 * 1024 * 1024
#: ... and segments of at most this age, in milliseconds (7 days, as the JetStream stream).
JOURNAL_MAX_AGE_MS: Final = 7 * 24 * 3600 * 1000
#: Its segments: small and short, so that retention frees space in small steps.
JOURNAL_SEGMENT_BYTES: Final = 16 * 1024 * 1024
JOURNAL_SEGMENT_AGE_MS: Final = 3600 * 1000


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
        journal: the broker's journal directory ("": the default, :func:`journal_directory`;
            None: no journal).
        journal_max_bytes, journal_max_age_ms: its retention (0: no limit).
        spark: start a Spark Connect server beside the stack (``--spark``), through which the
            gateway rebuilds its report from the journal.
        spark_port: its port (0: a free one).
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
    journal: str | None = ""
    journal_max_bytes: int = JOURNAL_MAX_BYTES
    journal_max_age_ms: int = JOURNAL_MAX_AGE_MS
    spark: bool = False
    spark_port: int = 0


def journal_directory(options: RunOptions, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where ``busgate run`` journals: ``--journal DIR``; by default a directory of the user's
    state (``$XDG_STATE_HOME/busgate/journal``, else ``~/.local/state/...``) per bus port
    (``journal`` for 4000, ``journal-PORT`` for another), so a restarted run goes on with the
    same sequence numbers; for ``--bus-port 0`` (a new bus each time) a new temporary one.
    None: no journal (``--no-journal``)."""
    if options.journal is None:
        return None
    if options.journal:
        return Path(options.journal).expanduser()
    if options.bus_port == 0:
        return Path(tempfile.mkdtemp(prefix="busgate-journal-"))
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    name = "journal" if options.bus_port == 4000 else f"journal-{options.bus_port}"
    return Path(state) / "busgate" / name


@dataclass
class Running:
    """What :func:`run_all` started, and the URLs to reach it."""

    bus_url: str
    http_url: str | None = None
    objects_url: str | None = None
    metrics_url: str | None = None
    mop_url: str | None = None
    manager_secret: str = ""
    #: The file that holds it (the banner's ``busgate status`` line names the file, not it).
    manager_secret_file: Path | None = None
    #: The broker's in-process links (``Broker.local_link``): its Object System bridge's way in.
    local_link: Callable[[str | None], Awaitable[socket.socket]] | None = None
    #: The broker's journal directory (None: none), and whether it is a temporary one.
    journal: Path | None = None
    journal_temporary: bool = False
    #: The Spark Connect server's ``sc://`` URL (``--spark``; None: none).
    spark_url: str | None = None
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


#: The flags of each port, in the order they are checked.
_PORT_FLAGS = (
    ("port", "--port"),
    ("bus_port", "--bus-port"),
    ("objects_port", "--objects-port"),
    ("metrics_port", "--metrics-port"),
    ("mop_port", "--mop-port"),
    ("spark_port", "--spark-port"),
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
        if name == "spark_port" and not options.spark:
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


def check_port_free(host: str, port: int, flag: str) -> None:
    """Refuse a taken port now (0, a free one, is always free); see :func:`bind_port`."""
    if port != 0:
        bind_port(host, port, flag).close()


def bind_port(host: str, port: int, flag: str) -> socket.socket:
    """A non-blocking socket listening on ``host:port``.

    Raises:
        ConfigError: the port is taken (naming ``flag``, which changes it) or cannot be used.
    """
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


def display_host(host: str) -> str:
    """How the banner shows a listening address (``localhost`` for a loopback or any)."""
    return "localhost" if host in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "::") else host


def connect_host(host: str) -> str:
    """Where a local client reaches a server listening on ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "localhost") else host
