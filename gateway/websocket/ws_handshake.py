"""The server side of the WebSocket opening handshake, sans-I/O (RFC 6455 4.2; PROTOCOL.md 6.8).

:func:`check_upgrade` reads an upgrade request's headers and returns its
``Sec-WebSocket-Key``, or raises :class:`HandshakeError` with the HTTP answer to give instead:
``400`` for a missing or malformed key (not base64 of 16 bytes, 4.2.1 item 5), ``426`` with
``Sec-WebSocket-Version: 13`` for any version but 13 (4.4). :func:`accept_response` is the
``101`` answer, :func:`refusal` any other. No extension and no subprotocol is agreed on here:
the server declines both by not naming them (4.2.2), which the RFC allows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from typing import Final

from bus.errors import RemoteError

__all__ = ["HandshakeError", "accept_key", "accept_response", "check_upgrade", "refusal"]

#: The GUID of RFC 6455 1.3, appended to the client's key.
_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_REASONS: Final = {400: b"Bad Request", 403: b"Forbidden", 426: b"Upgrade Required"}


class HandshakeError(RemoteError):
    """The upgrade request cannot be accepted: answer ``status`` (with ``headers``)."""

    def __init__(
        self, status: int, reason: str, headers: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers


def accept_key(key: bytes) -> bytes:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())


def check_upgrade(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The client's key, once the version and key are checked (names in lower case).

    Raises:
        HandshakeError: 426 for a version other than 13, 400 for a bad or missing key.
    """
    keys: list[bytes] = []
    versions: list[bytes] = []
    for name, value in headers:
        if name == b"sec-websocket-key":
            keys.append(value.strip())
        elif name == b"sec-websocket-version":
            versions.append(value.strip())
    if versions != [b"13"]:
        shown = b", ".join(versions).decode("latin-1") or "none"
        raise HandshakeError(
            426,
            f"unsupported Sec-WebSocket-Version {shown}: this server speaks 13",
            ((b"sec-websocket-version", b"13"),),
        )
    if len(keys) != 1:
        raise HandshakeError(400, "the request needs one Sec-WebSocket-Key")
    try:
        raw = base64.b64decode(keys[0], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HandshakeError(400, "Sec-WebSocket-Key is not base64") from exc
    if len(raw) != 16:
        raise HandshakeError(400, "Sec-WebSocket-Key must be 16 bytes in base64")
    return keys[0]


def accept_response(key: bytes, extra: Iterable[tuple[bytes, bytes]] = ()) -> bytes:
    """The ``101 Switching Protocols`` answer to a request with ``key``."""
    lines = [
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        b"sec-websocket-accept: " + accept_key(key) + b"\r\n"
    ]
    lines += [name + b": " + value + b"\r\n" for name, value in extra]
    lines.append(b"\r\n")
    return b"".join(lines)


def refusal(status: int, text: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> bytes:
    """A plain-text HTTP answer that closes the connection."""
    body = text.encode("utf-8")
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    lines.append(
        b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % len(body)
    )
    lines.append(body)
    return b"".join(lines)
