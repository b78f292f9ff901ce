"""The console when the bus or the gateway goes away: clear state, clear messages, recovery.

A module of its own: it stops the broker and the gateway of its stack.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.async_api import Page, expect

from tests.web.conftest import Stack

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def send_echo(page: Page, marker: str) -> None:
    await page.fill("#req-group", "demo")
    await page.fill("#req-cmd", "echo")
    await page.fill("#req-args", json.dumps({"marker": marker}))
    await page.click("#req-send")


async def test_losing_the_bus_is_shown_and_recovery_too(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.base_url}/#request")
    bus = page.locator("#state-bus")
    await expect(bus).to_have_text("bus connected")
    await stack.broker.stop()
    await expect(bus).to_have_text("bus disconnected")
    await expect(page.locator("#banner")).to_contain_text("not connected to the bus")
    await send_echo(page, "while-down")
    await expect(page.locator("#responses .response.kind-error")).to_have_count(1)
    await expect(page.locator("#req-summary")).to_contain_text("HTTP 503")
    await stack.restart_broker()
    await expect(bus).to_have_text("bus connected")
    await expect(page.locator("#banner")).to_be_hidden()
    ack = page.locator("#responses .response.kind-ACK")
    # The demo service reconnects on its own; retry until it answers again.
    for _ in range(20):
        await send_echo(page, "after")
        await expect(page.locator("#req-send")).to_be_enabled()
        if await ack.count():
            break
        await page.wait_for_timeout(500)
    await expect(ack.locator(".payload")).to_contain_text('"marker": "after"')


async def test_services_are_marked_stale_while_the_bus_is_away(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.base_url}/#services")
    row = page.locator('#services-body tr[data-group="demo"]')
    updated = page.locator("#services-updated")
    await expect(row.locator(".status")).to_have_text("Running")
    await expect(updated).to_contain_text("updated")
    await stack.broker.stop()
    await expect(updated).to_contain_text("stale: the bus is away since")
    await expect(updated).not_to_contain_text("updated")
    await expect(row).to_have_class(re.compile(r"\bstale\b"))
    await expect(row.locator(".status")).to_have_text("Running?")
    await expect(row.locator(".status")).to_have_attribute("data-state", "unknown")
    await stack.restart_broker()
    await expect(updated).to_contain_text("updated", timeout=30_000)
    await expect(row).not_to_have_class(re.compile(r"\bstale\b"))
    await expect(row.locator(".status")).to_have_text("Running")


async def test_losing_the_gateway_is_shown(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.base_url}/#services")
    await expect(page.locator("#state-gateway")).to_have_text("gateway up")
    await stack.stop_gateways()
    await expect(page.locator("#state-gateway")).to_have_text("gateway unreachable")
    await expect(page.locator("#banner")).to_contain_text("Cannot reach the gateway")
