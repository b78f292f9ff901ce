"""The console where a newcomer tripped (issue 15), in real Chromium against the real stack:
request outcomes, subscriptions that close or resume, bus events over /ws, silent instances,
outcomes and history in Traffic, and the Bus view (connections, health, journal, actions)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from playwright.async_api import Page, expect

from bus.asyncio.client import connect
from bus.asyncio.service import Request, Service
from bus.discovery.services import HEARTBEAT_TYPE, Heartbeat, heartbeat_payload
from bus.message.message import Message, MessageType
from tests.web.conftest import MANAGER, Stack, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def open_view(page: Page, base_url: str, view: str) -> None:
    await page.goto(f"{base_url}/#{view}")
    await expect(page.locator(f"#view-{view}")).to_be_visible()


async def send(page: Page, group: str, cmd: str, args: dict[str, Any]) -> None:
    await page.fill("#req-group", group)
    await page.fill("#req-cmd", cmd)
    await page.fill("#req-args", json.dumps(args))
    await page.click("#req-send")
    await expect(page.locator("#req-send")).to_be_enabled()


# -- Request -------------------------------------------------------------------------------


async def test_a_nak_is_summarised_as_a_nak_and_codes_have_their_label(
    page: Page, stack: Stack
) -> None:
    await open_view(page, stack.base_url, "request")
    await send(page, "demo", "fail", {"msg": "busy", "rcd": 409})
    summary = page.locator("#req-summary")
    await expect(summary).to_contain_text(re.compile(r"^NAK 409 · 1 NAK"))
    await expect(summary).not_to_contain_text("HTTP 200")
    await expect(page.locator("#responses .response.kind-NAK .meta")).to_contain_text("RCD 409")
    await send(page, "nobody-here", "echo", {})
    meta = page.locator("#responses .response.kind-error .meta")
    await expect(meta).to_contain_text("code no_responders")
    await expect(meta).not_to_contain_text("RCD")
    await expect(summary).to_contain_text("no_responders · HTTP 503")


# -- Subscribe -----------------------------------------------------------------------------


async def test_bus_events_over_the_object_system_show_their_payload(
    page: Page, stack: Stack
) -> None:
    # The gateway's /ws links to an object server bridged to the bus, as in `busgate run`.
    from bus.objects.bridge import Bridge

    bridge = Bridge(stack.objects, await stack.connect())
    await bridge.start()
    try:
        await open_view(page, stack.base_url, "subscribe")
        await page.select_option("#sub-source", "ws")
        await page.click("#sub-start")
        await expect(page.locator("#sub-state")).to_contain_text("subscribed as")
        publisher = await stack.connect()
        row = page.locator("#messages .message", has_text="bus/sensor.temp")
        for _ in range(40):  # the bridge subscribes in the background: publish until it shows
            await publisher.publish("sensor.temp", {"c": 18.5, "room": "lab"})
            if await row.count():
                break
            await page.wait_for_timeout(250)
        await expect(row.first.locator(".summary")).to_contain_text('{"c":18.5,"room":"lab"}')
        await expect(row.first).not_to_contain_text("bytes")
    finally:
        await page.click("#sub-stop")
        await bridge.stop()


async def test_the_count_is_right_after_resume(page: Page, stack: Stack) -> None:
    await open_view(page, stack.base_url, "subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "count.*")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_have_attribute("data-state", "ok")
    await page.click("#sub-clear")
    publisher = await stack.connect()
    await page.click("#sub-pause")
    for i in range(3):
        await publisher.publish("count.up", {"i": i})
    await expect(page.locator("#sub-pause")).to_have_text("Resume (3 new)")
    await expect(page.locator("#sub-count")).to_contain_text("3 held while paused")
    await page.click("#sub-pause")
    await expect(page.locator("#sub-count")).to_have_text("3 messages")
    await page.click("#sub-stop")


async def test_the_status_follows_a_closed_stream_and_its_return(page: Page, stack: Stack) -> None:
    base_url = await stack.start_gateway()
    await open_view(page, base_url, "subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "gone.*")
    await page.click("#sub-start")
    state = page.locator("#sub-state")
    await expect(state).to_have_text("subscribed to gone.*")

    async def while_down() -> None:
        await expect(state).not_to_contain_text("subscribed")
        await expect(state).to_contain_text("closed")

    await stack.restart_gateway(base_url, while_down)
    await expect(state).to_have_text("subscribed to gone.*", timeout=30_000)
    publisher = await stack.connect()
    await publisher.publish("gone.back", {"ok": True})
    await expect(page.locator("#messages .message", has_text="gone.back")).to_have_count(1)
    await page.click("#sub-stop")


# -- Services ------------------------------------------------------------------------------


async def test_an_instance_whose_heartbeats_stopped_is_marked_silent(
    page: Page, stack: Stack
) -> None:
    client = await stack.connect()
    beat = Heartbeat("ghost-1", "ghost", interval=2.0, commands=("boo",), host="crashed:1")
    message = Message.event(HEARTBEAT_TYPE, heartbeat_payload(beat))
    message.frame["TYP"] = MessageType.HBT.value
    await open_view(page, stack.base_url, "services")
    await client.send(message)  # one heartbeat, then nothing: as if killed
    row = page.locator('#services-body tr[data-group="ghost"]')
    await expect(row.locator(".instances")).to_have_text("1")
    # Silent after 1.5 intervals (3 s), dropped after 3 (6 s); the view polls every 2 s.
    await expect(row).to_have_attribute("data-silent", "1")
    await expect(row.locator(".instances")).to_have_text("0 (+1 silent)")
    await expect(row.locator(".status")).to_have_attribute("data-state", "warn")
    await expect(row.locator(".status")).to_contain_text("1 silent")
    await expect(row).to_have_count(0)


# -- Traffic -------------------------------------------------------------------------------


async def test_traffic_shows_outcomes_per_group_and_the_last_hour(page: Page, stack: Stack) -> None:
    base_url = await stack.start_gateway()  # a gateway of its own: its stats are this test's
    await open_view(page, base_url, "traffic")
    client = await connect(stack.bus_url)
    try:
        import httpx

        async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
            await http.post("/v1/request/demo", json={"CMD": "echo"})
            for _ in range(3):
                await http.post("/v1/request/demo", json={"CMD": "fail", "rcd": 409})
                await http.post("/v1/request/nobody", json={"CMD": "echo"})
    finally:
        await client.close()
    demo = page.locator('#traffic-cards .traffic[data-group="demo"]')
    await expect(demo.locator('.outcome[data-outcome="nak"]')).to_have_text("NAK 3")
    await expect(demo.locator('.outcome[data-outcome="nak"]')).to_have_attribute("data-bad", "true")
    await expect(demo.locator('.outcome[data-outcome="ack"]')).to_have_text("ACK 1")
    await expect(demo).to_have_attribute("data-health", "failing")
    await expect(demo.locator(".failed")).to_contain_text("75% failed (3 of 4")
    other = page.locator('#traffic-cards .traffic[data-group="_other"]')
    await expect(other.locator('.outcome[data-outcome="no_responders"]')).to_have_text(
        "no responders 3"
    )
    await expect(other.locator("h3")).to_contain_text("no service has answered")
    await page.click('#traffic-range button[data-range="hour"]')
    await expect(page.locator("#traffic-hint")).to_contain_text("last hour")
    await expect(demo.locator(".total-label")).to_have_text("requests in the last hour")
    await expect(demo.locator(".total")).to_have_text("4")
    await expect(demo.locator("svg.rate polyline")).not_to_have_count(0)
    await page.click('#traffic-range button[data-range="live"]')
    await expect(demo.locator(".total-label")).to_have_text("requests in total")


# -- Bus (connections, health, journal, actions) ------------------------------------------


async def test_the_bus_view_shows_who_is_on_the_bus_and_acts(page: Page, stack: Stack) -> None:
    base_url = await stack.start_gateway(bus_name=MANAGER[0], bus_secret=MANAGER[1])
    spare_client = await stack.connect()
    spare = Service(spare_client, "spare", heartbeat_interval=1.0)

    @spare.command("echo")
    async def echo(req: Request) -> dict[str, Any]:
        return req.args

    await spare.start()
    visitor = await connect(stack.bus_url, name="visitor")
    try:
        await visitor.request("spare", "echo", {"hello": 1}, timeout=10)
        await open_view(page, base_url, "bus")
        links = page.locator("#bus-links-body tr")
        await expect(links.filter(has_text="visitor")).to_have_count(1)
        # what it moved: the request out, the answer back
        visitor_row = page.locator('#bus-links-body tr[data-office="visitor"]')
        await expect(visitor_row.locator("td.in")).to_have_text(
            re.compile(r"^\d+ msg / [\d.]+ k?B$")
        )
        await expect(visitor_row.locator("td.out")).not_to_have_text("0 msg / 0 B")
        await expect(
            page.locator(f'#bus-links-body tr[data-office="{MANAGER[0]}"]')
        ).not_to_have_count(0)
        demo_link = page.locator(
            "#bus-links-body tr", has=page.locator("td.groups", has_text="demo")
        )
        await expect(demo_link.first.locator("td.peer")).to_have_text(
            re.compile(r"^127\.0\.0\.1:\d+$")
        )
        await expect(page.locator('.health-card[data-figure="connections"] strong')).to_have_text(
            re.compile(r"^\d+ / 1000$")
        )
        await expect(page.locator('.health-card[data-figure="journal"] strong')).to_contain_text(
            "records"
        )
        # The journal: the visitor's request to spare is there.
        await page.fill("#journal-group", "spare")
        await page.click("#journal-refresh")
        journal = page.locator("#bus-journal-body tr")
        await expect(journal.filter(has_text="RQS").filter(has_text="echo")).not_to_have_count(0)
        await page.evaluate("window.scrollTo(0, 0)")
        await screenshot(page, "bus")
        # Drain spare (two clicks): its consumer is no longer sent requests.
        group = page.locator('#bus-groups-body tr[data-group="spare"]')
        await expect(group.locator(".consumers")).to_have_text("1")
        await group.get_by_role("button", name="Drain").click()
        # The table is redrawn every 2 s: the armed button must still be armed after one (it
        # was not, and a second click that met a redraw armed the new button again).
        await group.evaluate("tr => { tr.dataset.before = 'redraw'; }")
        await expect(page.locator('#bus-groups-body tr[data-before="redraw"]')).to_have_count(0)
        await group.get_by_role("button", name="Drain: sure?").click()
        await expect(page.locator('#bus-groups-body tr[data-group="spare"]')).to_have_count(0)
        await expect(page.locator("#bus-action")).to_contain_text('"drained":1')
        # Disconnect the visitor's link (two clicks): that link goes (its client reconnects anew).
        row = links.filter(has_text="visitor")
        number = await row.get_attribute("data-link")
        await row.get_by_role("button", name="Disconnect").click()
        await row.get_by_role("button", name="Disconnect: sure?").click()
        await expect(page.locator(f'#bus-links-body tr[data-link="{number}"]')).to_have_count(0)
    finally:
        await visitor.close()
        await spare.stop()


async def test_the_bus_view_says_why_it_is_refused(page: Page, stack: Stack) -> None:
    await open_view(page, stack.base_url, "bus")  # this gateway is no manager
    refused = page.locator("#bus-refused")
    await expect(refused).to_be_visible()
    await expect(refused).to_contain_text("not one of the broker's managers")


async def test_every_tab_is_reachable_on_a_phone(page: Page, stack: Stack) -> None:
    await page.set_viewport_size({"width": 390, "height": 844})
    try:
        await open_view(page, stack.base_url, "services")
        await page.click('.tabs a[data-view="bus"]')
        await expect(page.locator("#view-bus")).to_be_visible()
    finally:
        await page.set_viewport_size({"width": 1280, "height": 800})
    await asyncio.sleep(0)
