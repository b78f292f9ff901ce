"""TLS for broker links: the contexts both sides build, and who a client certificate names.

The broker terminates TLS itself (``busgate broker --tls-cert --tls-key``); with ``--tls-ca`` it
also asks every client for a certificate signed by that CA (mutual TLS), and a client that logs
in with ``mode=tls`` is the post office its certificate names (the subject's common name, else
its first DNS name), with that office's rights (manager, gateway). Clients reach it with
``bus+tls://host:port`` and trust the system's CAs, or ``BUSGATE_BUS_TLS_CA``; their own
certificate comes from ``BUSGATE_BUS_TLS_CERT``/``_KEY`` (or :func:`client_context`'s arguments).

The same certificate serves every other listener of that broker (Object System, MOP): with a
certificate, all of them speak TLS only. The links a broker's own parts open (Object System
``tls://host:port`` links, the MOP listener's bus clients) use :func:`link_context`.
See PROTOCOL.md section 4.7.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any, Final

from bus.errors import ConfigError

__all__ = [
    "ENV_CA",
    "ENV_CERT",
    "ENV_KEY",
    "TLS_SCHEME",
    "certificate_name",
    "client_context",
    "link_context",
    "listener_context",
    "server_context",
    "tls_failure",
]

#: The URL scheme of a broker link over TLS.
TLS_SCHEME: Final = "bus+tls"
#: Environment variables a client reads when given no context: the CA file it trusts (else
#: the system's), and its own certificate and key (for mutual TLS).
ENV_CA: Final = "BUSGATE_BUS_TLS_CA"
ENV_CERT: Final = "BUSGATE_BUS_TLS_CERT"
ENV_KEY: Final = "BUSGATE_BUS_TLS_KEY"


def server_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """The broker's context: its certificate, and with ``ca`` mutual TLS (a client
    certificate signed by ``ca`` is required).

    Raises:
        ConfigError: a file is missing or not a certificate/key.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert, key)
    if ca is not None:
        _load_ca(context, ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def listener_context(
    cert: str | None, key: str | None, ca: str | None = None
) -> ssl.SSLContext | None:
    """:func:`server_context` for a broker's other listeners (Object System, MOP) when it has a
    certificate and key, else None (then they are plain TCP, as the broker's own port).

    Raises:
        ConfigError: a file is missing or not a certificate/key.
    """
    if cert is None or key is None:
        return None
    return server_context(cert, key, ca)


def client_context(
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ssl.SSLContext:
    """A client's context: verifies the broker against ``ca`` (``BUSGATE_BUS_TLS_CA``, else
    the system's CAs) and presents ``cert``/``key`` (default ``BUSGATE_BUS_TLS_CERT``, ``_KEY``).

    Raises:
        ConfigError: a file is missing or not a certificate/key, or a certificate without key.
    """
    env = os.environ if environ is None else environ
    ca = ca or env.get(ENV_CA) or None
    cert = cert or env.get(ENV_CERT) or None
    key = key or env.get(ENV_KEY) or None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca is not None:
        _load_ca(context, ca)
    if cert is not None:
        _load_chain(context, cert, key)
    elif key is not None:
        raise ConfigError(f"{ENV_KEY} (a key) without {ENV_CERT} (its certificate)")
    return context


def link_context(ca: str | None = None, environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """The context of a link a broker's own parts open (an Object System ``tls://`` link, the
    MOP listener's bus clients): :func:`client_context` from the environment (the system's CAs,
    ``BUSGATE_BUS_TLS_CA``, the client certificate of ``BUSGATE_BUS_TLS_CERT``/``_KEY``), and
    also trusting ``ca`` (the broker's ``--tls-ca``).

    Raises:
        ConfigError: a file is missing or not a certificate/key, or a certificate without key.
    """
    context = client_context(environ=environ)
    if ca is not None:
        _load_ca(context, ca)
    return context


def tls_failure(exc: ssl.SSLError) -> str:
    """What a failed TLS handshake of a link means, with the likely fix, for a log or an error."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = f"{exc.reason}: {exc.verify_message}" if exc.verify_message else exc.reason
        hint = "is its certificate signed by a CA we trust (BUSGATE_BUS_TLS_CA, --tls-ca)?"
    else:
        detail, hint = exc.reason, "does the other side speak TLS?"
    return f"TLS failed: {detail or exc} ({hint})"


def certificate_name(peer: Mapping[str, Any] | None) -> str | None:
    """The name a verified peer certificate gives (``ssl.SSLObject.getpeercert()``): the
    subject's common name, else its first DNS name; None without a certificate."""
    if not peer:
        return None
    for rdn in peer.get("subject", ()):
        for attribute, value in rdn:
            if attribute == "commonName" and value:
                return str(value)
    for kind, value in peer.get("subjectAltName", ()):
        if kind == "DNS" and value:
            return str(value)
    return None


def _load_chain(context: ssl.SSLContext, cert: str, key: str | None) -> None:
    try:
        context.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise ConfigError(f"TLS certificate or key not found: {exc.filename}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load the TLS certificate {cert!r}: {exc}") from exc


def _load_ca(context: ssl.SSLContext, ca: str) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except FileNotFoundError as exc:
        raise ConfigError(f"TLS CA file not found: {ca}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load the TLS CA file {ca!r}: {exc}") from exc
