"""Authentication and permissions: API keys, HS256 JWTs (PyJWT), patterns, buckets, throttling."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest
from starlette.types import Message, Receive, Scope, Send

from bus.errors import AuthError, ConfigError, LimitError, RefusedError
from gateway.access.auth import (
    ANONYMOUS,
    Authenticator,
    CredentialsFromQuery,
    FailureThrottle,
    RateLimiter,
    allowed,
    sign_jwt,
)
from gateway.access.tokens import MAX_TOKEN
from gateway.process.settings import ApiKey, GatewaySettings

SECRET = "jwt-secret-of-the-tests-32-bytes!"


def authenticator(**changes: object) -> Authenticator:
    base: dict[str, object] = {
        "api_keys": (ApiKey("ops", "k-ops"), ApiKey("ci", "k-ci", groups=("demo",), types=())),
        "jwt_secret": SECRET,
    }
    base.update(changes)
    return Authenticator(GatewaySettings(**base))  # type: ignore[arg-type]


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_hs256(header: str, payload: str, secret: str = SECRET) -> str:
    """A token signed over exactly this header and payload JSON text (NaN, strings, ...)."""
    signing_input = f"{b64(header.encode())}.{b64(payload.encode())}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


HS256 = '{"alg":"HS256","typ":"JWT"}'


def test_auth_off_gives_the_anonymous_principal() -> None:
    auth = Authenticator(GatewaySettings())
    assert auth.authenticate({}, {}) is ANONYMOUS


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
    assert authenticator().authenticate(headers, query).name == "ops"


def test_missing_and_unknown_keys_are_refused() -> None:
    auth = authenticator()
    with pytest.raises(AuthError, match="credentials required"):
        auth.authenticate({}, {})
    with pytest.raises(AuthError, match="unknown API key"):
        auth.authenticate({"x-api-key": "nope"}, {})
    assert auth.refused == {"missing": 1, "invalid": 1, "throttled": 0}


def test_key_permissions_by_group_and_type() -> None:
    ci = authenticator().authenticate({"x-api-key": "k-ci"}, {})
    ci.check_group("demo")
    with pytest.raises(RefusedError, match="group 'billing'"):
        ci.check_group("billing")
    with pytest.raises(RefusedError, match="event type"):
        ci.check_type("sensor.temp")


def test_jwt_gives_subject_and_claimed_patterns() -> None:
    claims = {"sub": "ana", "groups": ["demo*"], "types": ["sensor.*"], "exp": time.time() + 60}
    who = authenticator().authenticate(bearer(sign_jwt(claims, SECRET)), {})
    assert who.name == "jwt:ana"
    who.check_group("demo2")
    who.check_type("sensor.temp")
    with pytest.raises(RefusedError):
        who.check_group("billing")


def test_jwt_without_claims_may_use_everything() -> None:
    who = authenticator().authenticate({"x-api-key": sign_jwt({"sub": "b"}, SECRET)}, {})
    assert allowed(who.groups, "anything") and allowed(who.types, "a.b")


def test_a_short_jwt_secret_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        GatewaySettings(jwt_secret="short")


GOOD = sign_jwt({"sub": "a", "exp": 4_000_000_000}, SECRET)
JUNK = ["!", "!!!!", "=", "==", "A", "AAAA", "%3D", " x", ".", ".x", "é", "\x00"]


@pytest.mark.parametrize("junk", JUNK)
def test_junk_appended_to_the_signature_is_refused(junk: str) -> None:
    auth = authenticator()
    assert auth.authenticate(bearer(GOOD), {}).name == "jwt:a"
    with pytest.raises(AuthError):
        auth.authenticate({"x-api-key": GOOD + junk}, {})


def _forge(header: dict[str, object], claims: dict[str, object], signature: str = "c2ln") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}.{signature}"


def _bad_tokens() -> list[tuple[str, str, str]]:
    now = time.time()
    hs512 = raw_hs256('{"alg":"HS512"}', '{"sub":"a"}')
    return [
        (
            "other secret",
            sign_jwt({"sub": "a"}, "another-secret-of-at-least-32-bytes"),
            "signature",
        ),
        ("expired", sign_jwt({"sub": "a", "exp": now - 3600}, SECRET), "expired"),
        ("expired past leeway", sign_jwt({"sub": "a", "exp": now - 60}, SECRET), "expired"),
        ("not yet valid", sign_jwt({"sub": "a", "nbf": now + 3600}, SECRET), "not valid yet"),
        ("issued in the future", sign_jwt({"sub": "a", "iat": now + 3600}, SECRET), "not valid"),
        ("exp NaN", raw_hs256(HS256, '{"sub":"a","exp":NaN}'), "exp"),
        ("exp Infinity", raw_hs256(HS256, '{"sub":"a","exp":Infinity}'), "exp"),
        ("exp -Infinity", raw_hs256(HS256, '{"sub":"a","exp":-Infinity}'), "exp"),
        ("exp as text", raw_hs256(HS256, '{"sub":"a","exp":"99999999999"}'), "exp"),
        ("exp true", raw_hs256(HS256, '{"sub":"a","exp":true}'), "exp"),
        ("exp 1e400", raw_hs256(HS256, '{"sub":"a","exp":1e400}'), "exp"),
        ("nbf NaN", raw_hs256(HS256, '{"sub":"a","nbf":NaN}'), "nbf"),
        ("alg none", _forge({"alg": "none"}, {"sub": "a"}), "algorithm"),
        ("alg none, no signature", _forge({"alg": "none"}, {"sub": "a"}, ""), "malformed"),
        ("alg HS512", hs512, "algorithm"),
        ("alg RS256 without a JWKS", _forge({"alg": "RS256"}, {"sub": "a"}), "algorithm"),
        ("header not JSON", f"{b64(b'{oops')}.{b64(b'{}')}.c2ln", "malformed"),
        ("payload a list", raw_hs256(HS256, "[1,2]"), "invalid token"),
        ("payload not JSON", raw_hs256(HS256, "{oops"), "invalid token"),
        ("kid a number", raw_hs256('{"alg":"HS256","kid":7}', '{"sub":"a"}'), "Key ID"),
        ("unknown crit", raw_hs256('{"alg":"HS256","crit":["x"],"x":1}', "{}"), "critical"),
        ("three dots: not a JWT", GOOD + ".x", "unknown API key"),
        ("a.b.c", "a.b.c", "malformed"),
        ("junk before", "x" + GOOD, "malformed|signature"),
        ("too long", GOOD[:-1] + "A" * MAX_TOKEN, "longer than"),
        ("groups not a list", sign_jwt({"groups": "demo"}, SECRET), "list of strings"),
        ("sub a number", raw_hs256(HS256, '{"sub":7}'), "invalid token"),
        ("an audience we do not have", sign_jwt({"aud": "other"}, SECRET), "audience"),
    ]


BAD_TOKENS = _bad_tokens()


@pytest.mark.parametrize(("why", "token", "reason"), BAD_TOKENS, ids=[b[0] for b in BAD_TOKENS])
def test_bad_tokens_are_refused(why: str, token: str, reason: str) -> None:
    with pytest.raises(AuthError, match=reason):
        authenticator().authenticate(bearer(token), {})


def test_expiry_leeway_is_30_seconds() -> None:
    # 10 s past exp is within the leeway; 60 s past is refused (test_bad_tokens_are_refused).
    token = sign_jwt({"sub": "a", "exp": time.time() - 10}, SECRET)
    assert authenticator().authenticate(bearer(token), {}).name == "jwt:a"


def test_jwt_audience_and_issuer() -> None:
    auth = authenticator(jwt_audience="gw", jwt_issuer="me")
    good = sign_jwt({"sub": "a", "aud": ["x", "gw"], "iss": "me"}, SECRET)
    assert auth.authenticate(bearer(good), {}).name == "jwt:a"
    for claims, reason in (
        ({"aud": "other", "iss": "me"}, "audience"),
        ({"aud": "gw", "iss": "you"}, "issuer"),
        ({"iss": "me"}, "aud"),  # a required claim missing
        ({"aud": "gw"}, "iss"),
    ):
        with pytest.raises(AuthError, match=reason):
            auth.authenticate(bearer(sign_jwt(claims, SECRET)), {})


def test_without_a_secret_hs256_tokens_are_not_jwts_but_unknown_keys() -> None:
    auth = authenticator(jwt_secret=None)
    with pytest.raises(AuthError, match="unknown API key"):
        auth.authenticate(bearer(GOOD), {})


# --- throttling wrong secrets -------------------------------------------------------------------


def test_throttle_blocks_an_address_after_its_failures_then_refills() -> None:
    throttle = FailureThrottle(limit=3, window=30.0)  # one more try every 10 s
    for _ in range(3):
        throttle.check("10.0.0.1", 100.0)
        throttle.failed("10.0.0.1", 100.0)
    with pytest.raises(LimitError) as caught:
        throttle.check("10.0.0.1", 100.0)
    assert caught.value.limit == "auth_failures" and caught.value.value == 10
    throttle.check("10.0.0.2", 100.0)  # per address
    with pytest.raises(LimitError) as caught:
        throttle.check("10.0.0.1", 104.0)
    assert caught.value.value == 6
    throttle.check("10.0.0.1", 110.0)
    throttle.failed("10.0.0.1", 110.0)
    with pytest.raises(LimitError):
        throttle.check("10.0.0.1", 110.0)


def test_throttle_off_and_bounded() -> None:
    off = FailureThrottle(limit=0, window=60.0)
    for _ in range(100):
        off.failed("a", 0.0)
    off.check("a", 0.0)
    small = FailureThrottle(limit=1, window=60.0, max_addresses=2)
    for address in ("a", "b", "c"):
        small.failed(address, 0.0)
    small.check("a", 0.0)  # forgotten: the least recently used beyond 2 addresses


def test_authenticator_throttles_wrong_secrets_not_missing_or_right_ones() -> None:
    auth = authenticator(auth_fail_limit=3, auth_fail_window=30.0)
    for _ in range(50):
        assert auth.authenticate({"x-api-key": "k-ops"}, {}, address="a", now=0.0).name == "ops"
        with pytest.raises(AuthError, match="credentials required"):
            auth.authenticate({}, {}, address="a", now=0.0)
    for _ in range(3):
        with pytest.raises(AuthError):
            auth.authenticate({"x-api-key": "guess"}, {}, address="a", now=0.0)
    with pytest.raises(AuthError):  # a forged token counts too
        auth.authenticate(bearer(GOOD + "x"), {}, address="b", now=0.0)
    for headers in ({"x-api-key": "guess"}, {"x-api-key": "k-ops"}, {}):
        with pytest.raises(LimitError, match="auth_failures"):
            auth.authenticate(headers, {}, address="a", now=0.0)
    assert auth.authenticate({"x-api-key": "k-ops"}, {}, address="b", now=0.0).name == "ops"
    assert auth.authenticate({"x-api-key": "k-ops"}, {}, address="a", now=10.0).name == "ops"
    assert auth.refused == {"missing": 50, "invalid": 4, "throttled": 3}


# --- rate limits --------------------------------------------------------------------------------


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
