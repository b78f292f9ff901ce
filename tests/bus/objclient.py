"""A minimal Object System TCP client for tests, speaking the wire directly."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from bus.objects.codec import BusinessObject, NeedData, ObjectDecoder, encode_object

WAIT = 5.0
#: ``server_peers`` of a test server that other test servers on this host link to.
LOCAL = ["127.0.0.1"]


class ObjClient:
    """One raw TCP connection to an Object System server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = ObjectDecoder()
        self.routing_id = ""

    @classmethod
    async def open(
        cls, port: int, *, tls: ssl.SSLContext | None = None, **subscribe: Any
    ) -> ObjClient:
        """Connect (over TLS with ``tls``); subscribe with ``subscribe`` unless it holds
        ``subscribe=False``."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
        client = cls(reader, writer)
        if subscribe.pop("subscribe", True):
            await client.subscribe(**subscribe)
        return client

    async def subscribe(self, **fields: Any) -> dict[str, Any]:
        await self.send({"event": "routing/subscribe", "id": "sub", **fields})
        reply = await self.expect("routing/subscribe/reply")
        self.routing_id = reply.metadata["routing-id"]
        return reply.metadata

    async def send(self, metadata: dict[str, Any], payload: bytes = b"") -> None:
        self.send_raw(encode_object(BusinessObject(metadata, payload)))
        await self.writer.drain()

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def recv(self, timeout: float = WAIT) -> BusinessObject | None:
        """The next object, or ``None`` when the server closed the connection."""

        async def next_object() -> BusinessObject | None:
            while True:
                obj = self.decoder.next_event()
                if not isinstance(obj, NeedData):
                    return obj
                data = await self.reader.read(65536)
                if not data:
                    return None
                self.decoder.receive_data(data)

        return await asyncio.wait_for(next_object(), timeout)

    async def expect(self, event: str, timeout: float = WAIT, **fields: Any) -> BusinessObject:
        """Skip objects until one with this event (and these metadata values) arrives."""

        async def find() -> BusinessObject:
            while True:
                obj = await self.recv(timeout)
                if obj is None:
                    raise ConnectionError(f"closed while waiting for {event}")
                wanted = {k.replace("_", "-"): v for k, v in fields.items()}
                if obj.event == event and all(obj.metadata.get(k) == v for k, v in wanted.items()):
                    return obj

        return await asyncio.wait_for(find(), timeout)

    async def expect_any(
        self, predicate: Callable[[BusinessObject], bool], timeout: float = WAIT
    ) -> BusinessObject:
        """Skip objects until one for which ``predicate`` holds (TimeoutError if none comes)."""

        async def find() -> BusinessObject:
            while True:
                obj = await self.recv(timeout)
                if obj is None:
                    raise ConnectionError("closed while waiting")
                if predicate(obj):
                    return obj

        return await asyncio.wait_for(find(), timeout)

    async def quiet(self, timeout: float = 0.3) -> list[BusinessObject]:
        """Every object that arrives until the connection is quiet for ``timeout`` seconds."""
        got: list[BusinessObject] = []
        while True:
            try:
                obj = await self.recv(timeout)
            except TimeoutError:
                return got
            if obj is None:
                return got
            got.append(obj)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, ssl.SSLError):  # TLS: the server wrote after our close_notify
            pass
