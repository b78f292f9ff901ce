"""The console's Report view: the ``busgate report`` page the gateway serves (``report_dir``).

The report directory here is written by the test (an ``index.html``, an SVG chart drawn by
``pipeline.charts`` and a Parquet table), laid out as ``busgate report --out DIR`` lays it out; the
pipeline's own tests make real reports with Spark.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from playwright.async_api import Page, expect

from gateway.process.settings import ApiKey
from pipeline.charts import stacked_bars
from tests.web.conftest import PHONE, Stack, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>busgate report</title></head>
<body><h1>busgate report</h1>
<h2>Requests by group</h2><img id="chart" src="requests.svg" alt="requests by group">
<p><a id="table" href="tables/outcomes/part-0.parquet">outcomes (Parquet)</a></p>
</body></html>
"""


def write_report(folder: Path) -> None:
    """A report directory as ``busgate report --out`` writes it: page, chart, tables."""
    (folder / "tables" / "outcomes").mkdir(parents=True)
    chart = stacked_bars(["demo", "other"], [("requests", [42, 7])], "requests by group", "")
    (folder / "requests.svg").write_text(chart, "utf-8")
    table = pa.table({"group": ["demo", "other"], "requests": [42, 7]})
    pq.write_table(table, folder / "tables" / "outcomes" / "part-0.parquet")
    (folder / "index.html").write_text(PAGE)


async def test_without_a_report_the_view_says_how_to_make_one(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.base_url}/#report")
    await expect(page.locator("#report-missing")).to_be_visible()
    command = page.locator("#report-command")
    await expect(command).to_contain_text("busgate report --since")
    await expect(command).to_contain_text("--report-dir")
    await expect(page.locator("#report-link")).to_be_hidden()


async def test_a_report_is_linked_and_opens(page: Page, stack: Stack, tmp_path: Path) -> None:
    folder = tmp_path / "report"
    base_url = await stack.start_gateway(report_dir=str(folder))
    await page.goto(f"{base_url}/#report")
    # Not written yet: the hint names this gateway's report directory.
    await expect(page.locator("#report-command")).to_contain_text(f"--out {folder}")
    await expect(page.locator("#report-link")).to_be_hidden()
    write_report(folder)
    await page.reload()
    link = page.locator("#report-link")
    await expect(link).to_be_visible()
    await expect(page.locator("#report-status")).to_contain_text("written")
    frame = page.frame_locator("#report-frame")
    await expect(frame.locator("h1")).to_have_text("busgate report")
    await screenshot(page, "report")
    await link.click()
    await expect(page).to_have_url(f"{base_url}/reports/")
    chart = page.locator("#chart")
    await expect(chart).to_be_visible()
    assert await chart.evaluate("image => image.complete && image.naturalWidth > 0")
    async with httpx.AsyncClient(base_url=base_url) as http:
        table = await http.get(f"/reports/{await page.locator('#table').get_attribute('href')}")
        assert table.status_code == 200
        assert table.content.startswith(b"PAR1")
        # Read-only, and nothing outside the directory.
        assert (await http.post("/reports/index.html")).status_code == 405
        assert (await http.get("/reports/..%2f..%2f..%2fetc%2fpasswd")).status_code == 404


async def test_the_report_view_fits_a_phone(page: Page, stack: Stack) -> None:
    await page.set_viewport_size(PHONE)
    await page.goto(f"{stack.base_url}/#report")
    await expect(page.locator("#report-missing")).to_be_visible()
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "the report view scrolls sideways on a phone"


async def test_report_dir_is_a_flag_and_a_variable(tmp_path: Path) -> None:
    import argparse

    from gateway.process.cli import register, settings_from_args
    from gateway.process.settings import load_settings

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["gateway", "--report-dir", str(tmp_path)])
    assert settings_from_args(args).report_dir == str(tmp_path)
    env = {"BUSGATE_GATEWAY_REPORT_DIR": "/srv/report"}
    assert load_settings(environ=env).report_dir == "/srv/report"
    assert load_settings(environ={}).report_dir is None


async def _enter_key(page: Page, key: str) -> None:
    await page.click("#key-button")
    await page.fill("#key-input", key)
    await page.click("#key-save")


