"""The web console in real headless Chromium against the real broker, gateway and demo service.

Each test does what a user does (open a view, fill a form, click) and checks what they would see;
each view is saved as a screenshot (to ``docs/screenshots/`` for the README with
``make screenshots``).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect

from bus.objects.codec import BusinessObject, ObjectDecoder, encode_object
from gateway.process.settings import ApiKey
from tests.web.conftest import PHONE, Stack, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def open_view(page: Page, stack: Stack, view: str, base_url: str | None = None) -> None:
    await page.goto(f"{base_url or stack.base_url}/#{view}")
    await expect(page.locator(f"#view-{view}")).to_be_visible()


async def test_services_view_shows_the_demo_service(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "services")
    row = page.locator('#services-body tr[data-group="demo"]')
    await expect(row).to_be_visible()
    await expect(row.locator(".instances")).to_have_text("1")
    await expect(row.locator(".seen")).to_have_text(re.compile(r"\d+ s ago|just now"))
    await expect(page.locator("#state-gateway")).to_have_text("gateway up")
    await expect(page.locator("#state-bus")).to_have_text("bus connected")
    await screenshot(page, "services")


async def test_services_view_updates_without_reload(page: Page, stack: Stack) -> None:
    from bus.demo import create_demo_service

    await open_view(page, stack, "services")
    row = page.locator('#services-body tr[data-group="demo"]')
    await expect(row.locator(".instances")).to_have_text("1")
    second = create_demo_service(await stack.connect(), heartbeat_interval=1.0)
    await asyncio.wait_for(second.start(), 10)
    try:
        await expect(row.locator(".instances")).to_have_text("2")
    finally:
        await asyncio.wait_for(second.stop(), 10)
    await expect(row.locator(".instances")).to_have_text("1")


async def send(page: Page, group: str, cmd: str, args: dict[str, Any]) -> None:
    await page.fill("#req-group", group)
    await page.fill("#req-cmd", cmd)
    await page.fill("#req-args", json.dumps(args))
    await page.click("#req-send")


async def test_a_request_gets_its_ack_on_screen(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "request")
    await send(page, "demo", "echo", {"x": 1, "word": "hello"})
    ack = page.locator("#responses .response.kind-ACK")
    await expect(ack).to_have_count(1)
    await expect(ack.locator(".payload")).to_contain_text('"word": "hello"')
    await expect(page.locator("#req-summary")).to_contain_text("HTTP 200")
    await expect(page.locator("#recent li").first).to_contain_text("demo echo")


async def test_a_streamed_request_shows_every_response(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "request")
    await send(page, "demo", "count", {"n": 3, "interval": 0.2})
    responses = page.locator("#responses .response")
    await expect(responses).to_have_count(3)
    await expect(responses.nth(0)).to_contain_text("more follows")
    await expect(responses.nth(2).locator(".payload")).to_contain_text('"i": 3')
    await expect(responses.nth(2).locator(".meta")).to_have_text("last")
    await expect(page.locator("#responses .stream-end")).to_contain_text("end of stream")
    await expect(page.locator("#req-summary")).to_contain_text("3 ACK")


async def test_a_nak_and_a_missing_group_are_shown_clearly(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "request")
    await send(page, "demo", "fail", {"msg": "boom", "rcd": 409})
    nak = page.locator("#responses .response.kind-NAK")
    await expect(nak).to_have_count(1)
    await expect(nak).to_contain_text("boom")
    await send(page, "nobody-home", "echo", {})
    await expect(page.locator("#responses .response.kind-error")).to_have_count(1)
    await expect(page.locator("#req-summary")).to_contain_text("HTTP 503")


async def test_the_request_form_offers_a_commands_arguments_from_its_schema(
    page: Page, stack: Stack
) -> None:
    await open_view(page, stack, "request")
    await page.fill("#req-args", "{}")
    await page.fill("#req-group", "demo")
    await page.fill("#req-cmd", "fail")
    # The demo's fail declares msg (text) and rcd (integer); its docstring is the summary.
    await expect(page.locator("#req-doc")).to_have_text(re.compile("Always a NAK"))
    fields = page.locator("#req-fields label")
    await expect(fields).to_have_count(2)
    await page.fill('#req-fields input[name="arg-msg"]', "out of stock")
    await page.fill('#req-fields input[name="arg-rcd"]', "409")
    assert json.loads(await page.input_value("#req-args")) == {"msg": "out of stock", "rcd": 409}
    await page.click("#req-send")
    nak = page.locator("#responses .response.kind-NAK")
    await expect(nak).to_contain_text("out of stock")
    await expect(nak).to_contain_text("RCD 409")
    # A command without declared arguments shows no fields.
    await page.fill("#req-cmd", "no-such-command")
    await expect(page.locator("#req-fields")).to_be_hidden()


async def test_a_request_without_an_answer_in_time_shows_a_timeout(
    page: Page, stack: Stack
) -> None:
    await open_view(page, stack, "request")
    await page.fill("#req-timeout", "0.5")
    await send(page, "demo", "sleep", {"seconds": 2})
    timeout = page.locator("#responses .response.kind-timeout")
    await expect(timeout).to_have_count(1)
    await expect(page.locator("#req-summary")).to_contain_text("HTTP 504")
    await page.fill("#req-timeout", "5")


async def test_a_recent_request_can_be_sent_again(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "request")
    await send(page, "demo", "echo", {"again": 42})
    await expect(page.locator("#responses .response.kind-ACK")).to_have_count(1)
    await page.reload()
    entry = page.locator("#recent li", has_text='"again":42')
    await expect(entry).to_have_count(1)
    await entry.get_by_role("button", name="Send again").click()
    ack = page.locator("#responses .response.kind-ACK")
    await expect(ack.locator(".payload")).to_contain_text('"again": 42')
    await send(page, "demo", "count", {"n": 3, "interval": 0.25})
    await expect(page.locator("#responses .response")).to_have_count(3)
    await expect(page.locator("#req-summary")).to_contain_text("3 ACK")
    await screenshot(page, "request")


async def test_a_subscription_shows_a_message_published_by_another_client(
    page: Page, stack: Stack
) -> None:
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "sensor.*")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_have_attribute("data-state", "ok")
    publisher = await stack.connect()
    await publisher.publish("sensor.temp", {"c": 18.5})
    row = page.locator("#messages .message", has_text="sensor.temp")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("18.5")


async def test_a_message_published_from_the_console_arrives(page: Page, stack: Stack) -> None:
    listener = await (await stack.connect()).subscribe("console.*")
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "console.*")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_have_attribute("data-state", "ok")
    await page.click(".publish summary")
    await page.fill("#pub-type", "console.note")
    await page.fill("#pub-payload", json.dumps({"note": "from the browser"}))
    await page.click("#pub-send")
    await expect(page.locator("#pub-result")).to_contain_text("published on console.note")
    row = page.locator("#messages .message", has_text="console.note")
    await expect(row).to_contain_text("from the browser")
    received = await listener.get(timeout=10)
    assert received.payload["note"] == "from the browser"


async def test_pause_holds_messages_and_the_filter_hides_them(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "plant.*")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_have_attribute("data-state", "ok")
    publisher = await stack.connect()
    await page.click("#sub-pause")
    await publisher.publish("plant.pump", {"on": True})
    await expect(page.locator("#sub-pause")).to_have_text("Resume (1 new)")
    await expect(page.locator("#messages .message", has_text="plant.pump")).to_have_count(0)
    await page.click("#sub-pause")
    await expect(page.locator("#messages .message", has_text="plant.pump")).to_have_count(1)
    await publisher.publish("plant.valve", {"open": 3})
    await expect(page.locator("#messages .message", has_text="plant.valve")).to_have_count(1)
    await page.fill("#sub-filter", "valve")
    await expect(page.locator("#messages .message", has_text="plant.pump")).to_be_hidden()
    await expect(page.locator("#messages .message", has_text="plant.valve")).to_be_visible()


class ObjectPeer:
    """An Object System client over TCP (seed 003 wire: JSON metadata, NUL, payload)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = ObjectDecoder()

    @classmethod
    async def open(cls, port: int) -> ObjectPeer:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        return cls(reader, writer)

    async def send(self, metadata: dict[str, Any], payload: bytes = b"") -> None:
        self.writer.write(encode_object(BusinessObject(metadata, payload)))
        await self.writer.drain()

    async def expect(self, event: str) -> BusinessObject:
        async def find() -> BusinessObject:
            while True:
                obj = self.decoder.next_event()
                if isinstance(obj, BusinessObject):
                    if obj.event == event:
                        return obj
                    continue
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError(f"closed while waiting for {event}")
                self.decoder.receive_data(data)

        return await asyncio.wait_for(find(), 10)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def test_object_system_notify_and_disconnect_are_shown_as_such(
    page: Page, stack: Stack
) -> None:
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "ws")
    await page.select_option("#sub-mode", "all")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_contain_text("subscribed as")
    other = await ObjectPeer.open(stack.objects.port)
    try:
        await other.send({"event": "routing/subscribe", "id": "s1", "receive_mode": "all"})
        reply = await other.expect("routing/subscribe/reply")
        other_id = str(reply.metadata["routing-id"])
        notify = page.locator("#messages .message.kind-notify", has_text=other_id)
        await expect(notify).to_have_count(1)
        await other.send({"event": "clients/hello", "text": "hi from a script"})
        hello = page.locator("#messages .message", has_text="hi from a script")
        await expect(hello).to_have_count(1)
        await expect(hello).to_contain_text(other_id)
    finally:
        await other.close()
    disconnect = page.locator("#messages .message.kind-disconnect", has_text=other_id)
    await expect(disconnect).to_have_count(1)
    await expect(disconnect).to_contain_text("routing/disconnect")
    await screenshot(page, "subscribe")


