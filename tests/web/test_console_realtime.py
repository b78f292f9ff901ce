"""History on Subscribe and presence on Services, in real headless Chromium (gateway/web/history.js,
presence.js): what a user sees when a subscription starts with the journal's events or the last
value of each type, and who else subscribes."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.web.conftest import Stack
from tests.web.test_console import open_view

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def test_a_subscription_can_start_with_history_then_goes_on_live(
    page: Page, stack: Stack
) -> None:
    publisher = await stack.connect()
    for i in range(3):
        await publisher.publish("oven.temp", {"t": 100 + i}, confirm=True)
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "oven.*")
    await page.select_option("#sub-start-with", "history")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_have_attribute("data-state", "ok")
    history = page.locator("#messages .message.kind-history")
    await expect(history).to_have_count(3)
    await expect(history.first).to_contain_text("100")
    await publisher.publish("oven.temp", {"t": 200})
    live = page.locator("#messages .message.kind-event", has_text="200")
    await expect(live).to_have_count(1)
    await page.click("#sub-stop")
    await page.select_option("#sub-start-with", "last")
    await page.click("#sub-clear")
    await page.click("#sub-start")
    last = page.locator("#messages .message.kind-event", has_text="oven.temp")
    await expect(last).to_have_count(1)  # the last value only, before anything new
    await expect(last).to_contain_text("200")


async def test_the_services_view_counts_who_subscribes(page: Page, stack: Stack) -> None:
    listener = await stack.connect()
    await listener.subscribe("tank.level")
    await open_view(page, stack, "services")
    await page.fill("#presence-pattern", "tank.*")
    await page.press("#presence-pattern", "Enter")
    count = page.locator("#presence-count")
    await expect(count).to_have_attribute("data-count", "1")
    await expect(count).to_contain_text("1 subscribed to tank.* (1 bus)")
    await expect(page.locator("#presence-body tr")).to_have_count(1)
