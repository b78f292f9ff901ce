"""/docs in a real browser: the vendored API explorer (Swagger UI) on /openapi.json, offline.

It lists every operation, shows a route's parameters and its schemas, and "Try it out" sends a
real request to this gateway and shows the answer. Every request the page makes stays on the
gateway (no CDN, no online validator): anything else is refused and fails the test.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from playwright.async_api import Route, async_playwright, expect

from gateway.routes.routes_info import OPENAPI_PATH
from tests.gateway.conftest import Stack

CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 15_000


@pytest.mark.slow
@pytest.mark.browser
async def test_the_api_explorer_works_offline_and_tries_calls(stack: Stack) -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    operations = sum(len(ops) for ops in document["paths"].values())
    live = len(await _demo_commands(stack))
    errors: list[str] = []
    elsewhere: list[str] = []

    async def only_the_gateway(route: Route) -> None:
        if route.request.url.startswith(stack.url) or route.request.url.startswith("data:"):
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort()

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = await browser.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.route("**/*", only_the_gateway)
            await page.goto(f"{stack.url}/docs")
            blocks = page.locator(".opblock")
            # The static operations, and one per command of the live demo service.
            await expect(blocks).to_have_count(operations + live, timeout=WAIT_MS)
            # The request operation: its parameters and its body's schema are on the page.
            request = page.locator("#operations-default-request")
            await request.locator(".opblock-summary").click()
            await expect(request.locator(".parameters")).to_contain_text("group", timeout=WAIT_MS)
            await expect(request.locator(".parameters")).to_contain_text("timeout")
            await expect(page.locator("section.models")).to_contain_text("RequestPayload")
            # Try it out: GET /v1/services against this gateway.
            services = page.locator("#operations-default-services")
            await services.locator(".opblock-summary").click()
            await services.locator("button.try-out__btn").click()
            await services.locator("button.execute").click()
            live = services.locator(".live-responses-table tbody td.response-col_status")
            await expect(live.first).to_have_text("200", timeout=WAIT_MS)
            await expect(services.locator(".live-responses-table")).to_contain_text('"demo"')
            # A live command, typed: its summary and answer schema shown, and it can be tried.
            clock = page.locator(".opblock", has_text="/v1/demo/time")
            await expect(clock).to_contain_text("The server's time (UTC).")
            await clock.locator(".opblock-summary").click()
            await clock.locator("button.try-out__btn").click()
            await clock.locator("button.execute").click()
            status = clock.locator(".live-responses-table tbody td.response-col_status")
            await expect(status.first).to_have_text("200", timeout=WAIT_MS)
            await expect(clock.locator(".live-responses-table")).to_contain_text("epoch_ms")
        finally:
            await browser.close()
    assert not errors, errors
    assert not elsewhere, f"the page reached outside the gateway: {elsewhere}"


async def _demo_commands(stack: Stack) -> list[str]:
    """The demo's commands once the gateway's directory lists them (bounded wait)."""
    async with httpx.AsyncClient(base_url=stack.url) as http, asyncio.timeout(WAIT_MS / 1000):
        while True:
            services = (await http.get("/v1/services")).json()["services"]
            if services:
                return list(services[0]["commands"])
            await asyncio.sleep(0.05)
