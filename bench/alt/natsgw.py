"""What a user would write instead of busgate's gateway: Starlette + nats-py ``request()``.

Run: ``NATS_URL=nats://... uvicorn natsgw:app``; the responder is :mod:`natsecho`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import nats
import orjson
from nats.aio.client import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

connection: Client | None = None


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    global connection
    connection = await nats.connect(os.environ["NATS_URL"])
    yield
    await connection.close()


async def request(request: Request) -> Response:
    body = await request.body()
    orjson.loads(body)  # a gateway checks what it forwards
    assert connection is not None
    msg = await connection.request("demo", body, timeout=5)
    return Response(
        orjson.dumps({"payload": orjson.loads(msg.data)}), media_type="application/json"
    )


app = Starlette(routes=[Route("/v1/request/demo", request, methods=["POST"])], lifespan=lifespan)
