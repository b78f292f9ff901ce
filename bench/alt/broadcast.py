"""The reference for fan-out: the websockets library's own ``broadcast()`` to every client.

``python broadcast.py PORT``: clients connect to ``ws://127.0.0.1:PORT/``; a client that sends
``go N`` makes the server broadcast N small JSON messages to every other client, as fast as the
library lets it (yielding to the loop every 100 so the writes go out). Without compression,
as busgate's ``/ws`` by default (the library's default, permessage-deflate, costs it more).
"""

from __future__ import annotations

import asyncio
import json
import sys

from websockets.asyncio.server import ServerConnection, broadcast, serve

clients: set[ServerConnection] = set()


async def handler(connection: ServerConnection) -> None:
    clients.add(connection)
    try:
        async for message in connection:
            if isinstance(message, str) and message.startswith("go "):
                clients.discard(connection)
                for n in range(int(message[3:])):
                    broadcast(clients, json.dumps({"type": "bench.tick", "n": n}))
                    if n % 100 == 99:
                        await asyncio.sleep(0)
    finally:
        clients.discard(connection)


async def main(port: int) -> None:
    async with serve(handler, "127.0.0.1", port, max_queue=None, compression=None):
        print("listening", flush=True)
        await asyncio.Event().wait()


asyncio.run(main(int(sys.argv[1])))