async def test_with_auth_on_the_report_needs_the_key_and_shows_once_it_is_given(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    # Issue 19: /reports/ was public while the API asked for credentials.
    folder = tmp_path / "report"
    write_report(folder)
    keys = (ApiKey("ops", "k-ops"), ApiKey("ci", "k-ci", groups=("demo",)))
    base_url = await stack.start_gateway(auth="on", api_keys=keys, report_dir=str(folder))
    async with httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/reports/")).status_code == 401
        assert (await http.get("/reports/", headers={"X-API-Key": "k-ci"})).status_code == 403
    straight = await page.goto(f"{base_url}/reports/")
    assert straight is not None and straight.status == 401
    await page.goto(f"{base_url}/#report")
    await expect(page.locator("#banner")).to_contain_text("API key")
    await expect(page.locator("#report-status")).to_have_text("the report needs an API key")
    await expect(page.locator("#report-found")).to_be_hidden()
    # A key limited to some groups may not read the report of every group.
    await _enter_key(page, "k-ci")
    await expect(page.locator("#report-status")).to_have_text(
        "this API key may not read the report"
    )
    await expect(page.locator("#banner")).to_contain_text("may not")
    await expect(page.locator("#report-found")).to_be_hidden()
    # The right key: the console shows the report, its chart loaded through a relative link.
    await _enter_key(page, "k-ops")
    frame = page.frame_locator("#report-frame")
    await expect(frame.locator("h1")).to_have_text("busgate report")
    chart = frame.locator("#chart")
    await expect(chart).to_be_visible()
    assert await chart.evaluate("image => image.complete && image.naturalWidth > 0")
    await page.locator("#report-link").click()
    await expect(page).to_have_url(f"{base_url}/reports/")
    assert await page.locator("#chart").evaluate("image => image.naturalWidth > 0")
    table = await page.request.get(f"{base_url}/reports/tables/outcomes/part-0.parquet")
    assert table.status == 200 and (await table.body()).startswith(b"PAR1")
    # Forgetting the key hides the report again and its cookie goes with it.
    await page.goto(f"{base_url}/#report")
    await page.click("#key-button")
    await page.click("#key-forget")
    await expect(page.locator("#report-found")).to_be_hidden()
    await expect(page.locator("#report-status")).to_have_text("the report needs an API key")
    again = await page.goto(f"{base_url}/reports/")
    assert again is not None and again.status == 401


async def test_the_served_reports_table_links_and_console_link_work(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    """The page `busgate report` renders (pipeline.report.render_html), with Parquet tables laid
    out as Spark writes them (a folder of part files, _SUCCESS and .crc files beside them)."""
    from pipeline.report import _TITLES, Report, render_html

    folder = tmp_path / "spark-report"
    report = Report(folder, records=3)
    for name in _TITLES:
        table = folder / "tables" / name
        table.mkdir(parents=True)
        pq.write_table(
            pa.table({"group": ["demo"], "n": [1]}), table / "part-00000-1.snappy.parquet"
        )
        (table / "_SUCCESS").write_text("")
        (table / ".part-00000-1.snappy.parquet.crc").write_bytes(b"crc")
        report.tables[name] = [{"group": "demo", "n": 1}]
    (folder / "index.html").write_text(render_html(report, "1h ago", "now"))
    base_url = await stack.start_gateway(report_dir=str(folder))
    async with httpx.AsyncClient(base_url=base_url) as http:
        page_html = (await http.get("/reports/")).text
        links = [link for link in page_html.split("'") if link.startswith("tables/")]
        assert len(links) == len(_TITLES) == 7
        for link in links:
            listing = await http.get(f"/reports/{link}")
            assert listing.status_code == 200, link
            assert "part-00000-1.snappy.parquet" in listing.text
            assert "_SUCCESS" not in listing.text and ".crc" not in listing.text
            part = await http.get(f"/reports/{link}part-00000-1.snappy.parquet")
            assert part.status_code == 200 and part.content[:4] == b"PAR1"
    await page.goto(f"{base_url}/#report")
    frame = page.frame_locator("#report-frame")
    await expect(frame.locator("h1")).to_have_text("busgate report")
    await frame.get_by_role("link", name=re.compile("console")).click()
    # The console opens in the window, not inside its own preview frame.
    await expect(page).to_have_url(re.compile(r"/(#.*)?$"))
    await expect(page.locator("#view-services")).to_be_visible()
    await expect(page.locator("#report-frame")).to_be_hidden()
