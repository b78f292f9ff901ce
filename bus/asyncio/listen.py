"""Listening sockets the CLI binds itself (``busgate run``, ``busgate gateway --workers``)."""

from __future__ import annotations

import socket

__all__ = ["listen_socket"]


def listen_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A bound, listening TCP socket, inheritable (workers serve it).

    IPPROTO_TCP, not 0: the event loop sets TCP_NODELAY only on sockets that say they are TCP,
    and without it every keep-alive answer waits ~40 ms for the client's delayed ACK.

    Raises:
        OSError: the address cannot be bound (the caller words it for its flag).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
