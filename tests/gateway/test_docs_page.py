"""The /docs page in a real browser: it renders every endpoint of /openapi.json."""

from __future__ import annotations

import json

import pytest
from playwright.async_api import async_playwright

from gateway.routes_info import OPENAPI_PATH
from tests.gateway.conftest import Stack

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.slow
@pytest.mark.browser
async def test_docs_page_lists_every_operation(stack: Stack) -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    operations = sum(len(ops) for ops in document["paths"].values())
    errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = await browser.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{stack.url}/docs")
            await page.wait_for_selector("#paths h2", timeout=10_000)
            headings = await page.locator("#paths h2").all_inner_texts()
        finally:
            await browser.close()
    assert not errors
    assert len(headings) == operations
    assert any("/v1/request/{group}" in heading for heading in headings)
