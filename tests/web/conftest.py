"""The real stack for the console's browser tests: broker, demo service, gateway, Chromium.

Everything runs in one event loop per test module: the broker on a free loopback port, the demo
service on a real client, the gateway app (``gateway.app.create_app``) under uvicorn on a socket
we bound ourselves, and headless Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright's
async API with a fresh user-data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from playwright.async_api import BrowserContext, Page, ViewportSize, async_playwright, expect

from bus.asyncio.client import Client, connect
from bus.asyncio.service import Service
from bus.broker import Broker, BrokerConfig
from bus.broker.config import merge_journal
from bus.demo import create_demo_service
from bus.objects.tcp import ObjectServer
from gateway.app import create_app
from gateway.process.http_protocol import HeaderDeadlineProtocol
from gateway.process.settings import GatewaySettings
from gateway.websocket.ws_frames import FrameWritingProtocol

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
# The README's pictures are refreshed with `make screenshots`; an ordinary test run writes its
# screenshots to a scratch folder so that `make test` leaves the work tree as it found it.
SCREENSHOTS = Path(
    os.environ.get("BUSGATE_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / f"busgate-screenshots-{os.getpid()}"
)
LAPTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
START_TIMEOUT = 20.0
#: How gateway/websocket/ws.py is told which Object System server to link to.
LINK_ENV = "BUSGATE_OBJECTS_LINK"
#: The manager post office of the stack's broker (the Bus view's gateway connects as it).
MANAGER = ("admin", "adm1n-console")
#: Bounded wait for anything to appear on screen (ms, Playwright's unit).
UI_TIMEOUT_MS = 15_000
expect.set_options(timeout=UI_TIMEOUT_MS)


@dataclass
class Gateway:
    """One gateway under uvicorn, and how to reach it."""

    base_url: str
    server: Any
    task: asyncio.Task[None]
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class Stack:
    """The running stack: the broker's URL, the gateway's base URL, and what to stop."""

    bus_url: str
    base_url: str
    broker: Broker
    objects: ObjectServer
    journal: str = ""
    clients: list[Client] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    gateways: list[Gateway] = field(default_factory=list)

    async def connect(self) -> Client:
        """A new bus client on the stack's broker (closed with the stack)."""
        client = await asyncio.wait_for(connect(self.bus_url), START_TIMEOUT)
        self.clients.append(client)
        return client

    async def restart_broker(self) -> None:
        """Stop the broker, then start a new one on the same port (clients reconnect)."""
        port = self.broker.port
        await asyncio.wait_for(self.broker.stop(), 10)
        self.broker = Broker(broker_config(port, self.journal))
        await asyncio.wait_for(self.broker.start(), START_TIMEOUT)

    async def stop_gateways(self) -> None:
        """Stop every gateway of the stack (the browser then finds nobody at the address)."""
        for gateway in self.gateways:
            await _stop_gateway(gateway)

    async def restart_gateway(self, base_url: str, while_down: Any = None) -> None:
        """Stop the gateway at ``base_url`` and start a new one on the same port.

        Args:
            base_url: which gateway.
            while_down: an async callable awaited between the stop and the start.
        """
        index = next(i for i, g in enumerate(self.gateways) if g.base_url == base_url)
        old = self.gateways[index]
        await _stop_gateway(old)
        port = int(base_url.rsplit(":", 1)[1])
        try:
            if while_down is not None:
                await while_down()
        finally:  # a failed check must not leave the module's later tests without a gateway
            self.gateways[index] = await _serve_gateway(self.bus_url, old.overrides, port)

    async def start_gateway(self, **overrides: Any) -> str:
        """Start one more gateway on the same broker (e.g. with auth on); returns its base URL."""
        gateway = await _serve_gateway(self.bus_url, overrides)
        self.gateways.append(gateway)
        return gateway.base_url


def broker_config(port: int, journal: str) -> BrokerConfig:
    """Open mode (anyone local connects), one manager office, and a journal."""
    return BrokerConfig(
        host="127.0.0.1",
        port=port,
        open=True,
        offices={MANAGER[0]: MANAGER[1]},
        managers=frozenset({MANAGER[0]}),
        journal=merge_journal(None, {"directory": journal, "fsync": "none"}),
    )


def _free_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


async def _serve_gateway(bus_url: str, overrides: dict[str, Any], port: int = 0) -> Gateway:
    options: dict[str, Any] = {"bus_url": bus_url, "host": "127.0.0.1", "auth": "off"}
    options.update(overrides)
    app = create_app(GatewaySettings(**options))
    sock = _free_socket(port)
    port = sock.getsockname()[1]
    # the gateway's own HTTP and WebSocket protocols, as it runs (its /ws without ASGI)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", http=HeaderDeadlineProtocol,
        ws=FrameWritingProtocol, ws_per_message_deflate=False,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    base_url = f"http://127.0.0.1:{port}"
    await asyncio.wait_for(_wait_ready(base_url, task), START_TIMEOUT)
    return Gateway(base_url, server, task, dict(overrides))


async def _wait_ready(base_url: str, task: asyncio.Task[None]) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        while True:
            if task.done():
                task.result()  # raises what stopped uvicorn
                raise RuntimeError("uvicorn stopped before the gateway was ready")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)


async def _stop_gateway(gateway: Gateway) -> None:
    gateway.server.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(gateway.task, 10)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack() -> AsyncIterator[Stack]:
    """Broker, Object System server, demo service (heartbeat every second) and gateway.

    The gateway's ``/ws`` links to the Object System server through ``BUSGATE_OBJECTS_LINK``
    (set for the module, restored after), as ``busgate run`` links it to the broker's.
    """
    journal = tempfile.mkdtemp(prefix="busgate-console-journal-")
    broker = Broker(broker_config(0, journal))
    await asyncio.wait_for(broker.start(), START_TIMEOUT)
    objects = ObjectServer(server_peers=["127.0.0.1"])  # the gateway links in, as in busgate run
    await objects.start("127.0.0.1", 0)
    saved_link = os.environ.get(LINK_ENV)
    os.environ[LINK_ENV] = f"127.0.0.1:{objects.port}"
    running = Stack(f"bus://127.0.0.1:{broker.port}", "", broker, objects, journal)
    try:
        demo = create_demo_service(await running.connect(), heartbeat_interval=1.0)
        await asyncio.wait_for(demo.start(), START_TIMEOUT)
        running.services.append(demo)
        running.base_url = await running.start_gateway()
        yield running
    finally:
        for gateway in running.gateways:
            await _stop_gateway(gateway)
        for service in running.services:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(service.stop(), 10)
        for client in running.clients:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 10)
        await asyncio.wait_for(objects.stop(), 10)
        await asyncio.wait_for(running.broker.stop(), 10)
        shutil.rmtree(journal, ignore_errors=True)
        if saved_link is None:
            os.environ.pop(LINK_ENV, None)
        else:
            os.environ[LINK_ENV] = saved_link


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BrowserContext]:
    """Headless Chromium with a fresh user-data directory, for one test module."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=LAPTOP,
        )
        context.set_default_timeout(UI_TIMEOUT_MS)
        try:
            yield context
        finally:
            await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: BrowserContext) -> AsyncIterator[Page]:
    """A fresh tab; JavaScript errors on the page fail the test."""
    tab = await browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        await tab.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


async def screenshot(page: Page, name: str) -> Path:
    """Save the page as ``<SCREENSHOTS>/<name>.png`` and return the path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=False, animations="disabled")
    return path
