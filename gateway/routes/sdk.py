"""The JavaScript client, served: ``GET /sdk/...`` and ``GET /v1/typescript`` (PROTOCOL.md 9.15).

``/sdk/busgate.js`` is the ``busgate`` npm package's module (``clients/js``, built into
``gateway/sdk/`` and shipped inside the Python package), so a page imports it with no build
step: ``import { Busgate } from "http://gateway:8080/sdk/busgate.js"``. Its files are ES modules
importing each other relatively; each ``.js`` has its ``.d.ts`` beside it, named in an
``X-TypeScript-Types`` header (Deno and some editors read it). Any origin may import them
(``Access-Control-Allow-Origin: *``: a module script from another origin needs CORS; the files
are public, the calls they make are what the gateway's authentication and CORS settings govern).
No credentials are needed.

``GET /v1/typescript[?group=PATTERN]`` writes the declarations of the live services' typed
commands (:mod:`bus.typescript`), as ``busgate typescript`` does from the bus.
"""

from __future__ import annotations

import time
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from bus.discovery.directory_json import service_entries
from bus.typescript import declarations
from gateway.process.resources import package_path
from gateway.state import gateway_of

__all__ = ["SDK_DIR", "TYPESCRIPT_TYPE", "sdk_routes", "typescript_endpoint"]

#: The built module (``clients/js`` -> ``npm run build``), package data of ``gateway``.
SDK_DIR = package_path("sdk")
TYPESCRIPT_TYPE: Final = "application/typescript; charset=utf-8"


class _SdkFiles:
    """StaticFiles of the built module, with CORS for any origin and each module's types."""

    def __init__(self) -> None:
        self.files = StaticFiles(directory=SDK_DIR)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        types = path[: -len(".js")] + ".d.ts" if path.endswith(".js") else ""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"access-control-allow-origin", b"*"))
                # Revalidate (ETag): a gateway upgraded in place serves the new module at once.
                headers.append((b"cache-control", b"no-cache"))
                if path.endswith(".d.ts"):
                    headers = [(k, v) for k, v in headers if k != b"content-type"]
                    headers.append((b"content-type", TYPESCRIPT_TYPE.encode()))
                elif types:
                    headers.append((b"x-typescript-types", types.rsplit("/", 1)[-1].encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.files(scope, receive, sending)


def sdk_routes() -> list[BaseRoute]:
    """``/sdk/``, when the install has the built module."""
    if not (SDK_DIR / "busgate.js").is_file():
        return []
    return [Mount("/sdk", app=_SdkFiles(), name="sdk")]


async def typescript_endpoint(request: Request) -> Response:
    """Handle ``GET /v1/typescript``: ``.d.ts`` declarations of the live services' commands."""
    gateway = gateway_of(request)
    gateway.admit(request)
    body = gateway.bridge.services()  # 503 when the gateway never reached the bus
    directory = gateway.bridge.directory
    entries = body["services"]
    if directory is not None:
        entries = service_entries(directory.services(), directory.instances(), time.time())
    wanted = [g for g in request.query_params.get("group", "").split(",") if g.strip()]
    base = str(request.base_url).rstrip("/")
    text = declarations(entries, groups=[g.strip() for g in wanted], source=base)
    return Response(text, headers={"content-type": TYPESCRIPT_TYPE})
