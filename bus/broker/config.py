"""Broker settings: one frozen dataclass, read from a JSON file, ``BUSGATE_*`` variables and flags.

Precedence, lowest first: the defaults below, the JSON config file, environment variables,
command-line flags (see ``busgate broker --help``). The JSON file uses MOP's camelCase names
(seed 001: ``port``, ``pingIntervalMS``, ``maxMessageSize``) and is what ``manage.write`` writes::

    {"host": "127.0.0.1", "port": 4000, "pingIntervalMS": 5000, "maxMessageSize": 1048576,
     "maxConnections": 1000, "maxSubscriptions": 1000, "maxQueueBytes": 67108864,
     "writeDeadlineMS": 10000,
     "connectTimeoutMS": 2000, "maxPendingConnections": 256, "maxHandshakeBytes": 16384,
     "maxAuthFailures": 10, "open": false, "replayMemory": 100000,
     "objectsPort": null, "metricsPort": null, "objectsLinks": [], "objectsServerPeers": [],
     "mopPort": null, "logLevel": "INFO",
     "postOffices": {"gateway": {"secret": "s3cret"}, "admin": {"secret": "x", "manager": true}},
     "journal": {"directory": "/var/lib/busgate/journal", "filter": "*", "types": "",
                 "maxSegmentBytes": 67108864, "maxSegmentAgeMS": 3600000,
                 "fsync": "interval", "fsyncIntervalMS": 1000}}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

from bus.broker.journal_setting import (
    JOURNAL_FSYNC_POLICIES,
    JournalSetting,
    journal_from_env,
    merge_journal,
    read_journal,
)
from bus.errors import ConfigError
from bus.objects.address import parse_link_target, parse_server_peers

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_MS",
    "DEFAULT_MAX_AUTH_FAILURES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HANDSHAKE_BYTES",
    "DEFAULT_MAX_PENDING_CONNECTIONS",
    "DEFAULT_MAX_PENDING_PER_ADDRESS",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_MAX_QUEUE_BYTES",
    "DEFAULT_MAX_TOTAL_QUEUE_BYTES",
    "DEFAULT_WRITE_DEADLINE_MS",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "DEFAULT_PING_INTERVAL_MS",
    "DEFAULT_PORT",
    "ENV_PREFIX",
    "BrokerConfig",
    "JOURNAL_FSYNC_POLICIES",
    "JournalSetting",
    "merge_journal",
]

DEFAULT_PORT: Final = 4000  # seed 001
DEFAULT_PING_INTERVAL_MS: Final = 5000  # seed 001
#: MOP's 5000 bytes is too small for a gateway's bodies; 1 MiB, announced at connect time.
DEFAULT_MAX_MESSAGE_SIZE: Final = 1024 * 1024
DEFAULT_MAX_CONNECTIONS: Final = 1000
DEFAULT_MAX_SUBSCRIPTIONS: Final = 1000
#: Bytes waiting to be written to one connection before it is evicted as a slow consumer.
#: 64 MiB, as nats-server's max_pending: a burst to a subscriber that reads is not an eviction.
DEFAULT_MAX_QUEUE_BYTES: Final = 64 * 1024 * 1024
#: Bytes waiting over all connections: past it, the one holding the most is evicted (so the
#: broker's memory is bounded however many links fall behind at once).
DEFAULT_MAX_TOTAL_QUEUE_BYTES: Final = 256 * 1024 * 1024
#: A link whose output has not moved for this long is a slow consumer (nats-server: 10 s).
DEFAULT_WRITE_DEADLINE_MS: Final = 10_000
#: 2 s, as nats-server's auth timeout (MOP's connect timeout was 5 s): a socket that does not
#: log in is not kept long.
DEFAULT_CONNECT_TIMEOUT_MS: Final = 2000
#: Sockets that have not finished their handshake; beyond this the oldest one is closed.
DEFAULT_MAX_PENDING_CONNECTIONS: Final = 256
#: Sockets one address may have in their handshake at once; its next ones are refused.
DEFAULT_MAX_PENDING_PER_ADDRESS: Final = 64
#: Largest message before the handshake is done (a connect is a few hundred bytes).
DEFAULT_MAX_HANDSHAKE_BYTES: Final = 16 * 1024
#: Failed logins one address may make in AUTH_FAILURE_WINDOW_S before its sockets are refused.
DEFAULT_MAX_AUTH_FAILURES: Final = 10
ENV_PREFIX: Final = "BUSGATE_"


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker reads at start. Every limit is documented in PROTOCOL.md section 5.

    Attributes:
        host: address to listen on.
        port: TCP port (0: any free port; see ``Broker.port``).
        ping_interval_ms: interval between Pings; a peer silent for 1.5 intervals is dropped.
        max_message_size: largest message (joined data of its frames) accepted.
        max_connections: logged-in links; beyond this a new socket gets CONNECTION_REFUSED.
        max_subscriptions: patterns plus groups one connection may hold (its inbox not counted).
        max_queue_bytes: output waiting for one connection before it is evicted (slow consumer).
        max_total_queue_bytes: output waiting over all connections; past it the connection
            holding the most is evicted as a slow consumer.
        write_deadline_ms: a connection whose output has not moved for this long (the socket
            takes nothing) is evicted as a slow consumer too, however little waits.
        connect_timeout_ms: deadline for the first message and for the whole handshake.
        max_pending_connections: sockets still in their handshake; a new one beyond this
            closes the oldest of the address holding the most (Disconnect TIMEOUT), so a flood
            of idle sockets cannot keep clients that log in out.
        max_pending_per_address: sockets one address may have in their handshake at once;
            its next ones get CONNECTION_REFUSED at once.
        max_handshake_bytes: largest message accepted before the handshake is done.
        max_auth_failures: failed logins one address may make within a minute; then its new
            sockets get CONNECTION_REFUSED until the minute is over (0: no throttling).
        open: accept ``mode=open`` connects without a secret (local development only).
        offices: post office name -> shared secret.
        managers: post offices allowed to call management commands.
        gateways: post offices trusted to set CLR, the caller a request is made for
            (PROTOCOL.md 5.11); from any other post office the broker overwrites CLR.
        journal: journal every routed message there (None: no journal).
        config_file: the file ``manage.write`` writes (None: refused).
        replay_memory: connect ids remembered to refuse a replayed id.
        objects_port: also run the Object System listener on this port (None: not).
        metrics_port: also serve ``/metrics`` (Prometheus) on this port (None: not; see
            ``bus.broker.metrics``).
        objects_links: ``HOST:PORT`` (or ``tls://HOST:PORT``, over TLS) of Object System
            servers (Objectoplex or busgate) the broker's object server links to (it runs,
            bridged, even without ``objects_port``).
        objects_server_peers: addresses or networks whose inbound Object System connections
            may subscribe with ``role: server`` (PROTOCOL.md 6.6).
        mop_port: also run the MOP listener (seed 001 post offices) on this port (None: not).
        tls_cert: the broker's TLS certificate (PEM, chain first); with ``tls_key``, links
            speak TLS only (``bus+tls://``; PROTOCOL.md 4.7).
        tls_key: its private key (PEM).
        tls_ca: CA file for client certificates: with it, every client must present one it
            signed (mutual TLS), and ``mode=tls`` logs in as the office the certificate names.
        log_level: the log level of ``busgate broker`` (``DEBUG`` ... ``CRITICAL``).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ping_interval_ms: int = DEFAULT_PING_INTERVAL_MS
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES
    max_total_queue_bytes: int = DEFAULT_MAX_TOTAL_QUEUE_BYTES
    write_deadline_ms: int = DEFAULT_WRITE_DEADLINE_MS
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    max_pending_connections: int = DEFAULT_MAX_PENDING_CONNECTIONS
    max_pending_per_address: int = DEFAULT_MAX_PENDING_PER_ADDRESS
    max_handshake_bytes: int = DEFAULT_MAX_HANDSHAKE_BYTES
    max_auth_failures: int = DEFAULT_MAX_AUTH_FAILURES
    open: bool = False
    offices: Mapping[str, str] = field(default_factory=dict)
    managers: frozenset[str] = frozenset()
    gateways: frozenset[str] = frozenset()
    journal: JournalSetting | None = None
    config_file: str | None = None
    replay_memory: int = 100_000
    objects_port: int | None = None
    metrics_port: int | None = None
    objects_links: tuple[str, ...] = ()
    objects_server_peers: tuple[str, ...] = ()
    mop_port: int | None = None
    log_level: str = "INFO"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "ping_interval_ms",
            "max_message_size",
            "max_connections",
            "connect_timeout_ms",
            "max_pending_connections",
            "max_pending_per_address",
            "max_total_queue_bytes",
            "write_deadline_ms",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("max_subscriptions", "max_queue_bytes", "replay_memory", "max_auth_failures"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_handshake_bytes < 1024:
            raise ConfigError(
                f"max_handshake_bytes must be >= 1024 (a connect), got {self.max_handshake_bytes}"
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        for name in ("objects_port", "metrics_port", "mop_port"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 0 <= value <= 65535):
                raise ConfigError(f"{name} must be 0..65535, got {value!r}")
        object.__setattr__(self, "objects_links", _text_list("objects_links", self.objects_links))
        peers = _text_list("objects_server_peers", self.objects_server_peers)
        object.__setattr__(self, "objects_server_peers", peers)
        for link in self.objects_links:
            parse_link_target(link)
        parse_server_peers(self.objects_server_peers)
        level = str(self.log_level).upper()
        if level not in _LOG_LEVELS:
            raise ConfigError(f"log_level must be one of {', '.join(_LOG_LEVELS)}, got {level!r}")
        object.__setattr__(self, "log_level", level)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls_cert and tls_key go together (the certificate and its key)")
        if self.tls_ca is not None and self.tls_cert is None:
            raise ConfigError("tls_ca (client certificates) needs tls_cert and tls_key")
        object.__setattr__(self, "offices", dict(self.offices))
        object.__setattr__(self, "managers", frozenset(self.managers))
        object.__setattr__(self, "gateways", frozenset(self.gateways))

    # -- the JSON file -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The running configuration in the JSON file's shape (secrets included)."""
        offices: dict[str, dict[str, Any]] = {}
        for name, secret in sorted(self.offices.items()):
            offices[name] = {"secret": secret}
            if name in self.managers:
                offices[name]["manager"] = True
            if name in self.gateways:
                offices[name]["gateway"] = True
        data: dict[str, Any] = {key: getattr(self, attr) for key, attr in _SCALARS.items()}
        data.update({key: list(getattr(self, attr)) for key, attr in _LISTS.items()})
        data["postOffices"] = offices
        data["managers"] = sorted(self.managers - set(self.offices))
        if self.gateways - set(self.offices):
            data["gateways"] = sorted(self.gateways - set(self.offices))
        if self.journal is not None:
            data["journal"] = self.journal.to_json()
        return data

    def write(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the configuration as JSON, atomically (a temporary file, then a rename).

        Args:
            path: where; default ``config_file``.

        Returns:
            The path written.

        Raises:
            ConfigError: no path given and no ``config_file``, or the file cannot be written.
        """
        target = path if path is not None else self.config_file
        if target is None:
            raise ConfigError("no config file to write to (start the broker with --config)")
        final = Path(target)
        temporary = final.with_name(final.name + ".tmp")
        try:
            temporary.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
            temporary.replace(final)
        except OSError as exc:
            raise ConfigError(f"cannot write {final}: {exc}") from exc
        return final

    # -- reading -----------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> BrokerConfig:
        """Build a config from a JSON file, then environment variables, then ``overrides``.

        Args:
            path: JSON config file (None: ``BUSGATE_CONFIG`` if set, else none). A missing
                file is fine when ``path`` came from the environment or flags: ``manage.write``
                creates it.
            env: environment (default ``os.environ``); see :meth:`from_env`.
            **overrides: field values (e.g. from flags); ``None`` values are ignored.

        Returns:
            The config; ``config_file`` is the file read.

        Raises:
            ConfigError: an unreadable file, bad JSON, an unknown key or a bad value.
        """
        environ = os.environ if env is None else env
        if path is None:
            path = environ.get(ENV_PREFIX + "CONFIG") or None
        values: dict[str, Any] = {}
        if path is not None:
            values.update(_read_file(Path(path)))
            values["config_file"] = str(path)
        from_env = _from_env(environ)
        journal_env = from_env.pop("journal", None)
        values.update(from_env)
        if journal_env:
            values["journal"] = merge_journal(values.get("journal"), journal_env)
        values.update({key: value for key, value in overrides.items() if value is not None})
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"bad broker setting: {exc}") from exc

    def with_office(self, name: str, secret: str, manager: bool = False) -> BrokerConfig:
        """A copy with one more (or replaced) post office."""
        offices = {**self.offices, name: secret}
        managers = self.managers | {name} if manager else self.managers
        return replace(self, offices=offices, managers=managers)

    def without_office(self, name: str) -> BrokerConfig:
        """A copy without a post office (it also stops being a manager)."""
        offices = {key: value for key, value in self.offices.items() if key != name}
        return replace(self, offices=offices, managers=self.managers - {name})


# JSON key -> field name, for the plain values.
_SCALARS: Final = {
    "host": "host",
    "port": "port",
    "pingIntervalMS": "ping_interval_ms",
    "maxMessageSize": "max_message_size",
    "maxConnections": "max_connections",
    "maxSubscriptions": "max_subscriptions",
    "maxQueueBytes": "max_queue_bytes",
    "maxTotalQueueBytes": "max_total_queue_bytes",
    "writeDeadlineMS": "write_deadline_ms",
    "connectTimeoutMS": "connect_timeout_ms",
    "maxPendingConnections": "max_pending_connections",
    "maxPendingPerAddress": "max_pending_per_address",
    "maxHandshakeBytes": "max_handshake_bytes",
    "maxAuthFailures": "max_auth_failures",
    "open": "open",
    "replayMemory": "replay_memory",
    "objectsPort": "objects_port",
    "metricsPort": "metrics_port",
    "mopPort": "mop_port",
    "logLevel": "log_level",
    "tlsCert": "tls_cert",
    "tlsKey": "tls_key",
    "tlsCa": "tls_ca",
}
# JSON key -> field name, for the lists (``BUSGATE_OBJECTS_LINKS=a:7890,b:7890``).
_LISTS: Final = {
    "objectsLinks": "objects_links",
    "objectsServerPeers": "objects_server_peers",
}
_TEXT_FIELDS: Final = frozenset({"host", "log_level", "tls_cert", "tls_key", "tls_ca"})
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_INT_FIELDS: Final = {f.name for f in fields(BrokerConfig) if f.type == "int"}


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read broker config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"broker config {path}: the top level must be an object")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SCALARS:
            values[_SCALARS[key]] = value
        elif key in _LISTS:
            values[_LISTS[key]] = value
        elif key == "postOffices":
            values.update(_read_offices(path, value))
        elif key in ("managers", "gateways"):
            values.setdefault(key, set()).update(value)
        elif key == "journal":
            values["journal"] = read_journal(path, value)
        else:
            raise ConfigError(f"broker config {path}: unknown key {key!r}")
    for name in _INT_FIELDS & values.keys():
        if type(values[name]) is not int:
            raise ConfigError(f"broker config {path}: {name} must be an integer")
    return values


def _read_offices(path: Path, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"broker config {path}: postOffices must be an object")
    offices: dict[str, str] = {}
    managers: set[str] = set()
    gateways: set[str] = set()
    for name, entry in value.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("secret"), str):
            raise ConfigError(f"broker config {path}: post office {name!r} needs a secret")
        offices[name] = entry["secret"]
        if entry.get("manager"):
            managers.add(name)
        if entry.get("gateway"):
            gateways.add(name)
    return {"offices": offices, "managers": managers, "gateways": gateways}


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``BUSGATE_PORT=4000``, ``BUSGATE_OFFICES=name:secret,...``, ``BUSGATE_MANAGERS=a,b``,
    ``BUSGATE_GATEWAYS=gw``, ``BUSGATE_OPEN=1``, ``BUSGATE_JOURNAL=/dir`` (and
    ``BUSGATE_JOURNAL_FILTER``, ``_TYPES``,
    ``_MAX_SEGMENT_BYTES``, ``_MAX_SEGMENT_AGE_MS``, ``_FSYNC``, ``_FSYNC_INTERVAL_MS``: the
    ``journal`` entry is a dict of those fields, merged over the file's by ``load``), and one
    variable per scalar field in capitals (``BUSGATE_PING_INTERVAL_MS``, ...)."""
    values: dict[str, Any] = {}
    for name in _SCALARS.values():
        text = environ.get(ENV_PREFIX + name.upper())
        if text is None:
            continue
        values[name] = _parse_scalar(name, text)
    for name in _LISTS.values():
        if (text := environ.get(ENV_PREFIX + name.upper())) is not None:
            values[name] = tuple(item.strip() for item in text.split(",") if item.strip())
    if text := environ.get(ENV_PREFIX + "OFFICES", ""):
        values["offices"] = parse_offices(text)
    if text := environ.get(ENV_PREFIX + "MANAGERS", ""):
        values["managers"] = {name.strip() for name in text.split(",") if name.strip()}
    if text := environ.get(ENV_PREFIX + "GATEWAYS", ""):
        values["gateways"] = {name.strip() for name in text.split(",") if name.strip()}
    if journal := journal_from_env(environ, ENV_PREFIX):
        values["journal"] = journal
    return values


def _parse_scalar(name: str, text: str) -> Any:
    if name in _TEXT_FIELDS:
        return text
    if name == "open":
        return text.strip().lower() in ("1", "true", "yes", "on")
    try:
        return int(text)
    except ValueError as exc:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be an integer, got {text!r}") from exc


def _text_list(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{name} must be a list of text, got {value!r}")
    if not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{name} must be a list of text, got {value!r}")
    return tuple(value)


def parse_offices(text: str) -> dict[str, str]:
    """Parse ``name:secret,name2:secret2`` (the flag and variable form of post offices).

    Raises:
        ConfigError: an entry without ``:``.
    """
    offices: dict[str, str] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        name, sep, secret = entry.strip().partition(":")
        if not sep or not name:
            raise ConfigError(f"bad post office {entry!r}: expected name:secret")
        offices[name] = secret
    return offices
