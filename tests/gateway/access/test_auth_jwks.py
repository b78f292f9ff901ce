"""RS256/ES256 bearer tokens over HTTP, checked against a JWKS served by a local HTTP server.

A real identity provider's shape: a ``jwks_uri`` serving public keys by ``kid``, keys that
rotate, and a gateway (real broker, demo service, uvicorn) started with ``jwt_jwks`` pointing
at it, or at a file.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bus.errors import ConfigError
from gateway.access.auth import sign_jwt
from gateway.access.jwks import read_jwks
from tests.gateway.conftest import Stack, base_settings, eventually, running_stack
from tests.gateway.idp import AUDIENCE, ISSUER, JwksServer, SigningKey, claims

ECHO = {"CMD": "echo", "x": 1}
RSA_1 = SigningKey.rsa("rsa-1")
EC_1 = SigningKey.ec("ec-1")


def jwt_settings(jwks: str, **changes: object) -> dict[str, object]:
    # auth_fail_limit=0: these tests send many refused tokens from one address on purpose
    # (the throttle has its own tests in test_auth_http.py).
    base = {"jwt_jwks": jwks, "jwt_audience": AUDIENCE, "jwt_issuer": ISSUER, "auth_fail_limit": 0}
    return {**base, **changes}


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    server = JwksServer().start()
    server.publish(RSA_1, EC_1)
    try:
        yield server
    finally:
        server.stop()


def status(stack: Stack, token: str, group: str = "demo") -> int:
    response = httpx.post(
        f"{stack.url}/v1/request/{group}",
        json=ECHO,
        headers={"Authorization": f"Bearer {token}"},
        timeout=15.0,
    )
    return response.status_code


def test_rs256_and_es256_tokens_from_the_jwks(idp: JwksServer) -> None:
    with running_stack(base_settings(**jwt_settings(idp.url))) as stack:
        assert status(stack, RSA_1.token(claims())) == 200
        assert status(stack, EC_1.token(claims())) == 200
        limited = RSA_1.token(claims(groups=["other"]))
        assert status(stack, limited) == 403
        # the token's key in the query, as EventSource sends it
        with httpx.stream(
            "GET",
            f"{stack.url}/v1/subscribe",
            params={"types": "a.b", "access_token": EC_1.token(claims())},
            timeout=15.0,
        ) as response:
            assert response.status_code == 200
        refused = {
            "expired": RSA_1.token(claims(exp=1)),
            "wrong audience": RSA_1.token(claims(aud="other")),
            "wrong issuer": EC_1.token(claims(iss="https://evil.test")),
            "exp NaN": RSA_1.raw_token(
                f'{{"sub":"ana","aud":"{AUDIENCE}","iss":"{ISSUER}","exp":NaN}}'
            ),
            "unknown signer": SigningKey.rsa("rsa-1").token(claims()),
            "junk appended": EC_1.token(claims()) + "AAAA",
            "HS256 without a secret": sign_jwt(claims(), "a-secret-this-gateway-never-had!"),
        }
        for why, token in refused.items():
            response = httpx.post(
                f"{stack.url}/v1/request/demo",
                json=ECHO,
                headers={"Authorization": f"Bearer {token}"},
                timeout=15.0,
            )
            assert response.status_code == 401, why
            assert response.json()["error"]["code"] == "unauthorized", why


def test_a_rotated_key_works_at_its_first_use_and_a_removed_one_stops(
    idp: JwksServer,
) -> None:
    settings = base_settings(**jwt_settings(idp.url, jwt_jwks_retry=0.0, jwt_jwks_ttl=1.0))
    with running_stack(settings) as stack:
        assert status(stack, RSA_1.token(claims())) == 200
        rsa_2 = SigningKey.rsa("rsa-2")
        idp.publish(rsa_2, EC_1)  # the provider rotates: rsa-1 out, rsa-2 in
        assert status(stack, rsa_2.token(claims())) == 200  # fetched for the unknown kid

        async def rsa_1_refused() -> bool:
            return await asyncio.to_thread(status, stack, RSA_1.token(claims())) == 401

        # The document is fetched again once older than its ttl (1 s here).
        asyncio.run(eventually(rsa_1_refused, timeout=20.0, every=0.2))


def test_made_up_kids_cost_one_fetch_per_retry_interval(idp: JwksServer) -> None:
    settings = base_settings(**jwt_settings(idp.url, jwt_jwks_retry=3600.0))
    with running_stack(settings) as stack:
        assert status(stack, RSA_1.token(claims())) == 200
        fetched = idp.fetches
        assert fetched == 1  # at start
        for n in range(30):
            assert status(stack, SigningKey.ec(f"made-up-{n}").token(claims())) == 401
        assert idp.fetches == fetched  # the last fetch was less than jwt_jwks_retry ago
        assert status(stack, EC_1.token(claims())) == 200


def test_a_provider_down_at_start_is_fetched_when_it_is_back(idp: JwksServer) -> None:
    idp.status = 503
    settings = base_settings(**jwt_settings(idp.url, jwt_jwks_retry=0.0))
    with running_stack(settings) as stack:
        token = RSA_1.token(claims())
        assert status(stack, token) == 401
        idp.status = 200
        assert status(stack, token) == 200


def test_an_error_status_leaves_no_socket_open(idp: JwksServer) -> None:
    """The body of an error answer held its socket until the collector found it: a
    ResourceWarning, raised then in whatever ran (here: the collection below)."""
    idp.status = 503
    with pytest.raises(ConfigError, match="503"):
        asyncio.run(read_jwks(idp.url))
    gc.collect()


def test_a_jwks_file_and_its_rotation(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [RSA_1.jwk()]}))
    settings = base_settings(**jwt_settings(str(path), jwt_jwks_retry=0.0))
    with running_stack(settings) as stack:
        assert status(stack, RSA_1.token(claims())) == 200
        assert status(stack, EC_1.token(claims())) == 401
        path.write_text(json.dumps({"keys": [RSA_1.jwk(), EC_1.jwk()]}))
        assert status(stack, EC_1.token(claims())) == 200


def test_jwt_flags_reach_the_settings(tmp_path: Path) -> None:
    import argparse

    from gateway.process.cli import register, settings_from_args

    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [RSA_1.jwk()]}))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["gateway", "--jwt-jwks", str(path), "--jwt-audience", "gw", "--jwt-issuer", "me",
         "--auth-fail-limit", "5", "--auth-fail-window", "30"]
    )  # fmt: skip
    settings = settings_from_args(args)
    assert (settings.jwt_jwks, settings.jwt_audience, settings.jwt_issuer) == (
        str(path),
        "gw",
        "me",
    )
    assert (settings.auth_fail_limit, settings.auth_fail_window) == (5, 30.0)
    assert settings.auth_enabled
