"""Tokens checked against a JWKS: real RSA, EC and Ed25519 keys, the key set's rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from cryptography.hazmat.primitives import serialization

from bus.errors import AuthError, ConfigError
from gateway.access.tokens import KeySet, TokenVerifier
from tests.gateway.idp import AUDIENCE, ISSUER, SigningKey, claims

RSA = SigningKey.rsa("rsa-1")
EC = SigningKey.ec("ec-1")
ED = SigningKey.ed25519("ed-1")
PS = SigningKey.rsa("ps-1", alg="PS256")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def keyset(*keys: SigningKey) -> KeySet:
    found = KeySet()
    found.load({"keys": [key.jwk() for key in keys]}, now=0.0)
    return found


def verifier(*keys: SigningKey) -> TokenVerifier:
    return TokenVerifier(keyset=keyset(*keys), audience=AUDIENCE, issuer=ISSUER)


@pytest.mark.parametrize("key", [RSA, EC, ED, PS], ids=lambda k: k.alg)
def test_each_algorithm_verifies_with_its_key(key: SigningKey) -> None:
    assert verifier(RSA, EC, ED, PS).verify(key.token(claims()))["sub"] == "ana"


def test_a_key_without_alg_verifies_its_default_algorithm() -> None:
    found = KeySet()
    found.load({"keys": [RSA.jwk(with_alg=False), EC.jwk(with_alg=False)]}, now=0.0)
    check = TokenVerifier(keyset=found, audience=AUDIENCE, issuer=ISSUER)
    assert check.verify(RSA.token(claims()))["sub"] == "ana"
    assert check.verify(EC.token(claims()))["sub"] == "ana"


def test_the_key_is_chosen_by_kid_and_must_be_the_signer() -> None:
    check = verifier(RSA, EC)
    impostor = SigningKey.rsa("rsa-1")  # same kid, another private key
    with pytest.raises(AuthError, match="signature"):
        check.verify(impostor.token(claims()))
    with pytest.raises(AuthError, match="not in the JWKS"):
        check.verify(SigningKey.rsa("rsa-2").token(claims()))


def test_the_algorithm_must_be_the_keys() -> None:
    check = verifier(RSA, EC, PS)
    # RS256 claimed over the PS256 key, and ES256 over the RSA key's kid
    with pytest.raises(AuthError, match="does not match"):
        check.verify(PS.token(claims(), alg="RS256"))
    with pytest.raises(AuthError, match="does not match|signature"):
        check.verify(EC.token(claims(), kid="rsa-1"))


def test_hs256_signed_with_the_public_key_is_refused() -> None:
    # The classic confusion: the RSA public key (public, in the JWKS) used as an HMAC secret.
    pem = RSA.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64url(b'{"alg":"HS256","kid":"rsa-1"}')
    body = b64url(json.dumps(claims()).encode())
    signature = hmac.new(pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
    with pytest.raises(AuthError, match="algorithm"):
        verifier(RSA).verify(f"{header}.{body}.{b64url(signature)}")


def test_without_kid_the_only_key_is_used_but_not_one_of_several() -> None:
    token = RSA.token(claims(), kid=None)
    assert verifier(RSA).verify(token)["sub"] == "ana"
    with pytest.raises(AuthError, match="no key id"):
        verifier(RSA, EC).verify(token)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ('{"sub":"a","aud":"busgate","iss":"https://idp.test","exp":NaN}', "exp"),
        ('{"sub":"a","aud":"busgate","iss":"https://idp.test","exp":"4000000000"}', "exp"),
        ('{"sub":"a","aud":"busgate","iss":"https://idp.test","exp":1}', "expired"),
        ('{"sub":"a","aud":"other","iss":"https://idp.test"}', "audience"),
        ('{"sub":"a","aud":"busgate","iss":"https://evil.test"}', "issuer"),
    ],
)
@pytest.mark.parametrize("key", [RSA, EC], ids=lambda k: k.alg)
def test_bad_claims_signed_by_a_real_key_are_refused(
    key: SigningKey, payload: str, reason: str
) -> None:
    check = verifier(RSA, EC)
    good = key.raw_token('{"sub":"a","aud":"busgate","iss":"https://idp.test","exp":4000000000}')
    assert check.verify(good)["sub"] == "a"  # the raw signing itself is right
    with pytest.raises(AuthError, match=reason):
        check.verify(key.raw_token(payload))


@pytest.mark.parametrize("junk", ["=", "==", "!", "AAAA", "%"])
@pytest.mark.parametrize("key", [RSA, EC], ids=lambda k: k.alg)
def test_junk_after_an_asymmetric_signature_is_refused(key: SigningKey, junk: str) -> None:
    token = key.token(claims())
    check = verifier(RSA, EC)
    check.verify(token)
    with pytest.raises(AuthError):
        check.verify(token + junk)


def test_key_set_skips_what_cannot_sign_and_refuses_an_empty_one() -> None:
    found = KeySet()
    document = {
        "keys": [
            RSA.jwk(),
            {"kty": "oct", "kid": "shared", "k": "c2VjcmV0"},  # a secret has no place in a JWKS
            {**EC.jwk(), "use": "enc"},
            {"kty": "RSA", "kid": "broken", "n": "AQAB"},
            "not a key",
            {"kty": "XYZ", "kid": "odd"},
        ]
    }
    assert found.load(json.dumps(document).encode(), now=0.0) == 1
    assert found.kids == ["rsa-1"] and found.skipped == 5
    for bad, reason in (
        (b"<html>", "not JSON"),
        (b'{"keys": {}}', 'no "keys" list'),
        (json.dumps({"keys": [{"kty": "oct", "k": "eA"}]}).encode(), "no usable signing key"),
    ):
        with pytest.raises(ConfigError, match=reason):
            found.load(bad, now=5.0)
        assert found.kids == ["rsa-1"]  # the old keys stay
        assert found.error is not None and found.attempted_at == 5.0


def test_key_set_staleness_and_fetch_spacing() -> None:
    found = KeySet(ttl=300.0, retry=10.0)
    assert found.stale(0.0) and found.may_fetch(0.0)
    found.load({"keys": [RSA.jwk()]}, now=100.0)
    assert not found.stale(399.0) and found.stale(400.0)
    assert not found.may_fetch(109.0) and found.may_fetch(110.0)
    found.failed("timeout", now=200.0)
    assert not found.may_fetch(205.0) and found.kids == ["rsa-1"]
