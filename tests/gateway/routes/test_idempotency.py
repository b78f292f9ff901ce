"""``Idempotency-Key`` (gateway/routes/idempotency.py, PROTOCOL.md 9.12) on two gateway processes,
on
the broker with a journal and on JetStream: a repeat through either gateway gets the first
outcome, the event is journaled once and the service runs once; another body is 409."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bus.asyncio.client import connect
from bus.asyncio.service import Request, Service
from tests.gateway.conftest import Stack, base_settings, running_stack
from tests.gateway.events.test_events_resume import two_gateways

__all__ = ["two_gateways"]  # the fixture: two gateway processes on the broker, on JetStream


@pytest.fixture
async def counter(two_gateways: tuple[Stack, str]) -> AsyncIterator[dict[str, Any]]:
    """A service ``till`` on the stack's bus whose ``charge`` counts its runs."""
    stack, _ = two_gateways
    runs: dict[str, Any] = {"count": 0}

    async def start() -> Any:
        client = await connect(stack.settings.bus_url, "till")
        service = Service(client, "till", heartbeat_interval=0.5)

        @service.command("charge")
        async def charge(req: Request) -> dict[str, Any]:
            runs["count"] += 1
            await asyncio.sleep(0.2)  # long enough for a repeat to come while it runs
            return {"charged": req["amount"], "run": runs["count"]}

        await service.start()
        return client, service

    client, service = await stack.run(start())
    yield runs

    async def stop() -> None:
        await service.stop()
        await client.close()

    await stack.run(stop())


async def test_a_publish_is_journaled_once_whichever_gateway_a_repeat_reaches(
    two_gateways: tuple[Stack, str],
) -> None:
    stack, other = two_gateways
    headers = {"Idempotency-Key": "order-17"}
    async with httpx.AsyncClient(timeout=15.0) as http:
        url = "/v1/publish/till.sale?confirm=1"
        first = await http.post(stack.url + url, json={"total": 5}, headers=headers)
        assert first.status_code == 200, first.text
        again = await http.post(stack.url + url, json={"total": 5}, headers=headers)
        there = await http.post(other + url, json={"total": 5}, headers=headers)
        assert again.json() == there.json() == first.json()  # the same seq, the same mid
        assert again.headers["idempotent-replayed"] == "true"
        assert "idempotent-replayed" not in first.headers
        plain = {"Idempotency-Key": "order-17-plain"}
        answers = [  # without confirm: 202 as ever, and still journaled once
            await http.post(f"{url_}/v1/publish/till.sale", json={"total": 7}, headers=plain)
            for url_ in (stack.url, other)
        ]
        assert [a.status_code for a in answers] == [202, 202]
        assert answers[0].json() == answers[1].json()
        history = (await http.get(f"{other}/v1/history/till.sale")).json()
        totals = [e["payload"]["total"] for e in history["events"]]
        assert totals == [5, 7]  # each journaled once
        refused = await http.post(stack.url + url, json={"total": 6}, headers=headers)
        assert refused.status_code == 409, refused.text  # another body: known here
        assert refused.json()["error"]["code"] == "conflict"
        fresh = {"Idempotency-Key": "order-19"}  # one gateway only knows the first body:
        assert (await http.post(stack.url + url, json={"a": 1}, headers=fresh)).status_code == 200
        refused = await http.post(other + url, json={"a": 2}, headers=fresh)
        assert refused.status_code == 409, refused.text  # the other hears it from the bus
        assert refused.json()["error"]["code"] == "conflict"
        other_key = await http.post(stack.url + url, json={"total": 6},
                                    headers={"Idempotency-Key": "order-18"})  # fmt: skip
        assert other_key.status_code == 200 and other_key.json()["seq"] > first.json()["seq"]
        history = (await http.get(f"{other}/v1/history/till.sale")).json()
        assert [e["payload"] for e in history["events"]] == [
            {"total": 5}, {"total": 7}, {"a": 1}, {"total": 6}
        ]  # fmt: skip


