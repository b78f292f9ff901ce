"""The app around the routes: CORS, the static console, and no stray routes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from tests.gateway.conftest import base_settings, eventually, running_stack


def test_cors_preflight_and_exposed_headers() -> None:
    settings = base_settings(cors_origins=("https://console.example",))
    with running_stack(settings) as stack:
        preflight = httpx.options(
            f"{stack.url}/v1/request/demo",
            headers={
                "Origin": "https://console.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-api-key, content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://console.example"
        response = httpx.post(
            f"{stack.url}/v1/request/demo",
            json={"CMD": "echo"},
            headers={"Origin": "https://console.example"},
        )
        assert response.headers["access-control-allow-origin"] == "https://console.example"
        assert "X-Busgate-Mid" in response.headers["access-control-expose-headers"]
        other = httpx.get(f"{stack.url}/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_console_is_served_at_the_root(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<h1>console</h1>")
    (tmp_path / "app.js").write_text("export {};")
    app = create_app(base_settings(web_dir=str(tmp_path)))
    assert any(getattr(route, "name", "") == "console" for route in app.routes)
    with running_stack(base_settings()) as stack:
        # the stack runs without a console directory: / is a JSON 404
        response = httpx.get(f"{stack.url}/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_console_files_over_http(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<h1>console</h1>")
    (tmp_path / "app.js").write_text("export {};")
    from dataclasses import replace

    from tests.gateway.conftest import Stack

    stack = Stack(base_settings())
    stack.settings = replace(stack.settings, web_dir=str(tmp_path))
    stack.start()
    try:
        index = httpx.get(f"{stack.url}/")
        assert index.status_code == 200 and "console" in index.text
        script = httpx.get(f"{stack.url}/app.js")
        assert script.status_code == 200
        assert "javascript" in script.headers["content-type"]
        # the API still wins over the static mount
        assert httpx.get(f"{stack.url}/healthz").json() == {"status": "ok"}
    finally:
        stack.stop()


async def test_websocket_is_mounted_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import orjson
    from websockets.asyncio.client import connect

    monkeypatch.setenv("BUSGATE_OBJECTS_LINK", "")  # no broker object server in this stack
    with running_stack(base_settings()) as stack:
        ws_url = stack.url.replace("http://", "ws://") + "/ws"

        async def open_sockets() -> int:
            async with httpx.AsyncClient(base_url=stack.url) as http:
                text = (await http.get("/metrics")).text
            line = next(
                x for x in text.splitlines() if x.startswith("busgate_gateway_open_sockets")
            )
            return int(float(line.split()[1]))

        async with connect(ws_url) as ws:
            await ws.send(orjson.dumps({"event": "routing/subscribe", "id": "s"}).decode())
            reply = orjson.loads(await asyncio.wait_for(ws.recv(), 5.0))
            assert reply["event"] == "routing/subscribe/reply"
            assert await open_sockets() == 1

        async def closed() -> bool:
            return await open_sockets() == 0

        await eventually(closed)
