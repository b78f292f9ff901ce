"""Bus URLs: where a link goes, read without I/O (``docs/PROTOCOL.md`` 4.3 and section 10).

- ``bus://[name:secret@]host[:port]`` (port 4000; ``tcp://`` is the same), ``bus+tls://...``
  over TLS: one broker.
- ``nats://[user:password@]host[:port][,host[:port]...][?prefix=P&stream=S&replicas=N]``
  (port 4222): one NATS server or several of one cluster, the client connecting to one of them
  and moving to another when it goes. ``nats://a:4222,nats://b:4222`` (each server with its
  scheme, as NATS's own clients write a list) reads the same. The options after ``?`` belong
  to the whole URL, wherever they are written.

Every client, the gateway, the CLI and the journal recorder read a URL here, so a URL means
the same thing everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from bus.errors import ConfigError
from bus.masking import mask_url

__all__ = ["DEFAULT_PORTS", "SCHEMES", "BusUrl", "parse_bus_url"]

#: Each scheme's port when the URL names none.
DEFAULT_PORTS: Final[Mapping[str, int]] = {"bus": 4000, "tcp": 4000, "bus+tls": 4000, "nats": 4222}
#: The schemes a bus URL may have.
SCHEMES: Final = tuple(DEFAULT_PORTS)


@dataclass(frozen=True)
class BusUrl:
    """A parsed bus URL.

    Attributes:
        scheme: ``bus``, ``tcp``, ``bus+tls`` or ``nats``.
        servers: ``(host, port)`` of each server, in the order written (at least one).
        user: the name (NATS user) of the URL, if any.
        password: its secret (NATS password), if any.
        options: what follows ``?`` (``prefix``, ``stream``, ``replicas``), the first value of
            each key.
    """

    scheme: str
    servers: tuple[tuple[str, int], ...]
    user: str | None = None
    password: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """The first server's host."""
        return self.servers[0][0]

    @property
    def port(self) -> int:
        """The first server's port."""
        return self.servers[0][1]

    def addresses(self) -> list[str]:
        """Each server as ``host:port`` (an IPv6 host in brackets), without credentials."""
        return [
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.servers
        ]


def parse_bus_url(url: str) -> BusUrl:
    """Read a bus URL (see the module doc); a URL without a scheme is ``bus://``.

    Raises:
        ConfigError: an unknown scheme, a bad port, an empty server in a list, several
            servers on a scheme other than ``nats://``, or schemes mixed in one list (the
            message names the part at fault, never the credentials).
    """
    text = url.strip()
    pieces = [piece.strip() for piece in text.split(",")]
    first = pieces[0]
    scheme = first.partition("://")[0].lower() if "://" in first else "bus"
    if scheme not in DEFAULT_PORTS:
        raise ConfigError(
            f"unknown bus URL scheme {scheme!r} (bus://host:port, bus+tls://host:port or "
            "nats://host:port[,host:port...])"
        )
    if len(pieces) > 1 and scheme != "nats":
        raise ConfigError(
            f"a {scheme}:// URL names one broker; a list of servers (a:4222,b:4222) is for a "
            "NATS cluster (nats://)"
        )
    servers: list[tuple[str, int]] = []
    user = password = None
    options: dict[str, str] = {}
    for piece in pieces:
        if "://" in piece:
            own = piece.partition("://")[0].lower()
            if own != scheme:
                raise ConfigError(f"one bus URL mixes {scheme}:// and {own}://")
        else:
            piece = f"{scheme}://{piece}"
        parts = urlsplit(piece)
        where = parts.netloc.rpartition("@")[2]  # what an error may show: no credentials
        if not where:
            raise ConfigError(f"an empty server in bus URL {mask_url(text)!r}")
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise ConfigError(f"bad port in bus URL: {where!r} (host:port, port 1-65535)") from exc
        servers.append((parts.hostname or "127.0.0.1", port))
        if user is None and parts.username:
            user = unquote(parts.username)
            password = unquote(parts.password) if parts.password else None
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            options.setdefault(key, value)
    return BusUrl(scheme, tuple(servers), user, password, options)
