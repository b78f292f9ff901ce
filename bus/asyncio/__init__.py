"""The asyncio drivers of the bus: the client, its transports, services and the directory.

The sans-I/O cores sit in the layers below (``bus.message``, ``bus.link.wire``,
``bus.link.connection``, ``bus.discovery.services``, ``bus.discovery.nats_subjects``,
``bus.broker.protocol`` ...); these modules only feed them bytes and time, as websockets puts its
drivers in ``websockets.asyncio``::

    from bus.asyncio import connect, Service

    client = await connect("bus://127.0.0.1:4000")
    ack = await client.request("demo", "echo", {"x": 1})
"""

from bus.asyncio.client import Client, connect
from bus.asyncio.directory import ServiceDirectory
from bus.asyncio.service import Request, Response, Service, ServiceError
from bus.asyncio.subscription import Subscription

__all__ = [
    "Client",
    "Request",
    "Response",
    "Service",
    "ServiceDirectory",
    "ServiceError",
    "Subscription",
    "connect",
]
