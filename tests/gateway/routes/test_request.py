"""POST /v1/request/{group} against the real broker and demo service: every status.

The gateway runs under its own HTTP protocol, as ``busgate gateway`` runs it: these requests
are answered from its callbacks (gateway/routes/request_direct.py); the other modules' stacks
answer the same route the ASGI way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from bus.broker.stamp import Stamper
from bus.frame.jsonmap import from_json
from bus.message.message import encode_message, read_message
from gateway.process.http_protocol import HEADER_TIMEOUT_S, protocol_class
from tests.gateway.conftest import Stack, base_settings, running_stack

pytestmark = [
    pytest.mark.transports,
    pytest.mark.stack_loops,
]  # broker and NATS, each on both loops


@pytest.fixture(scope="module")
def stack(bus_transport: str, stack_loop: str, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The module's stack, its gateway under the gateway's own HTTP protocol."""
    url = request.getfixturevalue("nats_server").url if bus_transport == "nats" else None
    http = protocol_class(HEADER_TIMEOUT_S)
    with running_stack(base_settings(), bus_url=url, loop=stack_loop, http=http) as running:
        yield running


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


async def test_echo_ack_is_200_with_header_and_payload(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json={"CMD": "echo", "x": 1, "s": "hé"})
    assert response.status_code == 200
    body = response.json()
    assert body["payload"] == {"x": 1, "s": "hé"}
    assert body["header"]["TYP"] == "ACK"
    assert body["header"]["RID"] == response.headers["X-Busgate-Mid"]
    assert body["header"]["ENC"] == "JSON"


