"""The OpenAPI document: it is valid, names every route, and the running app conforms to it.

Schemathesis generates requests from ``gateway/openapi/openapi.json`` and checks every answer of the
real gateway (status documented, content type, body and headers matching their schemas).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis import checks
from starlette.routing import Route, WebSocketRoute

from gateway.app import create_app
from gateway.process.settings import GatewaySettings
from gateway.routes.routes_info import OPENAPI_PATH
from tests.gateway.conftest import Stack, base_settings, running_stack

SCHEMA = schemathesis.openapi.from_path(OPENAPI_PATH)
# The SSE subscription never ends on its own, so it is tested by hand in test_events.py; the
# WebSocket is not HTTP after its upgrade (tests/gateway/websocket/test_ws.py).
CHECKED = SCHEMA.exclude(path="/v1/subscribe").exclude(path="/ws")
CHECKS = [
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # A short cap so generated "sleep" commands and timeouts stay quick.
    with running_stack(base_settings(default_timeout=0.5, max_timeout=0.5)) as running:
        yield running


def test_document_is_openapi_3_1_and_lists_every_route() -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    assert document["openapi"] == "3.1.0"
    app = create_app(GatewaySettings(web_dir=""))
    paths = {
        route.path.replace(":str", "")
        for route in app.routes
        if isinstance(route, Route | WebSocketRoute)
    }
    assert paths == set(document["paths"]) - {"/"}


def test_every_operation_documents_its_error_body() -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and "$ref" not in response:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method)


OPERATIONS: list[Any] = [result.ok() for result in CHECKED.get_all_operations()]  # type: ignore[union-attr]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
def test_running_app_conforms(stack: Stack, operation: Any) -> None:
    @hypothesis.given(case=operation.as_strategy())
    @hypothesis.settings(
        max_examples=15,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(base_url=stack.url, timeout=10)
        assert response.status_code != 500, response.text
        case.validate_response(response, checks=CHECKS)

    run()


@pytest.mark.parametrize("query", [{}, {"types": ""}, {"types": "a..b"}, {"types": "x.>.y"}])
def test_subscribe_errors_conform(stack: Stack, query: dict[str, str]) -> None:
    # The stream itself never ends, so only the refusals go through the schema checks here.
    case = SCHEMA["/v1/subscribe"]["GET"].Case(query=query)
    response = case.call(base_url=stack.url, timeout=10)
    assert response.status_code == 400
    case.validate_response(response, checks=CHECKS)
