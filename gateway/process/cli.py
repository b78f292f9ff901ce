"""``busgate gateway``: run the HTTP gateway under uvicorn.

Every flag has a ``BUSGATE_GATEWAY_<NAME>`` environment variable and a key in the ``[gateway]``
table of the ``--config`` TOML file (flags win over the environment, which wins over the file)::

    busgate gateway --bus bus://127.0.0.1:4000 --port 8080
    busgate gateway --host 0.0.0.0 --api-key ops:s3cret --api-key ci:k2:demo|build.*:ci.*

:func:`make_server` and :func:`serve` (from :mod:`gateway.process.server`, re-exported here) are
what
``busgate run`` uses to start the gateway next to the embedded broker.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from bus.asyncio.loop import run as run_main
from bus.errors import ConfigError
from gateway.process.server import make_server, serve, uvicorn_config
from gateway.process.settings import GatewaySettings, load_settings
from gateway.process.workers import Workers, listen_socket

__all__ = ["make_server", "register", "serve", "settings_from_args", "uvicorn_config"]


def register(subparsers: Any) -> None:
    """Add the ``gateway`` subcommand."""
    parser = subparsers.add_parser(
        "gateway",
        help="run the HTTP gateway",
        description="Run the HTTP gateway (REST, NDJSON, SSE, WebSocket) in front of a broker.",
    )
    add = parser.add_argument
    add("--bus", dest="bus_url", help="broker URL (default bus://127.0.0.1:4000)")
    add("--bus-name", help="name the gateway authenticates to the broker with")
    add("--bus-secret", help="secret for --bus-name")
    add("--host", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, help="port to listen on (default 8080)")
    add("--config", help="TOML file with a [gateway] table (or $BUSGATE_GATEWAY_CONFIG)")
    add("--timeout", dest="default_timeout", type=float, help="default request timeout, s (5)")
    add("--max-timeout", type=float, help="cap on a client's timeout, s (60)")
    add("--max-body", type=int, help="largest request body, bytes (262144)")
    add("--auth", choices=("auto", "on", "off"), help="authentication (auto)")
    add("--api-key", dest="api_keys", action="append",
        metavar="NAME:KEY[:GROUPS:TYPES[:presence]]",
        help="accept this API key (repeatable; patterns separated by |)")  # fmt: skip
    add("--jwt-secret", help="accept HS256 bearer tokens signed with this secret (>= 32 bytes)")
    add("--jwt-jwks", metavar="URL|FILE",
        help="accept RS256/ES256 bearer tokens signed by a key of this JWKS (by kid)")  # fmt: skip
    add("--jwt-audience", help="required aud claim of bearer tokens")
    add("--jwt-issuer", help="required iss claim of bearer tokens")
    add("--auth-fail-limit", type=int,
        help="wrong secrets a client address may send at once before 429 (10; 0: off)")  # fmt: skip
    add("--auth-fail-window", type=float,
        help="seconds for that allowance to refill (60)")  # fmt: skip
    add("--cors-origin", dest="cors_origins", action="append", metavar="ORIGIN",
        help="allow this origin by CORS (repeatable; * for any)")  # fmt: skip
    add("--rate-limit", type=float, help="requests per second per key (0: unlimited)")
    add("--rate-burst", type=int, help="requests a key may send at once (20)")
    add("--web-dir", help="static console directory served at / ('' for none)")
    add("--report-dir", help="busgate report directory served read-only at /reports/")
    add("--objects-link", dest="objects_links", action="append", metavar="[tls://]HOST:PORT",
        help="link the /ws object server to this Object System server (repeatable)")  # fmt: skip
    add("--ws-allow-server-role", action="store_const", const=True, default=None,
        help="let /ws clients subscribe with role: server (trusted networks only)")  # fmt: skip
    add("--ws-compression", action="store_const", const=True, default=None,
        help="accept permessage-deflate on /ws when a client offers it (off)")  # fmt: skip
    add("--ws-ping-interval", type=float,
        help="seconds between keepalive pings on /ws (25; 0: none)")  # fmt: skip
    add("--ws-ping-timeout", type=float,
        help="seconds a ping's pong may take before the connection is closed (20)")  # fmt: skip
    add("--sse-keepalive-interval", type=float,
        help="seconds of quiet before an SSE stream gets a keepalive comment (30)")  # fmt: skip
    add("--tls-cert", help="TLS certificate (PEM): serve HTTPS and wss:// only")
    add("--tls-key", help="the TLS certificate's private key (PEM)")
    add("--workers", type=int,
        help="gateway processes on the port, each with its own bus link (1)")  # fmt: skip
    add("--push-dir", metavar="DIR",
        help="run push subscriptions, keeping their positions in DIR (/v1/admin/push)")  # fmt: skip
    add("--idempotency-window", type=float,
        help="seconds an Idempotency-Key's first outcome is answered again (120)")  # fmt: skip
    add("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.set_defaults(func=run)


_FIELDS = (
    "bus_url", "bus_name", "bus_secret", "host", "port", "default_timeout", "max_timeout",
    "max_body", "auth", "api_keys", "jwt_secret", "jwt_jwks", "jwt_audience", "jwt_issuer",
    "auth_fail_limit", "auth_fail_window", "cors_origins", "rate_limit", "rate_burst",
    "web_dir", "report_dir", "objects_links", "ws_allow_server_role", "ws_compression", "workers",
    "tls_cert", "tls_key", "idempotency_window", "push_dir", "ws_ping_interval",
    "ws_ping_timeout", "sse_keepalive_interval",
)  # fmt: skip


def settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    """Settings from parsed flags, the environment and the config file.

    Raises:
        ConfigError: a bad value or combination.
    """
    overrides = {name: getattr(args, name, None) for name in _FIELDS}
    return load_settings(overrides, config_file=getattr(args, "config", None))


def run(args: argparse.Namespace) -> int:
    """Entry point of ``busgate gateway``."""
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        print(f"busgate gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if settings.workers == 1:
        run_main(serve(settings, args.log_level))
        return 0
    try:
        sock = listen_socket(settings.host, settings.port)
    except ConfigError as exc:
        print(f"busgate gateway: {exc}", file=sys.stderr)
        return 1
    print(f"busgate gateway: {settings.workers} workers on {settings.host}:"
          f"{sock.getsockname()[1]}", flush=True)  # fmt: skip
    return Workers(settings, sock, settings.workers, args.log_level).run_until_signal()
