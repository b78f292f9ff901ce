"""Where an Object System server links to, and who may link in (PROTOCOL.md 6.6).

Pure parsing, no sockets: ``--objects-link`` values (``HOST:PORT``, or ``tls://HOST:PORT`` for a
link over TLS, PROTOCOL.md 4.7) and ``--objects-server-peer`` values (addresses or networks).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from bus.errors import ConfigError

__all__ = ["TLS_LINK_PREFIX", "LinkTarget", "parse_link", "parse_link_target", "parse_server_peers"]

#: The prefix of a link over TLS: ``tls://host:port`` (a bare ``host:port`` is plain TCP).
TLS_LINK_PREFIX: Final = "tls://"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class LinkTarget:
    """A server to link to: ``host``, ``port`` and whether the link speaks TLS."""

    host: str
    port: int
    tls: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{TLS_LINK_PREFIX if self.tls else ''}{host}:{self.port}"


def parse_server_peers(entries: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/24``, ``::1``) allowed the server role.

    Raises:
        ConfigError: an entry that is neither.
    """
    networks: list[Network] = []
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise ConfigError(f"server peer {text!r} is not an address or a network") from exc
    return tuple(networks)


def parse_link_target(text: str) -> LinkTarget:
    """``HOST:PORT`` (plain) or ``tls://HOST:PORT`` (TLS) of a server to link to; IPv6 as
    ``[::1]:7890``.

    Raises:
        ConfigError: not ``[tls://]HOST:PORT`` with a port in 1..65535.
    """
    address = text.strip()
    tls = address.lower().startswith(TLS_LINK_PREFIX)
    if tls:
        address = address[len(TLS_LINK_PREFIX) :]
    host, _, port = address.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not host or "://" in host or not 0 < number < 65536:
        raise ConfigError(
            f"an Object System link must be HOST:PORT or tls://HOST:PORT, got {text!r}"
        )
    return LinkTarget(host.strip("[]"), number, tls)


def parse_link(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of a server to link to over plain TCP (``[::1]:7890`` for IPv6).

    Raises:
        ConfigError: not ``HOST:PORT`` with a port in 1..65535, or a ``tls://`` link (where
            only plain links are made; the broker's and ``busgate run``'s servers take
            :func:`parse_link_target`).
    """
    target = parse_link_target(text)
    if target.tls:
        raise ConfigError(
            f"a tls:// link ({text!r}) is made by busgate broker and busgate run only: "
            "give HOST:PORT here"
        )
    return target.host, target.port
