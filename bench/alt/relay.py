"""The reference for the Object System: a plain asyncio relay of the same objects.

``python relay.py PORT``: every object (JSON metadata, NUL, ``size`` payload bytes) a client
sends is forwarded whole to every other client, one write per object as the plain code does.
It parses just enough to find where an object ends (the metadata's ``size``), as any relay of
these objects must. (Joining a burst into one write is an optimisation busgate makes; this
reference, like the one the issue measured at 178k objects/s, does not.)
"""

from __future__ import annotations

import asyncio
import sys

import orjson

from bus.asyncio.loop import run

peers: set[asyncio.Transport] = set()


class Relay(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""
        peers.add(self.transport)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
        start = 0
        while True:
            nul = buffer.find(b"\0", start)
            if nul < 0:
                break
            size = orjson.loads(buffer[start:nul]).get("size", 0)
            end = nul + 1 + size
            if end > len(buffer):
                break
            obj = buffer[start:end]
            for peer in peers:
                if peer is not self.transport:
                    peer.write(obj)
            start = end
        self.buffer = buffer[start:]

    def connection_lost(self, exc: Exception | None) -> None:
        peers.discard(self.transport)


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Relay, "127.0.0.1", port)
    print("listening", flush=True)
    await server.serve_forever()


run(main(int(sys.argv[1])))  # the loop busgate's command line runs on (uvloop when installed)
