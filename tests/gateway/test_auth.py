"""Authentication and permissions: API keys, HS256 JWTs, patterns, token buckets."""

from __future__ import annotations

import base64
import json

import pytest
from starlette.types import Message, Receive, Scope, Send

from bus.errors import AuthError, LimitError, RefusedError
from gateway.auth import (
    ANONYMOUS,
    Authenticator,
    CredentialsFromQuery,
    RateLimiter,
    allowed,
    sign_jwt,
    verify_jwt,
)
from gateway.settings import ApiKey, GatewaySettings

NOW = 1_800_000_000.0
SECRET = "jwt-secret"


def authenticator(**changes: object) -> Authenticator:
    base: dict[str, object] = {
        "api_keys": (ApiKey("ops", "k-ops"), ApiKey("ci", "k-ci", groups=("demo",), types=())),
        "jwt_secret": SECRET,
    }
    base.update(changes)
    return Authenticator(GatewaySettings(**base))  # type: ignore[arg-type]


def test_auth_off_gives_the_anonymous_principal() -> None:
    auth = Authenticator(GatewaySettings())
    assert auth.authenticate({}, {}, NOW) is ANONYMOUS


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"x-api-key": "k-ops"}, {}),
        ({"authorization": "Bearer k-ops"}, {}),
        ({"authorization": "bearer  k-ops "}, {}),
        ({}, {"key": "k-ops"}),
        ({}, {"access_token": "k-ops"}),
    ],
)
def test_api_key_in_every_accepted_place(headers: dict[str, str], query: dict[str, str]) -> None:
    assert authenticator().authenticate(headers, query, NOW).name == "ops"


def test_missing_and_unknown_keys_are_refused() -> None:
    auth = authenticator()
    with pytest.raises(AuthError, match="credentials required"):
        auth.authenticate({}, {}, NOW)
    with pytest.raises(AuthError, match="unknown API key"):
        auth.authenticate({"x-api-key": "nope"}, {}, NOW)


def test_key_permissions_by_group_and_type() -> None:
    ci = authenticator().authenticate({"x-api-key": "k-ci"}, {}, NOW)
    ci.check_group("demo")
    with pytest.raises(RefusedError, match="group 'billing'"):
        ci.check_group("billing")
    with pytest.raises(RefusedError, match="event type"):
        ci.check_type("sensor.temp")


def test_jwt_gives_subject_and_claimed_patterns() -> None:
    token = sign_jwt(
        {"sub": "ana", "groups": ["demo*"], "types": ["sensor.*"], "exp": NOW + 60}, SECRET
    )
    who = authenticator().authenticate({"authorization": f"Bearer {token}"}, {}, NOW)
    assert who.name == "jwt:ana"
    who.check_group("demo2")
    who.check_type("sensor.temp")
    with pytest.raises(RefusedError):
        who.check_group("billing")


def test_jwt_without_claims_may_use_everything() -> None:
    who = authenticator().authenticate({"x-api-key": sign_jwt({"sub": "b"}, SECRET)}, {}, NOW)
    assert allowed(who.groups, "anything") and allowed(who.types, "a.b")


def _forge(header: dict[str, object], claims: dict[str, object]) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}.c2ln"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (sign_jwt({"sub": "a"}, "other-secret"), "signature"),
        (sign_jwt({"sub": "a", "exp": NOW - 3600}, SECRET), "expired"),
        (sign_jwt({"sub": "a", "nbf": NOW + 3600}, SECRET), "not valid yet"),
        (_forge({"alg": "none"}, {"sub": "a"}), "algorithm"),
        ("a.b.c", "malformed"),
        (sign_jwt({"groups": "demo"}, SECRET), "list of strings"),
    ],
)
def test_bad_tokens_are_refused(token: str, reason: str) -> None:
    with pytest.raises(AuthError, match=reason):
        authenticator().authenticate({"authorization": f"Bearer {token}"}, {}, NOW)


def test_jwt_audience_and_issuer() -> None:
    good = sign_jwt({"aud": ["x", "gw"], "iss": "me"}, SECRET)
    assert verify_jwt(good, SECRET, NOW, audience="gw", issuer="me")["iss"] == "me"
    with pytest.raises(AuthError, match="audience"):
        verify_jwt(good, SECRET, NOW, audience="other")
    with pytest.raises(AuthError, match="issuer"):
        verify_jwt(good, SECRET, NOW, issuer="you")


def test_expiry_leeway_is_30_seconds() -> None:
    token = sign_jwt({"exp": NOW - 10}, SECRET)
    verify_jwt(token, SECRET, NOW)
    with pytest.raises(AuthError):
        verify_jwt(token, SECRET, NOW + 30)


def test_rate_limiter_allows_a_burst_then_refills() -> None:
    limiter = RateLimiter(rate=2.0, burst=3)
    for _ in range(3):
        limiter.check("ops", 100.0)
    with pytest.raises(LimitError) as caught:
        limiter.check("ops", 100.0)
    assert caught.value.limit == "rate" and caught.value.value == 1
    limiter.check("ci", 100.0)  # buckets are per key
    limiter.check("ops", 100.5)  # half a second at 2/s is one token


def test_rate_limiter_per_key_override_and_unlimited() -> None:
    limiter = RateLimiter(rate=0.0, burst=1)
    for _ in range(100):
        limiter.check("any", 0.0)
    limiter.check("slow", 0.0, rate=1.0)
    with pytest.raises(LimitError):
        limiter.check("slow", 0.0, rate=1.0)


def test_rate_limiter_forgets_least_recent_keys_beyond_its_bound() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, max_keys=2)
    limiter.check("a", 0.0)
    limiter.check("b", 0.0)
    limiter.check("c", 0.0)
    limiter.check("a", 0.0)  # "a" was forgotten, so it has a full bucket again


async def test_query_credential_moves_to_a_header_and_out_of_the_url() -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        return None

    scope: Scope = {
        "type": "http",
        "query_string": b"types=a.b&key=k%2Bops&x=1",
        "headers": [(b"host", b"gw")],
    }
    await CredentialsFromQuery(app)(scope, receive, send)
    assert seen[0]["query_string"] == b"types=a.b&x=1"
    assert (b"x-api-key", b"k+ops") in seen[0]["headers"]
    # a header already present wins, and the key still leaves the URL
    scope = {
        "type": "http",
        "query_string": b"access_token=t",
        "headers": [(b"authorization", b"Bearer other")],
    }
    await CredentialsFromQuery(app)(scope, receive, send)
    assert seen[1]["query_string"] == b""
    assert seen[1]["headers"] == [(b"authorization", b"Bearer other")]