async def load(base_url: str, seconds: float) -> int:
    """Send echo requests (and a few slow ones) at a changing rate; return how many."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    sent = 0
    async with httpx.AsyncClient(base_url=base_url) as http:
        while loop.time() < deadline:
            burst = 1 + (sent // 12) % 4
            for i in range(burst):
                response = await http.post("/v1/request/demo", json={"CMD": "echo", "i": i})
                assert response.status_code == 200
            if sent % 9 == 0:
                slow = {"CMD": "sleep", "seconds": 0.05}
                assert (await http.post("/v1/request/demo", json=slow)).status_code == 200
            sent += burst
            await asyncio.sleep(0.1)
    return sent


async def test_object_system_rules_and_payloads(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "ws")
    await page.fill("#sub-rules", "@*  !@clients/noise  text/*")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_contain_text("subscribed as")
    other = await ObjectPeer.open(stack.objects.port)
    try:
        await other.send({"event": "routing/subscribe", "id": "s2", "receive_mode": "none"})
        await other.expect("routing/subscribe/reply")
        await other.send({"event": "clients/noise", "text": "should not show"})
        await other.send({"type": "image/png", "size": 4}, b"\x89PNG")
        await other.send({"type": "text/plain", "size": 11}, b"plain words")
        await other.send({"event": "clients/hello", "text": "rules let me in"})
        messages = page.locator("#messages .message")
        await expect(messages.filter(has_text="rules let me in")).to_have_count(1)
        await expect(messages.filter(has_text="plain words")).to_have_count(1)
        await expect(messages.filter(has_text="should not show")).to_have_count(0)
        await expect(messages.filter(has_text="image/png")).to_have_count(0)
    finally:
        await other.close()
    await page.click("#sub-stop")
    await expect(page.locator("#sub-state")).to_have_text("not subscribed")


async def test_traffic_view_draws_requests_by_group(page: Page, stack: Stack) -> None:
    await open_view(page, stack, "traffic")
    traffic = asyncio.create_task(load(stack.base_url, 12.0))
    card = page.locator('#traffic-cards .traffic[data-group="demo"]')
    await expect(card).to_be_visible()
    await expect(card.locator(".rps-now")).not_to_have_text(re.compile(r"^(-|0\.0)$"))
    await expect(card.locator("svg.rate polyline")).not_to_have_count(0)
    await expect(card.locator(".p50-now")).to_have_text(re.compile(r"ms$"))
    await page.wait_for_timeout(8000)  # a few samples more, for the picture
    await screenshot(page, "traffic")
    sent = await asyncio.wait_for(traffic, 30)
    await page.wait_for_timeout(2500)  # one more sample, so the total counts every request
    assert int(await card.locator(".total").inner_text()) >= sent


async def test_phone_layout_keeps_the_services_readable(page: Page, stack: Stack) -> None:
    await page.set_viewport_size(PHONE)
    await open_view(page, stack, "services")
    row = page.locator('#services-body tr[data-group="demo"]')
    await expect(row).to_be_visible()
    await screenshot(page, "services-phone")
    for view in ("services", "request", "subscribe", "traffic", "report"):
        await open_view(page, stack, view)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"the {view} view scrolls sideways on a phone"
        # Every tab can be reached without scrolling the tab strip.
        tab = page.locator(f'.tabs a[data-view="{view}"]')
        box = await tab.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"], view
    # A live subscription (its state names a long routing id) still fits.
    await open_view(page, stack, "subscribe")
    await page.select_option("#sub-source", "ws")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_contain_text("subscribed as")
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "a live subscription scrolls sideways on a phone"
    await page.click("#sub-stop")


async def test_with_auth_on_the_key_is_asked_once_and_kept(page: Page, stack: Stack) -> None:
    base_url = await stack.start_gateway(auth="on", api_keys=(ApiKey(name="ops", key="k-123"),))
    await page.goto(f"{base_url}/#services")
    await expect(page.locator("#banner")).to_contain_text("API key")
    await page.click("#key-button")
    await page.fill("#key-input", "k-123")
    await page.click("#key-save")
    await expect(page.locator('#services-body tr[data-group="demo"]')).to_be_visible()
    await expect(page.locator("#banner")).to_be_hidden()
    await page.reload()
    await expect(page.locator("#key-button")).to_have_text("key: …-123")
    await page.goto(f"{base_url}/#request")
    await send(page, "demo", "echo", {"with": "key"})
    await expect(page.locator("#responses .response.kind-ACK")).to_have_count(1)
    # The streams carry the key as ?key=: an SSE subscription and the /ws Object System.
    await page.goto(f"{base_url}/#subscribe")
    await page.select_option("#sub-source", "sse")
    await page.fill("#sub-types", "keyed.*")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_have_attribute("data-state", "ok")
    await (await stack.connect()).publish("keyed.event", {"seen": "with a key"})
    await expect(page.locator("#messages .message", has_text="with a key")).to_have_count(1)
    await page.select_option("#sub-source", "ws")
    await page.click("#sub-start")
    await expect(page.locator("#sub-state")).to_contain_text("subscribed as")


async def test_with_auth_on_a_wrong_key_is_refused_clearly(page: Page, stack: Stack) -> None:
    base_url = await stack.start_gateway(auth="on", api_keys=(ApiKey(name="ops", key="right"),))
    await page.goto(f"{base_url}/#request")
    await page.click("#key-button")
    await page.fill("#key-input", "wrong")
    await page.click("#key-save")
    await send(page, "demo", "echo", {})
    await expect(page.locator("#banner")).to_contain_text("refused this API key")
    await expect(page.locator("#responses .response.kind-error")).to_have_count(1)
