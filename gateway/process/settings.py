"""Gateway settings: one frozen dataclass, read from a TOML file, the environment and flags.

Precedence, lowest to highest: the defaults below, the ``[gateway]`` table of a TOML config
file (``--config`` or ``$BUSGATE_GATEWAY_CONFIG``), environment variables, then the flags.
Every field has a ``BUSGATE_GATEWAY_<FIELD>`` variable (``BUSGATE_GATEWAY_PORT=8080``); a few
that no other busgate process reads also have a short name: ``BUSGATE_BUS`` (bus_url, shared
with the CLI clients), ``BUSGATE_API_KEYS``, ``BUSGATE_JWT_SECRET`` and ``BUSGATE_CORS_ORIGINS``.
(The broker reads ``BUSGATE_PORT``, ``BUSGATE_HOST`` and ``BUSGATE_CONFIG``, hence the longer
names.) Every field is checked once, in :meth:`GatewaySettings.__post_init__`; a bad value
raises :class:`bus.errors.ConfigError`.

Authentication (``auth``): ``"auto"`` (the default) turns it on as soon as an API key, a JWT
secret or a JWKS is configured; with none, it is off on a loopback host (with a loud warning)
and the gateway refuses to start on any other host. ``"on"`` and ``"off"`` force it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from bus.objects.address import parse_link_target
from bus.push import PushSpec
from gateway.process.resources import console_dir

__all__ = ["ApiKey", "GatewaySettings", "load_settings", "parse_api_key"]

_ENV_PREFIX = "BUSGATE_GATEWAY_"
_ENV_ALIASES = {
    "bus_url": "BUSGATE_BUS",
    "api_keys": "BUSGATE_API_KEYS",
    "jwt_secret": "BUSGATE_JWT_SECRET",
    "cors_origins": "BUSGATE_CORS_ORIGINS",
    "spark_remote": "BUSGATE_SPARK_REMOTE",
}
#: Settings read under an older name too (in a file, the environment or the arguments).
_RENAMED = {"keepalive": "sse_keepalive_interval"}
_AUTH_MODES = ("auto", "on", "off")
#: The keepalive defaults: fewer than a thousand writes a second for 20,000 idle clients.
SSE_KEEPALIVE_S = 30.0
WS_PING_S = 25.0
#: Shortest HS256 secret accepted, in bytes.
MIN_JWT_SECRET = 32


@dataclass(frozen=True)
class ApiKey:
    """One API key and what its holder may do.

    Attributes:
        name: who holds the key (used in logs, metrics and rate limiting; never the key).
        key: the secret sent as ``X-API-Key`` or ``Authorization: Bearer``.
        groups: ``fnmatch`` patterns of the groups it may send requests to (``"*"``: all).
        types: ``fnmatch`` patterns of the event types it may publish and subscribe to.
        rate: requests per second allowed (``None``: the gateway's ``rate_limit``).
        max_body: largest request body in bytes (``None``: the gateway's ``max_body``).
        presence: it may see who subscribes (``GET /v1/presence``, ``?presence=1``; a key
            with every permission, ``NAME:KEY``, may).
    """

    name: str
    key: str
    groups: tuple[str, ...] = ("*",)
    types: tuple[str, ...] = ("*",)
    rate: float | None = None
    max_body: int | None = None
    presence: bool = False

    def __repr__(self) -> str:
        # The secret never reaches a log line.
        return f"ApiKey(name={self.name!r}, groups={self.groups!r}, types={self.types!r})"


@dataclass(frozen=True)
class GatewaySettings:
    """Everything the gateway needs to run. All limits have documented defaults.

    Attributes:
        bus_url: the broker to connect to (``bus://host:port`` or ``nats://host:port``).
        bus_name: the name the gateway authenticates to the broker with (``None``: anonymous).
        bus_secret: the secret for ``bus_name``.
        host: address to listen on; loopback by default.
        port: TCP port to listen on (8080).
        default_timeout: seconds a request waits for its answer when the client names none (5 s,
            Kestrel's default request timeout).
        max_timeout: the cap on a client-chosen timeout (60 s).
        max_body: largest request body in bytes (256 KiB); larger gets 413.
        auth: ``"auto"``, ``"on"`` or ``"off"`` (see the module docstring).
        api_keys: the accepted API keys.
        jwt_secret: HS256 secret for bearer tokens, at least 32 bytes (``None``: HS256 tokens
            are not accepted).
        jwt_jwks: a JWKS (``https://...`` URL, e.g. an identity provider's ``jwks_uri``, or a
            file) whose public keys verify RS256/ES256 (and other asymmetric) bearer tokens,
            chosen by ``kid`` (``None``: such tokens are not accepted).
        jwt_jwks_ttl: seconds a fetched JWKS is used before it is fetched again (300 s).
        jwt_jwks_retry: least seconds between two fetches of the JWKS, after a failure or for a
            token naming an unknown ``kid`` (10 s).
        jwt_audience: required ``aud`` claim, if set (a token with an ``aud`` needs it).
        jwt_issuer: required ``iss`` claim, if set.
        auth_fail_limit: wrong secrets (unknown API keys, refused tokens) one client address
            may send at once before it gets 429 (10; 0: never throttled).
        auth_fail_window: seconds for that allowance to refill completely (60 s: after a
            burst of 10, one more try every 6 s).
        cors_origins: origins allowed by CORS (empty: CORS off; ``"*"``: any).
        rate_limit: requests per second per key or client address (0: unlimited).
        rate_burst: requests a key may send at once before the rate applies (20).
        event_buffer: published events kept for SSE ``Last-Event-ID`` replay (1000).
        subscription_linger: seconds a bus subscription outlives its last SSE client, so a
            client that reconnects with ``Last-Event-ID`` misses nothing (30 s).
        sse_queue: events waiting for one SSE client; a client that lets more pile up is sent
            an ``overflow`` error event and dropped (10,000: a burst is not a slow client).
        sse_keepalive_interval: seconds of quiet before an SSE stream gets a ``: keepalive``
            comment (30 s: between Centrifugo's 25 s and Mercure's 40 s, under the 60 s after
            which proxies commonly cut an idle connection; each is a write per stream; the old
            name ``keepalive`` is still read).
        ws_ping_interval: seconds between the keepalive pings of a ``/ws`` connection (25 s,
            as Centrifugo and Socket.IO; 0: none).
        ws_ping_timeout: seconds a ping's pong may take at least: a connection whose pong has
            not come by then and by the next ping is closed (1011) and dropped (20 s).
        shutdown_grace: seconds in-flight requests get to finish on shutdown (10 s).
        tls_cert: the gateway's TLS certificate (PEM): it serves HTTPS (and wss://) only.
        tls_key: its private key (PEM).
        header_timeout: seconds a request's line and headers may take to arrive; a slower
            client (a connect-only socket, a header byte now and then) gets 408 and is
            closed (10 s; see :mod:`gateway.process.http_protocol`).
        connect_retry: seconds between attempts to reach the bus when it is down (0.5 s); also
            the first delay of the client's reconnection backoff.
        reconnect_max: longest delay between reconnection attempts once connected before (2 s).
        web_dir: directory of the static console served at ``/`` (default: the console
            installed with the package, ``gateway/web/``; ``""``: none).
        report_dir: directory of a ``busgate report`` (``index.html``, SVG charts, ``tables/``)
            served read-only at ``/reports/`` and announced by ``GET /v1/reports`` (``None``:
            none). With authentication on, its files need the API's credentials (a caller that
            may reach every group), or the signed cookie ``GET /v1/reports`` sets.
        report_link_ttl: seconds that cookie stays valid (900 s; the console renews it).
        report_journal: the broker's journal directory; with ``spark_remote`` (and
            ``report_dir``), ``GET /v1/reports`` rebuilds the report through that server when
            the journal was written since the last one (``None``: the report is only served).
        spark_remote: a Spark Connect server, ``sc://HOST:PORT`` (``busgate spark serve``;
            default ``BUSGATE_SPARK_REMOTE``), that builds those reports.
        objects_links: ``[tls://]HOST:PORT`` of the Object System servers the gateway's own
            object server (for ``/ws``) links to (empty: ``BUSGATE_OBJECTS_LINK``, else the bus
            host on port 7890); a link that is down is logged as a WARNING.
        ws_allow_server_role: let ``/ws`` clients subscribe with ``role: server`` (off: such a
            subscription is refused with an error object; the role receives every object,
            whatever ``to`` says, so grant it only to trusted networks).
        ws_compression: accept WebSocket permessage-deflate (RFC 7692) on ``/ws`` when the
            client offers it (off, as in Centrifugo and NATS: compressing every small message
            for every subscriber costs the gateway about a third of its CPU in a fan-out, for a
            few bytes saved; turn it on for large, repetitive messages over slow links).
        ws_lean: answer ``/ws`` from the gateway's HTTP protocol, without the ASGI stack (on;
            see :mod:`gateway.websocket.lean`; off: uvicorn's WebSocket protocol, as before).
        workers: gateway processes serving the port (1; ``busgate gateway --workers N``: see
            :mod:`gateway.process.workers`).
        push_dir: where push subscriptions keep their positions and the ones the admin API
            declares (``None``: no push subscriptions; PROTOCOL.md 9.14).
        push: push subscriptions declared here (``[[gateway.push]]`` tables: ``name``,
            ``pattern``, ``url``, ``secret``, ... as :class:`bus.push.PushSpec`).
        idempotency_window: seconds an ``Idempotency-Key``'s first outcome is answered again
            by this gateway (120 s, the broker's and JetStream's duplicate window; a repeat on
            another gateway is caught by the bus only within that window: PROTOCOL.md 5.17).
    """

    bus_url: str = "bus://127.0.0.1:4000"
    bus_name: str | None = None
    bus_secret: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    default_timeout: float = 5.0
    max_timeout: float = 60.0
    max_body: int = 256 * 1024
    auth: str = "auto"
    api_keys: tuple[ApiKey, ...] = ()
    jwt_secret: str | None = None
    jwt_jwks: str | None = None
    jwt_jwks_ttl: float = 300.0
    jwt_jwks_retry: float = 10.0
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    auth_fail_limit: int = 10
    auth_fail_window: float = 60.0
    cors_origins: tuple[str, ...] = ()
    rate_limit: float = 0.0
    rate_burst: int = 20
    event_buffer: int = 1000
    subscription_linger: float = 30.0
    sse_queue: int = 10_000
    sse_keepalive_interval: float = SSE_KEEPALIVE_S
    ws_ping_interval: float = WS_PING_S
    ws_ping_timeout: float = 20.0
    shutdown_grace: float = 10.0
    header_timeout: float = 10.0
    tls_cert: str | None = None
    tls_key: str | None = None
    connect_retry: float = 0.5
    reconnect_max: float = 2.0
    web_dir: str = field(default_factory=console_dir)
    report_dir: str | None = None
    report_link_ttl: float = 900.0
    report_journal: str | None = None
    spark_remote: str | None = None
    objects_links: tuple[str, ...] = ()
    ws_allow_server_role: bool = False
    ws_compression: bool = False
    ws_lean: bool = True
    workers: int = 1
    idempotency_window: float = 120.0
    push_dir: str | None = None
    push: tuple[PushSpec, ...] = ()

    @property
    def keepalive(self) -> float:
        """The old name of :attr:`sse_keepalive_interval`."""
        return self.sse_keepalive_interval

    def __post_init__(self) -> None:
        for link in self.objects_links:
            try:
                parse_link_target(link)
            except ConfigError as exc:
                raise ConfigError(f"objects_links: {exc}") from exc
        _check(0 <= self.port <= 65535, f"port {self.port} is not in 0..65535")
        _check(self.default_timeout > 0, "default_timeout must be > 0")
        _check(self.max_timeout >= self.default_timeout, "max_timeout must be >= default_timeout")
        _check(self.max_body > 0, "max_body must be > 0")
        _check(self.auth in _AUTH_MODES, f"auth must be one of {', '.join(_AUTH_MODES)}")
        _check(self.rate_limit >= 0, "rate_limit must be >= 0")
        _check(self.rate_burst >= 1, "rate_burst must be >= 1")
        _check(self.event_buffer >= 0, "event_buffer must be >= 0")
        _check(self.sse_keepalive_interval > 0, "sse_keepalive_interval must be > 0")
        _check(self.ws_ping_interval >= 0, "ws_ping_interval must be >= 0 (0: no pings)")
        _check(self.ws_ping_timeout > 0, "ws_ping_timeout must be > 0")
        _check(self.sse_queue >= 1, "sse_queue must be >= 1")
        _check(self.shutdown_grace >= 0, "shutdown_grace must be >= 0")
        _check(self.header_timeout > 0, "header_timeout must be > 0")
        _check(
            (self.tls_cert is None) == (self.tls_key is None),
            "tls_cert and tls_key go together (the certificate and its key)",
        )
        for path in (self.tls_cert, self.tls_key):
            _check(path is None or Path(path).is_file(), f"TLS file not found: {path}")
        _check(self.connect_retry > 0, "connect_retry must be > 0")
        _check(self.reconnect_max >= self.connect_retry, "reconnect_max must be >= connect_retry")
        if self.jwt_secret is not None:
            # RFC 7518 section 3.2: an HS256 key must be at least as long as the hash (256 bits).
            _check(
                len(self.jwt_secret.encode()) >= MIN_JWT_SECRET,
                f"jwt_secret must be at least {MIN_JWT_SECRET} bytes (RFC 7518 section 3.2); make "
                "one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
            )
        _check(self.jwt_jwks_ttl > 0, "jwt_jwks_ttl must be > 0")
        _check(self.jwt_jwks_retry >= 0, "jwt_jwks_retry must be >= 0")
        _check(self.auth_fail_limit >= 0, "auth_fail_limit must be >= 0")
        _check(self.auth_fail_window > 0, "auth_fail_window must be > 0")
        _check(self.report_link_ttl > 0, "report_link_ttl must be > 0")
        _check(1 <= self.workers <= 64, f"workers must be 1..64, not {self.workers}")
        _check(self.idempotency_window > 0, "idempotency_window must be > 0")
        if self.jwt_jwks:
            _check(
                self.jwt_jwks.startswith(("http://", "https://"))
                or Path(self.jwt_jwks.removeprefix("file://")).is_file(),
                f"jwt_jwks must be an http(s) URL or a file, and {self.jwt_jwks!r} is no file",
            )
        names = [k.name for k in self.api_keys]
        _check(len(set(names)) == len(names), "API key names must be unique")
        if self.auth == "on":
            _check(self.has_credentials, "auth=on needs an API key, a JWT secret or a JWKS")
        if self.auth == "auto" and not self.has_credentials:
            _check(
                self.loopback,
                f"refusing to listen on {self.host} without authentication: configure an API "
                "key, a JWT secret or a JWKS, or set auth=off explicitly",
            )

    @property
    def has_credentials(self) -> bool:
        """True when an API key, a JWT secret or a JWKS is configured."""
        return bool(self.api_keys) or bool(self.jwt_secret) or bool(self.jwt_jwks)

    @property
    def loopback(self) -> bool:
        """True when the gateway listens on a loopback address only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def auth_enabled(self) -> bool:
        """Whether requests must carry credentials."""
        if self.auth == "auto":
            return self.has_credentials
        return self.auth == "on"

    def cap_timeout(self, requested: float | None) -> float:
        """The timeout a request gets: the client's choice (or the default), at most the cap."""
        if requested is None:
            return self.default_timeout
        return min(requested, self.max_timeout)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def parse_api_key(text: str) -> ApiKey:
    """Parse ``NAME:KEY`` (all permissions) or ``NAME:KEY:GROUPS:TYPES[:presence]``
    (``|``-separated patterns; ``presence``: it may see who subscribes, PROTOCOL.md 9.11).

    Args:
        text: the flag or environment value.

    Returns:
        The API key.

    Raises:
        ConfigError: the text has the wrong shape.
    """
    parts = text.split(":")
    bad = len(parts) not in (2, 4, 5) or not parts[0] or not parts[1]
    if bad or (len(parts) == 5 and parts[4] != "presence"):
        raise ConfigError(
            f"API key must be NAME:KEY or NAME:KEY:GROUPS:TYPES[:presence], got {parts[0]!r}:..."
        )
    if len(parts) == 2:
        return ApiKey(name=parts[0], key=parts[1], presence=True)
    groups = tuple(p for p in parts[2].split("|") if p)
    types = tuple(p for p in parts[3].split("|") if p)
    return ApiKey(parts[0], parts[1], groups, types, presence=len(parts) == 5)


def _api_key_from_table(table: Mapping[str, Any]) -> ApiKey:
    try:
        return ApiKey(
            name=str(table["name"]),
            key=str(table["key"]),
            groups=tuple(str(g) for g in table.get("groups", ("*",))),
            types=tuple(str(t) for t in table.get("types", ("*",))),
            rate=None if table.get("rate") is None else float(table["rate"]),
            max_body=None if table.get("max_body") is None else int(table["max_body"]),
            presence=_presence_of(table),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"bad [[gateway.api_keys]] entry: {exc}") from exc


def _presence_of(table: Mapping[str, Any]) -> bool:
    """A TOML key's ``presence``: given, or true when it limits neither groups nor types."""
    value = table.get("presence")
    if value is None:
        return "groups" not in table and "types" not in table
    if not isinstance(value, bool):
        raise TypeError("presence must be true or false")
    return value


def _convert(name: str, value: Any) -> Any:
    """Turn a value from TOML, the environment or a flag into the field's type."""
    kind = {f.name: f.type for f in fields(GatewaySettings)}[name]
    if name == "push":  # [[gateway.push]] tables (or their JSON): each one's own error
        return _push_specs(value)
    try:
        if name == "api_keys":
            if isinstance(value, str):
                return tuple(parse_api_key(v) for v in value.split(",") if v)
            return tuple(v if isinstance(v, ApiKey) else _convert_key(v) for v in value)
        if name in ("cors_origins", "objects_links"):
            items = value.split(",") if isinstance(value, str) else value
            return tuple(str(v).strip() for v in items if str(v).strip())
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(f"not a boolean: {value!r}")
            return text in ("1", "true", "yes", "on")
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        return None if value is None else str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad value for {name}: {value!r}") from exc


def _push_specs(value: Any) -> tuple[PushSpec, ...]:
    try:
        items = json.loads(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise ConfigError(f"bad value for push: {exc}") from exc
    if not isinstance(items, list | tuple):
        raise ConfigError("push must be a list of tables ([[gateway.push]])")
    found = []
    for item in items:
        if isinstance(item, PushSpec):
            found.append(item)
        elif isinstance(item, Mapping):
            found.append(PushSpec.from_json(item))
        else:
            raise ConfigError("push must be a list of tables ([[gateway.push]])")
    return tuple(found)


def _convert_key(value: Any) -> ApiKey:
    if isinstance(value, str):
        return parse_api_key(value)
    if isinstance(value, Mapping):
        return _api_key_from_table(value)
    raise ConfigError(f"bad API key entry: {type(value).__name__}")


def _from_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    table = doc.get("gateway", doc)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [gateway] must be a table")
    return table


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
) -> GatewaySettings:
    """Build settings from a TOML file, the environment and explicit overrides (flags).

    Args:
        overrides: field values that win over everything (``None`` values are ignored).
        environ: the environment to read ``BUSGATE_GATEWAY_<FIELD>`` (and the short names)
            from (default ``os.environ``).
        config_file: a TOML file with a ``[gateway]`` table (default ``$BUSGATE_GATEWAY_CONFIG``).

    Returns:
        The checked settings.

    Raises:
        ConfigError: an unknown key, a value of the wrong type, or an invalid combination.
    """
    env = os.environ if environ is None else environ
    known = {f.name for f in fields(GatewaySettings)}
    values: dict[str, Any] = {}
    path = config_file or env.get(_ENV_PREFIX + "CONFIG")
    if path:
        for key, value in _from_file(path).items():
            key = _RENAMED.get(key, key)
            if key not in known:
                raise ConfigError(f"unknown setting {key!r} in {path}")
            values[key] = _convert(key, value)
    for old, new in _RENAMED.items():
        text = env.get(_ENV_PREFIX + old.upper())
        if text is not None:
            values[new] = _convert(new, text)
    for name in sorted(known):
        text = env.get(_ENV_PREFIX + name.upper(), env.get(_ENV_ALIASES.get(name, "")))
        if text is not None:
            values[name] = _convert(name, text)
    for key, value in (overrides or {}).items():
        key = _RENAMED.get(key, key)
        if key not in known:
            raise ConfigError(f"unknown setting {key!r}")
        if value is not None:
            values[key] = _convert(key, value)
    return GatewaySettings(**values)
