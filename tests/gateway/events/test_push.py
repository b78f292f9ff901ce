"""Push subscriptions (gateway/events/push.py, push_http.py, routes_push.py, bus/push.py;
PROTOCOL.md
9.14) against a real HTTP endpoint that fails on purpose: in order per type, retried with
backoff, signed, dead-lettered after max_attempts, resumed by another gateway with nothing
skipped, on the broker's journal and on JetStream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bus.errors import ConfigError
from bus.push import Ledger, retry_delay, signature, verify
from gateway.app import create_app
from gateway.process.settings import load_settings
from tests.conftest import NATS_SERVER, NatsServer
from tests.docexamples import examples
from tests.gateway.conftest import Stack, base_settings, eventually, free_port, running_stack

SECRET = "whsec-test"


@dataclass
class Receiver:
    """A real HTTP endpoint: records every POST, answers what ``decide`` says."""

    decide: Callable[[dict[str, Any], int], int] = lambda event, attempt: 200
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    port: int = 0
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook?src=busgate"

    async def start(self) -> None:
        async def hook(request: Request) -> Response:
            body = await request.body()
            self.got.append((dict(request.headers), body))
            status = self.decide(json.loads(body), int(request.headers["busgate-attempt"]))
            return Response(b"" if status == 204 else b"ok" if status < 300 else b"no", status)

        app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
        self.port = self.port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        async with asyncio.timeout(15):
            while not self.server.started:
                await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self.server is not None and self.task is not None:
            self.server.should_exit = True
            await self.task

    def delivered(self) -> list[tuple[str, int, int]]:
        """(type, i, attempt) of each delivery answered 2xx, in arrival order."""
        found = []
        for headers, body in self.got:
            event = json.loads(body)
            if self.decide(event, int(headers["busgate-attempt"])) < 300:
                found.append(
                    (event["type"], event["payload"]["i"], int(headers["busgate-attempt"]))
                )
        return found


@contextlib.asynccontextmanager
async def receiving(decide: Callable[[dict[str, Any], int], int]) -> AsyncIterator[Receiver]:
    receiver = Receiver(decide)
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


@pytest.fixture(params=["broker", pytest.param("jetstream", marks=pytest.mark.nats)])
def pushing(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """A gateway with a push_dir, on the broker with a journal or on nats-server -js."""
    settings = base_settings(push_dir=str(tmp_path / "push"))
    with contextlib.ExitStack() as resources:
        if request.param == "jetstream":
            if not os.path.exists(NATS_SERVER):
                pytest.fail(f"nats-server is not installed at {NATS_SERVER}: make install")
            nats = NatsServer(0, "-js", "-sd", str(tmp_path / "js")).start()
            resources.callback(nats.stop)
            bus: dict[str, Any] = {"bus_url": nats.url}
        else:
            bus = {"journal": str(tmp_path / "journal"), "journal_fsync": "none"}
        yield resources.enter_context(running_stack(settings, demo=False, **bus))


def _declaration(receiver: Receiver, **more: Any) -> dict[str, Any]:
    return {"pattern": "shop.*", "url": receiver.url, "secret": SECRET, "max_attempts": 3,
            "backoff_initial": 0.05, "backoff_max": 0.1, **more}  # fmt: skip


def _fails(event: dict[str, Any], attempt: int) -> int:
    """shop.order 2 always fails (dead letter); shop.order 1 fails its first attempt."""
    i, type_ = event["payload"]["i"], event["type"]
    if type_ == "shop.order" and i == 2:
        return 500
    if type_ == "shop.order" and i == 1 and attempt == 1:
        return 503
    return 204


async def test_pushed_in_order_retried_signed_and_dead_lettered(pushing: Stack) -> None:
    async with (
        receiving(_fails) as receiver,
        httpx.AsyncClient(base_url=pushing.url, timeout=15.0) as http,
    ):
        made = await http.put("/v1/admin/push/orders", json=_declaration(receiver))
        assert made.status_code == 201, made.text
        assert made.json()["secret"] == "********"

        async def running() -> bool:
            listed = (await http.get("/v1/admin/push")).json()["push"]
            return listed[0]["status"] == "running"

        await eventually(running)
        for i in range(5):
            await http.post("/v1/publish/shop.order?confirm=1", json={"i": i})
            if i < 2:
                await http.post("/v1/publish/shop.refund?confirm=1", json={"i": i})
        await http.post("/v1/publish/pump.on?confirm=1", json={"i": 9})  # not its pattern

        async def all_in() -> bool:
            return len(receiver.delivered()) == 6

        await eventually(all_in, timeout=20)
        delivered = receiver.delivered()
        orders = [i for t, i, _ in delivered if t == "shop.order"]
        assert orders == [0, 1, 3, 4]  # in order; 2 went to the dead letters
        assert [i for t, i, _ in delivered if t == "shop.refund"] == [0, 1]
        assert ("shop.order", 1, 2) in delivered  # the second attempt
        for headers, body in receiver.got:
            assert headers["busgate-push"] == "orders" and headers["busgate-type"].startswith(
                "shop."
            )
            assert verify(SECRET, headers["busgate-signature"], body, time.time())
            assert not verify("another", headers["busgate-signature"], body, time.time())
            assert json.loads(body)["seq"] == int(headers["busgate-seq"])
        failing = [h for h, b in receiver.got if json.loads(b)["payload"]["i"] == 2
                   and json.loads(b)["type"] == "shop.order"]  # fmt: skip
        assert [int(h["busgate-attempt"]) for h in failing] == [1, 2, 3]

        async def dead() -> bool:
            page = (await http.get("/v1/history/deadletter.orders")).json()
            return len(page["events"]) == 1

        await eventually(dead)
        letter = (await http.get("/v1/history/deadletter.orders")).json()["events"][0]["payload"]
        assert letter["push"] == "orders" and letter["attempts"] == 3
        assert letter["error"] == "HTTP 500" and letter["event"]["payload"] == {"i": 2}
        listed = (await http.get("/v1/admin/push")).json()["push"][0]
        assert (listed["delivered"], listed["retried"], listed["dead_lettered"]) == (6, 3, 1)
        assert listed["pending"] == 0
        metrics = (await http.get("/metrics")).text
        assert 'busgate_gateway_push_delivered_total{push="orders"} 6.0' in metrics
        assert 'busgate_gateway_push_dead_lettered_total{push="orders"} 1.0' in metrics
        assert (await http.delete("/v1/admin/push/orders")).status_code == 204
        assert (await http.delete("/v1/admin/push/orders")).status_code == 404
        assert (await http.get("/v1/admin/push")).json() == {"push": []}


async def test_another_gateway_takes_over_and_resumes_with_nothing_skipped(
    tmp_path: Path,
) -> None:
    settings = base_settings(push_dir=str(tmp_path / "push"))
    journal = str(tmp_path / "journal")
    with running_stack(settings, demo=False, journal=journal, journal_fsync="none") as stack:
        async with (
            receiving(lambda event, attempt: 200) as receiver,
            httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http,
        ):
            declared = _declaration(receiver, max_attempts=1000)  # it retries while it is down
            made = await http.put("/v1/admin/push/mirror", json=declared)
            assert made.status_code == 201
            second, stop_second = await _another_gateway(stack)
            try:
                async with httpx.AsyncClient(base_url=second, timeout=15.0) as other:

                    async def standby() -> bool:
                        listed = (await other.get("/v1/admin/push")).json()["push"]
                        return bool(listed) and listed[0]["status"].startswith("standby")

                    await eventually(standby)
                    for i in range(3):
                        await http.post("/v1/publish/shop.order?confirm=1", json={"i": i})
                    await eventually(lambda: _count(receiver, 3))
                    await receiver.stop()  # the endpoint goes away ...
                    for i in range(3, 6):
                        await http.post("/v1/publish/shop.order?confirm=1", json={"i": i})
                    await stack.run(_stop_gateway(stack))  # ... and so does the first gateway
                    await receiver.start()  # back on the same port
                    await eventually(lambda: _count(receiver, 6), timeout=30)
                    got = [i for _, i, _ in receiver.delivered()]
                    assert sorted(set(got)) == list(range(6))  # none skipped
                    assert got == sorted(got)  # in order (a repeat at most: at least once)
                    listed = (await other.get("/v1/admin/push")).json()["push"][0]
                    assert listed["status"] == "running"
            finally:
                await stack.run(stop_second())


async def _count(receiver: Receiver, wanted: int) -> bool:
    return len({i for _, i, _ in receiver.delivered()}) >= wanted


async def _stop_gateway(stack: Stack) -> None:
    assert stack.server is not None and stack.serve_task is not None
    stack.server.should_exit = True
    await asyncio.wait_for(stack.serve_task, 20)
    stack.server = None


async def _another_gateway(stack: Stack) -> tuple[str, Callable[[], Any]]:
    port = free_port()
    app = create_app(replace(stack.settings, port=port))

    async def serve() -> tuple[uvicorn.Server, asyncio.Task[None]]:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        async with asyncio.timeout(15):
            while not server.started:
                await asyncio.sleep(0.01)
        await app.state.gateway.bridge.wait_connected(15)
        return server, task

    server, task = await stack.run(serve())

    async def stop() -> None:
        server.should_exit = True
        await asyncio.wait_for(task, 20)

    return f"http://127.0.0.1:{port}", stop


async def test_refusals(tmp_path: Path) -> None:
    settings = base_settings(push_dir=str(tmp_path / "push"))
    journal = str(tmp_path / "journal")
    with running_stack(
        settings, demo=False, journal=journal, journal_fsync="none", journal_filter="shop.>"
    ) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            url = "http://127.0.0.1:9/hook"
            kept = await http.put("/v1/admin/push/p1", json={"pattern": "pump.*", "url": url})
            assert kept.status_code == 409 and kept.json()["error"]["code"] == "not_journaled"
            bodies: list[dict[str, Any]] = [
                {"pattern": "shop.*"},
                {"pattern": "shop.*", "url": "ftp://x/"},
                {"pattern": "a.>.b", "url": url},
                {"pattern": "shop.*", "url": url, "colour": "red"},
                {"pattern": "shop.*", "url": url, "max_attempts": 0},
            ]
            for body in bodies:
                bad = await http.put("/v1/admin/push/p2", json=body)
                assert bad.status_code == 400, (body, bad.text)
            bad_name = await http.put(
                "/v1/admin/push/a%20b", json={"pattern": "shop.*", "url": url}
            )
            assert bad_name.status_code == 400
    with running_stack(base_settings(), demo=False) as plain:
        async with httpx.AsyncClient(base_url=plain.url, timeout=15.0) as http:
            none = await http.put("/v1/admin/push/p1", json={"pattern": "x.*", "url": "http://h/"})
            assert none.status_code == 409 and none.json()["error"]["code"] == "conflict"


def test_the_ledger_resumes_below_the_oldest_event_not_delivered() -> None:
    ledger = Ledger(10)
    for seq in (11, 12, 13, 14):
        ledger.take(seq)
    ledger.done(13)  # another type's, delivered first
    assert ledger.position == 10 and ledger.pending == 3
    ledger.done(11)
    assert ledger.position == 11
    ledger.done(12)
    assert ledger.position == 13
    ledger.done(14)
    assert ledger.position == 14 and ledger.pending == 0


def test_retry_delays_grow_with_jitter_up_to_the_bound() -> None:
    assert retry_delay(1, 0.5, 60, lambda low, high: high) == 0.5
    assert retry_delay(4, 0.5, 60, lambda low, high: high) == 4.0
    assert retry_delay(30, 0.5, 60, lambda low, high: low) == 30.0  # half the bound at least


def test_push_subscriptions_in_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\npush_dir = "/var/lib/busgate/push"\n[[gateway.push]]\nname = "orders"\n'
        'pattern = "shop.*"\nurl = "https://hooks.example/orders"\nsecret = "s"\n'
    )
    settings = load_settings(config_file=str(config), environ={})
    (spec,) = settings.push
    assert (spec.name, spec.pattern, spec.dead_letter) == ("orders", "shop.*", "deadletter.orders")
    config.write_text('[[gateway.push]]\nname = "x"\npattern = "a.*"\nurl = "http://h/"\nzz = 1\n')
    with pytest.raises(ConfigError, match="unknown field 'zz'"):
        load_settings(config_file=str(config), environ={})


def test_the_documented_signature() -> None:
    (example,) = examples("push")
    body = example.body
    made = signature(body["secret"], int(body["t"]), body["body"].encode())
    assert made == body["signature"]
    assert verify(body["secret"], made, body["body"].encode(), float(body["t"]) + 10)
    assert not verify(body["secret"], made, body["body"].encode(), float(body["t"]) + 301)


README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readmes_push_curl_lines_work_as_printed(tmp_path: Path) -> None:
    block = README.read_text().split("**Push subscriptions.**", 1)[1].split("```sh", 1)[1]
    lines = [line for line in block.split("```", 1)[0].splitlines() if line.startswith("curl")]
    assert len(lines) == 3
    settings = base_settings(push_dir=str(tmp_path / "push"))
    with running_stack(
        settings, demo=False, journal=str(tmp_path / "j"), journal_fsync="none"
    ) as stack:
        for line in lines:
            command, comment = line.split("#", 1)
            args = shlex.split(command.replace("localhost:8080", stack.url))
            done = subprocess.run(
                [*args, "-s", "-o", "/dev/null", "-w", "%{http_code}"],
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            assert int(done.stdout) == int(comment.split()[0]), line
