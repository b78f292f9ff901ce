"""The echo service of the hand-written alternative: a nats-py responder in queue group demo."""

from __future__ import annotations

import asyncio
import os

import nats
import orjson
from nats.aio.msg import Msg


async def main() -> None:
    connection = await nats.connect(os.environ["NATS_URL"])

    async def answer(msg: Msg) -> None:
        await msg.respond(orjson.dumps(orjson.loads(msg.data)))

    await connection.subscribe("demo", queue="demo", cb=answer)
    await asyncio.Event().wait()


asyncio.run(main())
