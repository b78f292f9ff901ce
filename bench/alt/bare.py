"""A bare Starlette JSON echo (the ceiling: HTTP and JSON, no bus). Run: uvicorn bare:app."""

from __future__ import annotations

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


async def echo(request: Request) -> Response:
    body = orjson.loads(await request.body())
    return Response(orjson.dumps({"payload": body}), media_type="application/json")


app = Starlette(routes=[Route("/v1/request/demo", echo, methods=["POST"])])
