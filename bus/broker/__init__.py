"""The central post office: routing tables and connection state (sans-I/O), the asyncio server.

Layers, as the file names say: :mod:`.routing` (groups, subscriptions, post offices) and
:mod:`.protocol` (one connection's handshake and keepalive) know nothing of sockets or time;
:mod:`.server` is the asyncio driver; :mod:`.management` answers ``manage.*`` commands;
:mod:`.config` reads the settings. See ``docs/PROTOCOL.md`` sections 4 and 5.
"""

from __future__ import annotations

from bus.broker.config import BrokerConfig, JournalSetting
from bus.broker.server import Broker

__all__ = ["Broker", "BrokerConfig", "JournalSetting"]