async def test_curl_style_form_content_type_is_accepted(http: httpx.AsyncClient) -> None:
    # `curl -d '{...}' URL` sends application/x-www-form-urlencoded; the README promises it works.
    response = await http.post(
        "/v1/request/demo",
        content=b'{"CMD":"echo","x":1}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 200
    assert response.json()["payload"] == {"x": 1}


async def test_time_answers(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json={"CMD": "time"})
    assert response.status_code == 200
    assert response.json()["payload"]["zone"] == "UTC"


@pytest.mark.parametrize("rcd", [404, 409, 500, 503])
async def test_nak_status_is_its_rcd(http: httpx.AsyncClient, rcd: int) -> None:
    response = await http.post("/v1/request/demo", json={"CMD": "fail", "rcd": rcd, "msg": "no"})
    assert response.status_code == rcd
    error = response.json()["error"]
    assert error == {**error, "code": "nak", "message": "no", "rcd": rcd}
    assert error["response"]["header"]["TYP"] == "NAK"
    assert response.headers["X-Busgate-Mid"] == error["response"]["header"]["RID"]


async def test_nak_with_a_non_http_rcd_is_502(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json={"CMD": "fail", "rcd": 7})
    assert response.status_code == 502
    assert response.json()["error"]["rcd"] == 7


@pytest.mark.logs_tracebacks  # the demo's fail handler raises on purpose: it logs it
async def test_an_rcd_beyond_32_bits_is_answered_not_a_504(http: httpx.AsyncClient) -> None:
    # The demo's NAK could not be encoded: the caller waited the whole timeout for a 504.
    response = await http.post(
        "/v1/request/demo", json={"CMD": "fail", "rcd": 10_000_000_000}, params={"timeout": 30}
    )
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "nak" and "32-bit" in error["message"]


async def test_unknown_command_is_the_services_404(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json={"CMD": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "nak"


async def test_no_responders_is_503_at_once(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/nobody", json={"CMD": "echo"}, params={"timeout": 5})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_responders"


async def test_timeout_is_504(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/request/demo", json={"CMD": "sleep", "seconds": 3}, params={"timeout": 0.3}
    )
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "timeout"


async def test_timeout_header_works_and_is_capped(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/request/demo",
        json={"CMD": "sleep", "seconds": 3},
        headers={"X-Busgate-Timeout": "0.3"},
    )
    assert response.status_code == 504
    # 1000 s is capped to the server's 5 s, so a 0.2 s sleep still answers.
    response = await http.post(
        "/v1/request/demo", json={"CMD": "sleep", "seconds": 0.2}, params={"timeout": 1000}
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b'{"x": 1}', "CMD"),
        (b'{"CMD": 5}', "CMD"),
        (b'["CMD", "echo"]', "JSON object"),
        (b"", "JSON object"),
        (b'{"CMD": "echo", "big": 123456789012345678901234567890}', ""),
        (b"\xff\xfe", "UTF-8"),
        ('{"CMD": "echo", "s": "\u20ac"}'.encode(), "Latin-1"),
    ],
)
async def test_bad_bodies_are_400(http: httpx.AsyncClient, body: bytes, reason: str) -> None:
    response = await http.post("/v1/request/demo", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request" and reason in error["message"]


@pytest.mark.parametrize("timeout", ["abc", "0", "-1", "nan", "inf"])
async def test_bad_timeouts_are_400(http: httpx.AsyncClient, timeout: str) -> None:
    response = await http.post(
        "/v1/request/demo", json={"CMD": "echo"}, params={"timeout": timeout}
    )
    assert response.status_code == 400


async def test_bad_group_names_are_400(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/_INBOX.x", json={"CMD": "echo"})
    assert response.status_code == 400


async def test_body_too_large_is_413(http: httpx.AsyncClient, stack: Stack) -> None:
    big = {"CMD": "echo", "x": "a" * (stack.settings.max_body + 1)}
    response = await http.post("/v1/request/demo", json=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


async def test_unknown_path_and_method_are_json_errors(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    response = await http.get("/v1/request/demo")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


async def test_metrics_count_requests_by_group_and_outcome(http: httpx.AsyncClient) -> None:
    await http.post("/v1/request/demo", json={"CMD": "echo"})
    await http.post("/v1/request/demo", json={"CMD": "fail"})
    await http.post("/v1/request/demo", json={"no": "cmd"})
    text = (await http.get("/metrics")).text
    assert 'busgate_gateway_requests_total{group="demo",outcome="rejected"}' in text
    assert 'busgate_gateway_requests_total{group="demo",outcome="ack"}' in text
    assert 'busgate_gateway_requests_total{group="demo",outcome="nak"}' in text
    assert "busgate_gateway_bus_connected 1.0" in text
    assert 'busgate_gateway_request_duration_seconds_count{group="demo"}' in text


async def test_stats_show_the_recent_window(http: httpx.AsyncClient) -> None:
    for _ in range(3):
        await http.post("/v1/request/demo", json={"CMD": "echo"})
    stats = (await http.get("/v1/stats")).json()
    demo = stats["groups"]["demo"]
    assert demo["requests"] >= 3 and demo["outcomes"]["ack"] >= 3
    assert demo["latency_ms"]["p99"] >= demo["latency_ms"]["p50"] > 0


async def test_health_ready_openapi_docs(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    spec = (await http.get("/openapi.json")).json()
    assert spec["openapi"].startswith("3.1") and "/v1/request/{group}" in spec["paths"]
    docs = await http.get("/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text


@pytest.mark.parametrize("body", [b'{"CMD":"echo","x":1}', b'{"x":1,"CMD":"echo"}'])
def test_a_request_names_the_gateways_post_office_so_the_broker_forwards_it_as_it_came(
    stack: Stack, body: bytes
) -> None:
    # The JSON lane (CMD first) and the frame path (CMD later) alike: SRC is the post office
    # the broker would stamp (PROTOCOL.md 5.11), so it routes the bytes without splicing.
    assert stack.gateway is not None
    bridge = stack.gateway.bridge
    assert bridge.client is not None and bridge.client.info is not None
    office = bridge.client.info.name

    message = bridge.make_request("demo", body, lambda b: from_json(b.decode()))
    assert message.src == office
    raw = encode_message(message)
    read = read_message(raw)
    routed, out = Stamper(office).stamp(read, raw)
    assert routed is read and out is raw
