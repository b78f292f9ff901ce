"""``POST /v1/mail/{office}/{mailbox}`` (gateway/routes/routes_mail.py, PROTOCOL.md 9.13): curl
mails a MOP
mailbox through the real gateway, broker and MOP listener, and gets its reply."""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from bus.mop.listener import MopListener, open_mop_listener
from gateway.process.settings import parse_api_key
from tests.bus.mopclient import MopClient, content, env
from tests.gateway.conftest import Stack, base_settings, running_stack

WAIT = 10.0
KEYS = (parse_api_key("ops:opskey"), parse_api_key("narrow:nkey:demo:x.*"))


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[Stack, int]]:
    """The gateway stack with a MOP listener on its broker (open mode: no secrets)."""
    with running_stack(base_settings(api_keys=KEYS), demo=False) as stack:
        listener = stack.call(_listener(stack))
        yield stack, listener.port
        stack.call(listener.stop())


async def _listener(stack: Stack) -> MopListener:
    assert stack.broker is not None
    return await open_mop_listener(stack.broker, "127.0.0.1", 0)


@pytest.fixture
async def test1(site: tuple[Stack, int]) -> AsyncIterator[MopClient]:
    client = await MopClient.open(site[1], "test1", "any")
    yield client
    await client.close()


@pytest.fixture
async def http(site: tuple[Stack, int]) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"X-API-Key": "opskey"}
    async with httpx.AsyncClient(base_url=site[0].url, headers=headers, timeout=WAIT) as client:
        yield client


async def test_http_mail_reaches_a_mop_mailbox_and_its_reply_is_the_answer(
    test1: MopClient, http: httpx.AsyncClient
) -> None:
    posting = asyncio.create_task(
        http.post("/v1/mail/test1/io", params={"type": "pump.off"}, json={"pump": "off"})
    )
    mail = await test1.expect(to="test1.io")
    assert env(mail)["type"] == "pump.off" and env(mail)["expect"] is True
    assert env(mail)["from"].endswith(".http") and content(mail) == {"pump": "off"}
    test1.send({"from": "test1.io", "to": env(mail)["from"], "reply": env(mail)["id"]}, ok=True)
    response = await posting
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["payload"] == {"ok": True} and body["header"]["TYP"] == "ACK"
    assert body["header"]["SRC"] == "test1.io"


async def test_mail_without_expect_is_202_and_asks_for_no_reply(
    test1: MopClient, http: httpx.AsyncClient
) -> None:
    response = await http.post("/v1/mail/test1/io", params={"expect": "0"}, json={"n": 1})
    assert response.status_code == 202 and response.json() == {"to": "test1.io"}
    mail = await test1.expect(to="test1.io")
    assert "expect" not in env(mail) and content(mail) == {"n": 1}


async def test_refusals(http: httpx.AsyncClient, site: tuple[Stack, int]) -> None:
    nobody = await http.post("/v1/mail/nobody/io", json={})
    assert nobody.status_code == 404 and "nobody" in nobody.json()["error"]["message"]
    for path, params in (
        ("/v1/mail/a.b/io", {}),  # MOP names hold no dot
        ("/v1/mail/test1/io", {"expect": "maybe"}),
        ("/v1/mail/test1/io", {"timeout": "-1"}),
    ):
        response = await http.post(path, params=params, json={})
        assert response.status_code == 400, (path, params, response.text)
    not_json = await http.post("/v1/mail/test1/io", content=b"[1]")
    assert not_json.status_code == 400
    headers = {"X-API-Key": "nkey"}  # its groups are demo only
    async with httpx.AsyncClient(base_url=site[0].url, headers=headers, timeout=WAIT) as narrow:
        refused = await narrow.post("/v1/mail/test1/io", json={})
    assert refused.status_code == 403
    anonymous = await http.post("/v1/mail/test1/io", json={}, headers={"X-API-Key": "wrong"})
    assert anonymous.status_code == 401


async def test_no_reply_in_time_is_504(test1: MopClient, http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/mail/test1/quiet", params={"timeout": "0.5"}, json={})
    assert response.status_code == 504
    mail = await test1.expect(to="test1.quiet")  # it was delivered; nobody answered
    assert env(mail)["expect"] is True


README = Path(__file__).resolve().parents[3] / "README.md"


async def test_the_readmes_mail_line_works_as_printed(
    site: tuple[Stack, int], http: httpx.AsyncClient
) -> None:
    section = README.read_text().split("## MOP post offices", 1)[1].split("\n## ", 1)[0]
    (line,) = [part for part in section.split("`") if part.startswith("curl ")]
    args = shlex.split(line.replace("localhost:8080", site[0].url))
    irrigation = await MopClient.open(site[1], "irrigation", "any")
    try:
        curl = await asyncio.create_subprocess_exec(
            *args, "-s", "-H", "X-API-Key: opskey", stdout=asyncio.subprocess.PIPE
        )
        mail = await irrigation.expect(to="irrigation.io")
        assert env(mail)["type"] == "pump.off" and content(mail) == {"pump": "off"}
        reply = {"from": "irrigation.io", "to": env(mail)["from"], "reply": env(mail)["id"]}
        irrigation.send(reply, ok=True)
        out, _ = await asyncio.wait_for(curl.communicate(), WAIT)
        assert json.loads(out)["payload"] == {"ok": True}
    finally:
        await irrigation.close()
