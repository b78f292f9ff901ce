"""The JavaScript client in Chromium, and the README's browser quick start as printed.

The same cases as under Node (``clients/js/test/cases.mjs``) run on a page the gateway
serves, on the module it serves at ``/sdk/busgate.js``.

The page is served from ``http://localhost:PORT`` and imports the module from
``http://127.0.0.1:PORT`` (another origin: a module script from elsewhere loads only with the
CORS header ``/sdk/`` sends), then calls the gateway of its own origin with the browser's own
``fetch`` and ``WebSocket``; the module's Node-only WebSocket is never fetched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from bus.objects.bridge import Bridge
from tests.web.conftest import Stack

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "clients" / "js" / "test" / "cases.mjs"
README = ROOT / "README.md"
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>busgate client cases</title></head>
<body><pre id="log"></pre>
<script type="module">
const sdk = new URLSearchParams(location.search).get("sdk");
const { Busgate, BusgateError } = await import(sdk);
const { cases } = await import("./cases.mjs");
const results = [];
for (const { name, run } of cases) {
  try {
    await run({ Busgate, BusgateError, url: location.origin });
    results.push({ name, ok: true });
  } catch (exc) {
    results.push({ name, ok: false, error: String(exc?.stack ?? exc) });
  }
  document.querySelector("#log").textContent += `${results.at(-1).ok ? "ok" : "FAILED"} ${name}\\n`;
}
window.results = results;
</script></body></html>
"""


@pytest.mark.timeout(300)
async def test_the_cases_pass_in_chromium(page: Page, stack: Stack, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(PAGE, encoding="utf-8")
    shutil.copy(CASES, site / "cases.mjs")
    # The gateway's /ws links to an object server bridged to the bus, as in `busgate run`.
    bridge = Bridge(stack.objects, await stack.connect())
    await bridge.start()
    try:
        await _run_cases(page, stack, site)
    finally:
        await bridge.stop()


async def _run_cases(page: Page, stack: Stack, site: Path) -> None:
    base_url = await stack.start_gateway(web_dir=str(site))
    port = base_url.rsplit(":", 1)[1]
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    module = f"http://127.0.0.1:{port}/sdk/busgate.js"
    await page.goto(f"http://localhost:{port}/index.html?sdk={module}")
    await page.wait_for_function("window.results !== undefined", timeout=240_000)
    results = await page.evaluate("window.results")
    failed = [f"{r['name']}: {r['error']}" for r in results if not r["ok"]]
    assert not failed, "\n\n".join(failed)
    assert len(results) >= 10
    assert module in fetched and f"http://127.0.0.1:{port}/sdk/client.js" in fetched
    assert not [url for url in fetched if "node-websocket" in url]


def _browser_quick_start() -> str:
    section = README.read_text(encoding="utf-8").split("## JavaScript and TypeScript", 1)[1]
    return section.split("```html\n", 1)[1].split("```", 1)[0]


async def test_the_readmes_browser_quick_start_works_as_printed(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    site = tmp_path / "quick"
    site.mkdir()
    (site / "index.html").write_text("not yet", encoding="utf-8")  # the gateway serves a site
    base_url = await stack.start_gateway(web_dir=str(site))
    snippet = _browser_quick_start().replace("http://localhost:8080", base_url)
    (site / "index.html").write_text(snippet, encoding="utf-8")
    await page.goto(f"{base_url}/index.html")
    await expect(page.locator("body")).to_have_text('{"x":1}')
