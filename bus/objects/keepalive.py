"""Object System keepalive policy, sans-I/O: what a silent connection costs.

Every TCP socket of :class:`~bus.objects.tcp.ObjectServer` has TCP keepalive on (idle
``keepalive_interval``), so a vanished host is noticed by the kernel. On top of that, a
connection from which no byte arrived for ``keepalive_interval`` is sent a ``ping``; if still no
byte arrives one interval later, it is closed (and announced with ``routing/disconnect``) when it
is held to keepalive: server links always, clients as :class:`ClientKeepalive` says. Any byte
received counts as liveness, not only the ``pong``. The default, ``auto``, holds a client to
keepalive once it has answered one of the server's pings, so the original clients, which never
answered, are not dropped for listening quietly. :func:`on_silence` says which; the driver keeps
the time.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Final

from bus.objects.peers import PeerInfo

__all__ = ["DEFAULT_KEEPALIVE_INTERVAL", "ClientKeepalive", "Silence", "on_silence"]

DEFAULT_KEEPALIVE_INTERVAL: Final = 30.0


class ClientKeepalive(StrEnum):
    """What a client (not a server link) that stays silent after the server's ``ping`` costs."""

    OFF = "off"  # never pinged; only TCP keepalive notices a vanished host
    AUTO = "auto"  # pinged; closed for silence once it has answered a ping (the default)
    REQUIRE = "require"  # pinged; closed when no byte arrives within the second interval


class Silence(Enum):
    """What to do about a connection silent for one keepalive interval."""

    IGNORE = "ignore"
    PING = "ping"
    CLOSE = "close"


def on_silence(info: PeerInfo, policy: ClientKeepalive, pinged: bool) -> Silence:
    """The answer to one more silent interval of connection ``info``.

    Args:
        info: the router's view of the connection.
        policy: the server's policy for clients (server links are always held to keepalive).
        pinged: whether the connection was already pinged in this silence.
    """
    if not info.server and policy is ClientKeepalive.OFF:
        return Silence.IGNORE
    if not pinged:
        return Silence.PING
    held = info.server or policy is ClientKeepalive.REQUIRE or info.answers_pings
    return Silence.CLOSE if held else Silence.IGNORE
