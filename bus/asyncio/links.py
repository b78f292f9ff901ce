"""Where a bus URL leads: the transport factory :func:`bus.asyncio.client.connect` gives its
client (a new transport for each connection and reconnection)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

from bus.asyncio.transport import BrokerTransport, Transport
from bus.errors import ConfigError
from bus.link.bus_url import parse_bus_url
from bus.link.tls import TLS_SCHEME, client_context

__all__ = ["TransportFactory", "parse_url", "transport_factory"]

#: Makes a transport: ``factory(inbox, reconnecting)``.
TransportFactory = Callable[[str, bool], Transport]


def parse_url(url: str) -> tuple[str, str, int, str | None, str | None]:
    """``(scheme, host, port, user, password)`` of a bus URL (of its first server, for a
    ``nats://`` list of several: the NATS transport reads them all; :mod:`bus.link.bus_url`).

    Raises:
        ConfigError: an unknown scheme or a bad port.
    """
    parsed = parse_bus_url(url)
    return parsed.scheme, parsed.host, parsed.port, parsed.user, parsed.password


def transport_factory(
    url: str,
    name: str | None,
    secret: str | None,
    *,
    mode: str | None,
    connect_timeout: float,
    tls: ssl.SSLContext | None,
) -> tuple[TransportFactory, str | None]:
    """The factory of the transports to ``url`` and the post office name they log in as
    (``name``, else the URL's user); see :func:`bus.asyncio.client.connect` for the rest.

    Raises:
        ConfigError: a bad URL.
    """
    scheme, host, port, user, password = parse_url(url)
    name = name or user
    secret = secret if secret is not None else password
    if scheme == TLS_SCHEME and tls is None:
        tls = client_context()
    elif scheme != TLS_SCHEME:
        tls = None

    known: list[str] = []  # a NATS cluster's servers the links learnt (NatsTransport)

    def factory(inbox: str, reconnecting: bool) -> Transport:
        if scheme == "nats":
            return _nats_transport(
                url,
                name=name,
                secret=secret,
                inbox=inbox,
                connect_timeout=connect_timeout,
                known=known,
            )
        return BrokerTransport(
            host,
            port,
            name=name,
            secret=secret,
            mode=mode,
            inbox=inbox,
            reconnect=reconnecting,
            connect_timeout=connect_timeout,
            tls=tls,
        )

    return factory, name


def _nats_transport(url: str, **kwargs: Any) -> Transport:
    try:
        from bus.asyncio import nats as transport_nats
    except ImportError as exc:
        raise ConfigError("nats:// needs nats-py, which is not installed") from exc
    transport: Transport = transport_nats.NatsTransport(url, **kwargs)
    return transport
