"""Typed service APIs through the real gateway: ``POST /v1/{group}/{cmd}`` checked against the
schemas a live service declares, and those commands in the live ``/openapi.json``."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis import checks

from bus.asyncio.client import Client
from bus.asyncio.service import Request, Service
from bus.discovery.services import HEARTBEAT_TYPE
from bus.frame.jsonmap import from_json
from bus.message.message import Message
from tests.docexamples import examples
from tests.gateway.conftest import Stack, base_settings, eventually, running_stack


class Quote(TypedDict):
    """What to price."""

    sku: str
    qty: int
    note: NotRequired[str]


class Priced(TypedDict):
    """The price."""

    total: float


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack(base_settings(default_timeout=2.0, max_timeout=2.0)) as running:
        client: Client = running.call(running.bus_client())
        shop = Service(client, "shop", heartbeat_interval=0.5)

        @shop.command("quote", args=Quote)
        async def quote(req: Request) -> Priced:
            """Price a quantity of one article."""
            return {"total": req["qty"] * 2.5}

        @shop.command("ping")
        async def ping(req: Request) -> dict[str, Any]:
            return {"pong": True}

        running.shop = shop  # type: ignore[attr-defined]
        try:
            running.call(shop.start())
            running.call(eventually(lambda: _listed(running, "shop", "quote")))
            # the stack's demo too: the live document's tests read both (alone, they ran
            # before the demo's first heartbeat reached the directory)
            running.call(eventually(lambda: _listed(running, "demo", "time")))
            yield running
        finally:
            running.call(shop.stop())
            running.call(client.close())


async def _listed(stack: Stack, group: str, cmd: str) -> bool:
    directory = stack.gateway.bridge.directory if stack.gateway else None
    return directory is not None and directory.command_schema(group, cmd) is not None


def _handled(stack: Stack) -> int:
    return int(stack.shop.handled + stack.shop.failed)  # type: ignore[attr-defined]


def test_a_command_is_its_own_route_and_the_body_is_its_arguments(stack: Stack) -> None:
    response = httpx.post(f"{stack.url}/v1/shop/quote", json={"sku": "A-1", "qty": 4})
    assert response.status_code == 200, response.text
    assert response.json()["payload"] == {"total": 10.0}
    assert response.json()["header"]["TYP"] == "ACK" and response.headers["x-busgate-mid"]
    # No body is no arguments; a command without schemas takes any object.
    assert httpx.post(f"{stack.url}/v1/shop/ping").json()["payload"] == {"pong": True}
    # Same as the generic route with CMD in the body.
    generic = httpx.post(
        f"{stack.url}/v1/request/shop", json={"CMD": "quote", "sku": "A", "qty": 2}
    )
    assert generic.json()["payload"] == {"total": 5.0}


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        ({"sku": "A-1", "qty": "4"}, "qty", "is not of type"),
        ({"sku": "A-1"}, "qty", "required"),
        ({"sku": "A-1", "qty": 1, "colour": "red"}, "", "colour"),
        ({"sku": 7, "qty": 1}, "sku", "is not of type"),
    ],
)
def test_arguments_that_do_not_match_are_a_400_naming_the_field_and_never_reach_the_bus(
    stack: Stack, args: dict[str, Any], field: str, words: str
) -> None:
    before = _handled(stack)
    response = httpx.post(f"{stack.url}/v1/shop/quote", json=args)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_request" and error["field"] == field
    assert words in error["message"]
    # The service did not see it: the next valid call is the next one it handles.
    assert httpx.post(f"{stack.url}/v1/shop/quote", json={"sku": "x", "qty": 1}).status_code == 200
    assert _handled(stack) == before + 1


def test_a_bus_client_sending_bad_arguments_hears_a_nak_400_from_the_service(stack: Stack) -> None:
    # Past the gateway too: the service checks what it declared (the generic route sends as is).
    response = httpx.post(f"{stack.url}/v1/request/shop", json={"CMD": "quote", "sku": "A"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "nak"
    assert "'qty'" in response.json()["error"]["message"]


def test_an_undeclared_command_is_a_404_listing_the_commands(stack: Stack) -> None:
    response = httpx.post(f"{stack.url}/v1/shop/refund", json={})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "ping, quote" in response.json()["error"]["message"]


def test_a_cmd_in_the_body_must_be_the_urls(stack: Stack) -> None:
    response = httpx.post(f"{stack.url}/v1/shop/quote", json={"CMD": "ping", "sku": "a", "qty": 1})
    assert response.status_code == 400 and "leave CMD out" in response.json()["error"]["message"]
    same = httpx.post(f"{stack.url}/v1/shop/quote", json={"CMD": "quote", "sku": "a", "qty": 1})
    assert same.status_code == 200


def test_a_group_nobody_serves_is_503_and_the_gateways_own_routes_are_untouched(
    stack: Stack,
) -> None:
    assert httpx.post(f"{stack.url}/v1/nobody/here", json={}).status_code == 503
    # POST to a GET route of the gateway is still its 405, not a request to group "admin".
    assert httpx.post(f"{stack.url}/v1/admin/status").status_code == 405
    assert httpx.post(f"{stack.url}/v1/services/x").status_code == 404


def test_services_list_the_schemas(stack: Stack) -> None:
    services = httpx.get(f"{stack.url}/v1/services").json()["services"]
    shop = next(s for s in services if s["group"] == "shop")
    quote = shop["schemas"]["quote"]
    assert quote["args"]["required"] == ["qty", "sku"]
    assert quote["answer"]["properties"] == {"total": {"type": "number"}}
    assert quote["summary"] == "Price a quantity of one article."


def test_the_live_openapi_document_has_every_running_command_with_its_schemas(
    stack: Stack,
) -> None:
    document = httpx.get(f"{stack.url}/openapi.json").json()
    quote = document["paths"]["/v1/shop/quote"]["post"]
    assert quote["summary"] == "Price a quantity of one article."
    assert quote["requestBody"]["content"]["application/json"]["schema"]["required"] == [
        "qty",
        "sku",
    ]
    answer = quote["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["properties"]["payload"]["required"] == ["total"]
    assert "/v1/demo/time" in document["paths"] and "/v1/shop/ping" in document["paths"]


def test_the_live_commands_conform_to_their_own_document(stack: Stack) -> None:
    # Schemathesis calls every live command with generated arguments: valid ones must be
    # answered as their answer schema says, invalid ones with a documented error.
    raw = httpx.get(f"{stack.url}/openapi.json").json()
    live = {path: raw["paths"][path] for path in ("/v1/shop/quote", "/v1/demo/time")}
    for operation in live.values():
        del operation["post"]["parameters"]  # generated timeouts of 1e-300 s are other tests'
    raw["paths"] = live
    schema = schemathesis.openapi.from_dict(raw)
    for result in schema.get_all_operations():
        operation = result.ok()

        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=20,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
        def run(case: Any) -> None:
            response = case.call(base_url=stack.url, timeout=10)
            assert response.status_code in (200, 400), response.text
            case.validate_response(
                response,
                checks=[
                    checks.status_code_conformance,
                    checks.content_type_conformance,
                    checks.response_schema_conformance,
                ],
            )

        run()


def test_the_openapi_document_stays_valid_json(stack: Stack) -> None:
    assert json.loads(httpx.get(f"{stack.url}/openapi.json").content)["openapi"] == "3.1.0"


def test_the_documented_bad_argument_example(stack: Stack) -> None:
    (example,) = examples("typed")
    method, path, body = example.body["request"].split(" ", 2)
    response = httpx.request(method, f"{stack.url}{path}", content=body)
    assert response.status_code == int(example.body["status"])
    assert response.json() == json.loads(example.body["body"])


def test_a_service_in_another_language_declares_schemas_in_its_json_heartbeat(
    stack: Stack,
) -> None:
    # What a JSON-speaking service sends (PROTOCOL.md 5.13): Schemas as an object in its
    # heartbeat's JSON payload; it answers requests by hand here, as such a service would.
    heartbeat = {
        "Event": "Heartbeat", "InstanceId": "node-1", "GroupName": "adder", "Status": "Running",
        "IntervalMS": 60000, "Commands": ["add"], "Host": "node:1",
        "Schemas": {"add": {"summary": "Add two numbers.", "args": {
            "type": "object", "required": ["a", "b"],
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
    }  # fmt: skip

    async def serve() -> tuple[Client, Any]:
        client = await stack.bus_client()
        consumer = await client.consume("adder")
        beat = Message.event(HEARTBEAT_TYPE, from_json(json.dumps(heartbeat)))
        beat.frame["TYP"] = "HBT"
        beat.frame["ENC"] = "JSON"
        await client.send(beat)

        async def answer() -> None:
            async for request in consumer:
                args = request.payload_data()
                await client.send(request.ack({"sum": args["a"] + args["b"]}))

        return client, asyncio.ensure_future(answer())

    client, task = stack.call(serve())
    try:
        stack.call(eventually(lambda: _listed(stack, "adder", "add")))
        bad = httpx.post(f"{stack.url}/v1/adder/add", json={"a": 1})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "b"
        good = httpx.post(f"{stack.url}/v1/adder/add", json={"a": 1, "b": 2.5})
        assert good.status_code == 200 and good.json()["payload"] == {"sum": 3.5}
        document = httpx.get(f"{stack.url}/openapi.json").json()
        assert document["paths"]["/v1/adder/add"]["post"]["summary"] == "Add two numbers."
    finally:
        task.get_loop().call_soon_threadsafe(task.cancel)
        stack.call(client.close())


README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readmes_typed_curl_lines_work_as_printed(stack: Stack) -> None:
    block = README.read_text().split("**Typed routes.**", 1)[1].split("```sh", 1)[1]
    lines = [line for line in block.split("```", 1)[0].splitlines() if line.startswith("curl")]
    assert len(lines) == 3
    for line in lines:
        command, comment = line.split("#", 1)
        wanted = int(comment.split()[0].rstrip(":,"))
        args = shlex.split(command.replace("localhost:8080", stack.url))
        done = subprocess.run(
            [*args, "-s", "-o", "/dev/null", "-w", "%{http_code}"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert int(done.stdout) == wanted, line