async def test_a_request_runs_once_whichever_gateway_a_repeat_reaches(
    two_gateways: tuple[Stack, str], counter: dict[str, Any]
) -> None:
    stack, other = two_gateways
    headers = {"Idempotency-Key": "pay-1"}
    body = {"CMD": "charge", "amount": 3}
    async with httpx.AsyncClient(timeout=15.0) as http:
        url = "/v1/request/till"
        # two at once on one gateway, one on the other while the first still runs
        answers = await asyncio.gather(
            http.post(stack.url + url, json=body, headers=headers),
            http.post(stack.url + url, json=body, headers=headers),
            http.post(other + url, json=body, headers=headers),
        )
        assert [a.status_code for a in answers] == [200, 200, 200]
        payloads = [a.json()["payload"] for a in answers]
        assert payloads == [{"charged": 3, "run": 1}] * 3
        assert counter["count"] == 1  # the service ran once
        assert len({a.headers["x-busgate-mid"] for a in answers}) == 1
        later = await http.post(other + url, json=body, headers=headers)
        assert later.json()["payload"] == {"charged": 3, "run": 1}
        assert later.headers["idempotent-replayed"] == "true"
        for url_ in (stack.url, other):
            refused = await http.post(url_ + url, json={**body, "amount": 4}, headers=headers)
            assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"
        typed = await http.post(f"{other}/v1/till/charge", json={"amount": 3}, headers=headers)
        assert typed.status_code == 200  # another route: another key
        assert typed.json()["payload"]["run"] == 2 and counter["count"] == 2
        plain = await http.post(stack.url + url, json=body)
        assert plain.json()["payload"]["run"] == 3  # no key: runs every time


@pytest.fixture(scope="module")
def plain_stack() -> Iterator[Stack]:
    with running_stack(base_settings()) as stack:
        yield stack


@pytest.mark.parametrize(
    ("headers", "wanted"),
    [({"Idempotency-Key": ""}, 400), ({"Idempotency-Key": "a b"}, 400),
     ({"Idempotency-Key": "k" * 256}, 400), ({"Idempotency-Key": "k" * 255}, 200)],
)  # fmt: skip
async def test_a_bad_key_is_400(plain_stack: Stack, headers: dict[str, str], wanted: int) -> None:
    async with httpx.AsyncClient(base_url=plain_stack.url, timeout=15.0) as http:
        answer = await http.post("/v1/request/demo", json={"CMD": "echo"}, headers=headers)
    assert answer.status_code == wanted, answer.text


async def test_what_is_not_kept_is_tried_again(plain_stack: Stack) -> None:
    headers = {"Idempotency-Key": "nobody-1"}
    async with httpx.AsyncClient(base_url=plain_stack.url, timeout=15.0) as http:
        for _ in range(2):  # no responders: not an outcome, each repeat asks again
            answer = await http.post("/v1/request/nobody", json={"CMD": "x"}, headers=headers)
            assert answer.status_code == 503 and "idempotent-replayed" not in answer.headers
        nak = await http.post("/v1/request/demo", json={"CMD": "fail", "rcd": 418},
                              headers={"Idempotency-Key": "nak-1"})  # fmt: skip
        again = await http.post("/v1/request/demo", json={"CMD": "fail", "rcd": 418},
                                headers={"Idempotency-Key": "nak-1"})  # fmt: skip
        assert nak.status_code == again.status_code == 418  # the service's outcome: kept
        assert again.json() == nak.json() and again.headers["idempotent-replayed"] == "true"


README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readmes_idempotency_curl_lines_work_as_printed(tmp_path: Path) -> None:
    block = README.read_text().split("**Idempotent retries.**", 1)[1].split("```sh", 1)[1]
    lines = [line for line in block.split("```", 1)[0].splitlines() if line.startswith("curl")]
    assert len(lines) == 4
    with running_stack(base_settings(), journal=str(tmp_path), journal_fsync="none") as stack:
        seqs = []
        for line in lines:
            command, comment = line.split("#", 1)
            args = shlex.split(command.replace("localhost:8080", stack.url))
            done = subprocess.run(
                [*args, "-s", "-w", "\\n%{http_code}"],
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            body, status = done.stdout.rsplit("\n", 1)
            assert int(status) == int(comment.split()[0].rstrip(",")), line
            seqs.append(json.loads(body).get("seq"))
        assert seqs[0] == seqs[1] is not None  # "the same seq"
