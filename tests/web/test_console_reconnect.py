"""The Subscribe view's /ws connection comes back on its own after the gateway restarts.

A module of its own: it restarts its stack's gateway under the page.
"""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from tests.web.conftest import Stack
from tests.web.test_console import ObjectPeer

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def test_ws_subscription_reconnects_and_subscribes_again(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.base_url}/#subscribe")
    await page.select_option("#sub-source", "ws")
    await page.select_option("#sub-mode", "all")
    await page.fill("#sub-types", "text/plain")
    await page.click("#sub-start")
    state = page.locator("#sub-state")
    await expect(state).to_contain_text("subscribed as")

    async def while_down() -> None:
        # The page shows the loss and keeps retrying while nobody answers.
        await expect(state).to_have_attribute("data-state", "warn")
        closed = page.locator("#messages .message.kind-disconnect", has_text="/ws closed")
        await expect(closed).to_have_count(1)
        await expect(page.locator("#banner")).to_contain_text("reconnecting (attempt")
        # A second attempt or a later one: the banner is shared with the gateway's own
        # "cannot reach" notice, so any one attempt may be shown too briefly to be seen.
        await expect(page.locator("#banner")).to_contain_text(re.compile(r"attempt ([2-9]|\d\d)"))
        await expect(page.locator("#sub-stop")).to_be_enabled()

    await stack.restart_gateway(stack.base_url, while_down)
    await expect(state).to_contain_text("(reconnected)")
    await expect(page.locator("#banner")).to_be_hidden()
    resent = page.locator("#messages .message", has_text="re-sent routing/subscribe")
    await expect(resent).to_contain_text('"types":["text/plain"]')
    # The same subscription holds on the new connection: a text/plain object arrives.
    other = await ObjectPeer.open(stack.objects.port)
    try:
        await other.send({"event": "routing/subscribe", "id": "s1", "receive_mode": "all"})
        await other.expect("routing/subscribe/reply")
        await other.send({"type": "text/html", "size": 8}, b"unwanted")
        await other.send({"type": "text/plain", "size": 9}, b"came back")
        await expect(page.locator("#messages .message", has_text="came back")).to_have_count(1)
        # ... and only what it asked for (objects from one sender arrive in order).
        await expect(page.locator("#messages .message", has_text="unwanted")).to_have_count(0)
    finally:
        await other.close()


async def test_stop_ends_the_retries(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.base_url}/#subscribe")
    await page.select_option("#sub-source", "ws")
    await page.click("#sub-start")
    state = page.locator("#sub-state")
    await expect(state).to_contain_text("subscribed as")

    async def while_down() -> None:
        await expect(state).to_contain_text("retry in")
        await page.click("#sub-stop")
        await expect(state).to_have_text("not subscribed")

    await stack.restart_gateway(stack.base_url, while_down)
    await page.wait_for_timeout(2000)  # longer than the first retry delays
    await expect(state).to_have_text("not subscribed")
