"""Authentication and permissions over HTTP: API keys, JWTs, groups, types, rate limits."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from gateway.access.auth import sign_jwt
from gateway.process.settings import ApiKey
from tests.gateway.conftest import Stack, base_settings, eventually, running_stack

SECRET = "test-jwt-secret-of-at-least-32-bytes"
KEYS = (
    ApiKey("ops", "k-ops"),
    ApiKey("ci", "k-ci", groups=("demo",), types=("ci.*",)),
    ApiKey("slow", "k-slow", rate=0.01),
    ApiKey("small", "k-small", max_body=64),
    ApiKey("elsewhere", "k-elsewhere", groups=("billing",)),
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    settings = base_settings(api_keys=KEYS, jwt_secret=SECRET, rate_burst=2, max_body=4096)
    with running_stack(settings) as running:
        yield running


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


ECHO = {"CMD": "echo", "x": 1}


async def test_without_credentials_is_401(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json=ECHO)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert (await http.get("/v1/services")).status_code == 401


async def test_unknown_key_is_401(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json=ECHO, headers={"X-API-Key": "guess"})
    assert response.status_code == 401


async def test_api_key_header_and_bearer(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json=ECHO, headers={"X-API-Key": "k-ops"})
    assert response.status_code == 200
    response = await http.post(
        "/v1/request/demo", json=ECHO, headers={"Authorization": "Bearer k-ops"}
    )
    assert response.status_code == 200


async def test_key_limited_to_groups_and_types(http: httpx.AsyncClient) -> None:
    ci = {"X-API-Key": "k-ci"}
    assert (await http.post("/v1/request/demo", json=ECHO, headers=ci)).status_code == 200
    response = await http.post("/v1/request/billing", json=ECHO, headers=ci)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert (await http.post("/v1/publish/ci.build", json={}, headers=ci)).status_code == 202
    assert (await http.post("/v1/publish/sensor.t", json={}, headers=ci)).status_code == 403
    response = await http.get("/v1/subscribe", params={"types": "sensor.*"}, headers=ci)
    assert response.status_code == 403


async def test_jwt_bearer_with_claims(http: httpx.AsyncClient) -> None:
    token = sign_jwt({"sub": "ana", "groups": ["demo"], "exp": time.time() + 60}, SECRET)
    auth = {"Authorization": f"Bearer {token}"}
    assert (await http.post("/v1/request/demo", json=ECHO, headers=auth)).status_code == 200
    assert (await http.post("/v1/request/other", json=ECHO, headers=auth)).status_code == 403


async def test_expired_or_forged_jwt_is_401(http: httpx.AsyncClient) -> None:
    for token in (
        sign_jwt({"sub": "ana", "exp": time.time() - 3600}, SECRET),
        sign_jwt({"sub": "ana"}, "wrong-secret-also-of-at-least-32-bytes"),
    ):
        auth = {"Authorization": f"Bearer {token}"}
        response = await http.post("/v1/request/demo", json=ECHO, headers=auth)
        assert response.status_code == 401


async def test_key_in_query_for_event_source(http: httpx.AsyncClient) -> None:
    async with http.stream(
        "GET", "/v1/subscribe", params={"types": "ci.x", "key": "k-ci"}
    ) as response:
        assert response.status_code == 200


async def test_rate_limit_is_429_with_retry_after(http: httpx.AsyncClient) -> None:
    slow = {"X-API-Key": "k-slow"}
    statuses = [
        (await http.post("/v1/request/demo", json=ECHO, headers=slow)).status_code for _ in range(3)
    ]
    assert statuses == [200, 200, 429]
    response = await http.post("/v1/request/demo", json=ECHO, headers=slow)
    assert response.json()["error"]["code"] == "rate_limited"
    assert int(response.headers["Retry-After"]) >= 1
    # other keys keep their own bucket
    ops = {"X-API-Key": "k-ops"}
    assert (await http.post("/v1/request/demo", json=ECHO, headers=ops)).status_code == 200


async def test_body_limit_is_413(http: httpx.AsyncClient) -> None:
    body = {"CMD": "echo", "x": "a" * 5000}
    response = await http.post("/v1/request/demo", json=body, headers={"X-API-Key": "k-ops"})
    assert response.status_code == 413


async def test_public_endpoints_need_no_key(http: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
        assert (await http.get(path)).status_code == 200, path


async def test_the_api_document_lists_the_services_only_to_whom_may_call_them(
    http: httpx.AsyncClient,
) -> None:
    # Issue 30 item 10: /openapi.json was public with auth on and listed every group's commands
    # and schemas while /v1/services was 401, and its security included {} (no credentials).
    ops = {"X-API-Key": "k-ops"}

    async def listed() -> bool:  # once the demo service's heartbeat has reached the gateway
        answer = await http.get("/openapi.json", headers=ops)
        return answer.status_code == 200 and "/v1/demo/echo" in answer.json()["paths"]

    await eventually(listed, timeout=30.0, every=0.5)
    public = await http.get("/openapi.json")
    assert public.status_code == 200  # the gateway's own routes stay documented (and /docs works)
    document = public.json()
    assert "/v1/request/{group}" in document["paths"]
    assert not [path for path in document["paths"] if path.startswith("/v1/demo/")]
    assert {} not in document["security"] and document["security"]
    by_query = (await http.get("/openapi.json", params={"key": "k-ci"})).json()["paths"]
    assert "/v1/demo/echo" in by_query  # k-ci may reach demo
    other = (await http.get("/openapi.json", headers={"X-API-Key": "k-elsewhere"})).json()
    assert not [path for path in other["paths"] if path.startswith("/v1/demo/")]
    wrong = await http.get("/openapi.json", headers={"X-API-Key": "guess"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"


async def test_a_keys_own_body_limit_applies_to_it_only(http: httpx.AsyncClient) -> None:
    body = {"CMD": "echo", "x": "a" * 100}  # under the gateway's 4096, over the key's 64
    small = await http.post("/v1/request/demo", json=body, headers={"X-API-Key": "k-small"})
    assert small.status_code == 413 and small.json()["error"]["code"] == "too_large"
    ops = await http.post("/v1/request/demo", json=body, headers={"X-API-Key": "k-ops"})
    assert ops.status_code == 200 and ops.json()["payload"]["x"] == "a" * 100


async def test_a_chunked_body_over_the_limit_is_413(http: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        yield b'{"CMD":"echo","x":"'
        for _ in range(10):
            yield b"a" * 1000
        yield b'"}'

    response = await http.post("/v1/request/demo", content=chunks(), headers={"X-API-Key": "k-ops"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 413


def test_rate_limit_by_address_when_auth_is_off() -> None:
    with running_stack(base_settings(rate_limit=0.01, rate_burst=2)) as stack:
        statuses = [
            httpx.post(f"{stack.url}/v1/request/demo", json=ECHO, timeout=15.0).status_code
            for _ in range(3)
        ]
        assert statuses == [200, 200, 429]


def test_wrong_secrets_are_throttled_per_address_with_documented_defaults() -> None:
    # Issue 12: 60 wrong API keys got 60 x 401 and never a 429. Defaults: 10 at once, then
    # one more every 6 s (auth_fail_limit=10, auth_fail_window=60).
    with running_stack(base_settings(api_keys=KEYS)) as stack:
        url = f"{stack.url}/v1/request/demo"
        with httpx.Client(timeout=15.0) as http:
            for _ in range(30):  # many requests with the right key or none: never throttled
                assert http.post(url, json=ECHO, headers={"X-API-Key": "k-ops"}).status_code == 200
                assert http.post(url, json=ECHO).status_code == 401
            answers = [
                http.post(url, json=ECHO, headers={"X-API-Key": f"guess-{n}"}) for n in range(60)
            ]
            statuses = [answer.status_code for answer in answers]
            assert statuses == [401] * 10 + [429] * 50
            last = answers[-1]
            assert last.json()["error"]["code"] == "rate_limited"
            assert "wrong credentials" in last.json()["error"]["message"]
            assert 1 <= int(last.headers["Retry-After"]) <= 6
            # The address is blocked, whatever it sends, until its allowance refills.
            assert http.post(url, json=ECHO, headers={"X-API-Key": "k-ops"}).status_code == 429
            refused = http.get(f"{stack.url}/metrics").text
        assert 'busgate_gateway_auth_refused_total{reason="invalid"} 10.0' in refused
        assert 'busgate_gateway_auth_refused_total{reason="throttled"} 51.0' in refused
        # Another address is not affected (the whole 127.0.0.0/8 is loopback).
        other = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=other, timeout=15.0) as http:
            assert http.post(url, json=ECHO, headers={"X-API-Key": "k-ops"}).status_code == 200


async def test_a_never_expiring_or_junk_signed_jwt_is_401(http: httpx.AsyncClient) -> None:
    # Issue 12: `exp: NaN` (never expires) and junk after the signature were accepted.
    good = sign_jwt({"sub": "ana", "exp": time.time() + 60}, SECRET)
    auth = {"Authorization": f"Bearer {good}"}
    assert (await http.post("/v1/request/demo", json=ECHO, headers=auth)).status_code == 200
    header, payload = (
        base64.urlsafe_b64encode(part.encode()).rstrip(b"=").decode()
        for part in ('{"alg":"HS256","typ":"JWT"}', '{"sub":"ana","exp":NaN}')
    )
    mac = hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    never = f"{header}.{payload}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    for token in (never, good + "!!!!", good + "=", good + "AAAA"):
        auth = {"Authorization": f"Bearer {token}"}
        response = await http.post("/v1/request/demo", json=ECHO, headers=auth)
        assert response.status_code == 401, token[-8:]
