"""Authenticator primitives (bus/link/auth.py) against docs/PROTOCOL.md 4.1 and SEEDS.md's
vectors."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.errors import AuthError, ConfigError, DecodeError, EncodeError
from bus.link.auth import (
    AUTH_LABEL,
    NONCE_SIZE,
    IdGenerator,
    b64_decode,
    b64_decode_int,
    b64_encode,
    b64_encode_int,
    client_proof,
    mop_authenticator,
    new_nonce,
    post_office_key,
    server_proof,
    transcript,
    verify_client_proof,
    verify_mop_authenticator,
    verify_server_proof,
)
from tests.docexamples import Example, examples

EXAMPLES = examples("auth")


def of_kind(kind: str) -> list[Example]:
    return [ex for ex in EXAMPLES if ex.attrs.get("kind") == kind]


def test_document_has_every_kind_of_example() -> None:
    kinds = {ex.attrs.get("kind") for ex in EXAMPLES}
    assert kinds == {
        "b64-int",
        "b64-bytes",
        "ids",
        "mop-authenticator",
        "transcript",
        "challenge-response",
    }


# --- MOP Base64 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text"), [(1, "AB"), (100, "Bk"), (300, "AEs")], ids=["1", "100", "300"]
)
def test_seed_number_vectors(number: int, text: str) -> None:
    assert b64_encode_int(number) == text
    assert b64_decode_int(text) == number


def test_seed_bytes_vector_differs_from_standard_base64() -> None:
    assert b64_encode(b"ab") == "GFi"
    assert base64.b64encode(b"ab") == b"YWI="
    assert b64_decode("GFi") == b"ab"


@pytest.mark.parametrize("ex", of_kind("b64-int"), ids=lambda ex: ex.id)
def test_int_examples_both_ways(ex: Example) -> None:
    assert b64_encode_int(int(ex.body["number"])) == ex.body["b64"]
    assert b64_decode_int(ex.body["b64"]) == int(ex.body["number"])


@pytest.mark.parametrize("ex", of_kind("b64-bytes"), ids=lambda ex: ex.id)
def test_bytes_examples_both_ways(ex: Example) -> None:
    assert b64_encode(ex.hex()) == ex.body["b64"]
    assert b64_decode(ex.body["b64"]) == ex.hex()


@settings(deadline=None)  # no timing in tests: shared CPUs
@given(st.binary(max_size=100))
def test_bytes_round_trip_and_whole_groups_match_standard_base64(data: bytes) -> None:
    text = b64_encode(data)
    assert b64_decode(text) == data
    whole = len(data) // 3 * 3
    assert text[: whole // 3 * 4] == base64.b64encode(data[:whole]).decode()
    assert len(text) == whole // 3 * 4 + (len(data) - whole + 1 if len(data) > whole else 0)


@settings(deadline=None)  # no timing in tests: shared CPUs
@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_number_round_trip_and_below_2_pow_24_is_minimal_bytes(number: int) -> None:
    text = b64_encode_int(number)
    assert b64_decode_int(text) == number
    assert 2 <= len(text) <= 11
    if number < 2**24:
        assert text == b64_encode(number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big"))


def test_quirk_free_spelling_of_a_number_is_also_accepted() -> None:
    assert b64_decode_int("AQIDAE") == b64_decode_int("AQIDME") == 0x01020304


@pytest.mark.parametrize(
    "text",
    ["A", "ABCDE", "A*", "Bé", "AB=", "EA", "/Bk"],
    ids=["len1", "len5", "bad-char", "non-ascii", "padding", "high-bits", "high-bits-3"],
)
def test_bad_bytes_text_is_decode_error(text: str) -> None:
    with pytest.raises(DecodeError):
        b64_decode(text)


@pytest.mark.parametrize("text", ["", "A", "AAAAA", "AAAAAAAAAAAA", "A*", "AQIDEE"])
def test_bad_number_text_is_decode_error(text: str) -> None:
    with pytest.raises(DecodeError):
        b64_decode_int(text)


@settings(deadline=None)  # no timing in tests: shared CPUs
@given(st.text(max_size=16))
def test_fuzz_decoders_only_decode_error(text: str) -> None:
    for decode in (b64_decode, b64_decode_int):
        try:
            decode(text)
        except DecodeError:
            pass


@pytest.mark.parametrize("number", [-1, 2**64])
def test_number_out_of_range_is_encode_error(number: int) -> None:
    with pytest.raises(EncodeError):
        b64_encode_int(number)


# --- ids and the MOP authenticator ---------------------------------------------------------------


@pytest.mark.parametrize("ex", of_kind("ids"), ids=lambda ex: ex.id)
def test_id_examples(ex: Example) -> None:
    generator = IdGenerator(ex.body["po"])
    assert [generator.next() for _ in ex.body["ids"].split()] == ex.body["ids"].split()


def test_ids_are_unique_and_carry_the_post_office() -> None:
    generator = IdGenerator("irrigation", last=2**24 - 2)
    ids = [generator.next() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(i.endswith(".irrigation") for i in ids)
    assert b64_decode_int(ids[0].split(".")[0]) == 2**24 - 1


@pytest.mark.parametrize("name", ["", "a.b"])
def test_bad_post_office_name_is_config_error(name: str) -> None:
    with pytest.raises(ConfigError):
        IdGenerator(name)


@pytest.mark.parametrize("ex", of_kind("mop-authenticator"), ids=lambda ex: ex.id)
def test_mop_authenticator_examples(ex: Example) -> None:
    secret, po, msgid = ex.body["secret"].encode(), ex.body["po"], ex.body["msgid"]
    expected = ex.body["b64"]
    assert mop_authenticator(secret, po, msgid) == expected
    # Independently: SHA-256 of the concatenation; its first 30 bytes are plain Base64.
    digest = hashlib.sha256(secret + po.encode() + msgid.encode()).digest()
    assert expected[:40] == base64.b64encode(digest[:30]).decode()
    assert b64_decode(expected) == digest
    assert verify_mop_authenticator(secret, po, msgid, expected)


def test_mop_authenticator_refuses_every_change() -> None:
    good = mop_authenticator(b"secret", "test1", "AB.test1")
    assert not verify_mop_authenticator(b"Secret", "test1", "AB.test1", good)
    assert not verify_mop_authenticator(b"secret", "test2", "AB.test1", good)
    assert not verify_mop_authenticator(b"secret", "test1", "AC.test1", good)
    assert not verify_mop_authenticator(b"secret", "test1", "AB.test1", good[:-1])
    assert not verify_mop_authenticator(b"secret", "test1", "AB.test1", good + "A")
    assert not verify_mop_authenticator(b"secret", "test1", "AB.test1", "é" * 43)
    assert not verify_mop_authenticator(b"secret", "", "AB.test1", good)
    with pytest.raises(EncodeError):
        mop_authenticator(b"secret", "test1", "")


# --- challenge-response --------------------------------------------------------------------------


@pytest.mark.parametrize("ex", of_kind("transcript"), ids=lambda ex: ex.id)
def test_transcript_examples(ex: Example) -> None:
    assert transcript(*(part.encode() for part in ex.body["parts"].split())) == ex.hex()


def test_transcript_is_unambiguous() -> None:
    assert transcript(b"ab", b"c") != transcript(b"a", b"bc")
    assert transcript(b"", b"x") != transcript(b"x", b"")
    assert transcript() == b""


@pytest.mark.parametrize("ex", of_kind("challenge-response"), ids=lambda ex: ex.id)
def test_challenge_response_examples(ex: Example) -> None:
    secret, po = ex.body["secret"].encode(), ex.body["po"]
    nc, ns = ex.hex("nc"), ex.hex("ns")
    assert post_office_key(secret, po) == ex.hex("key")
    assert server_proof(secret, po, nc, ns) == ex.hex("server")
    assert client_proof(secret, po, nc, ns) == ex.hex("client")
    assert verify_server_proof(secret, po, nc, ns, ex.hex("server"))
    assert verify_client_proof(secret, po, nc, ns, ex.hex("client"))
    # Transcript as documented, checked with the standard library alone.
    message = transcript(AUTH_LABEL, b"server", po.encode(), nc, ns)
    assert hmac.new(ex.hex("key"), message, "sha256").digest() == ex.hex("server")


def test_mutual_handshake_with_fresh_nonces() -> None:
    secret, po = b"s3cret", "homeweb"
    nc = new_nonce()  # client hello
    ns = new_nonce()  # broker challenge
    assert len(nc) == len(ns) == NONCE_SIZE and nc != ns
    from_server = server_proof(secret, po, nc, ns)
    assert verify_server_proof(secret, po, nc, ns, from_server)  # client trusts the broker
    from_client = client_proof(secret, po, nc, ns)
    assert verify_client_proof(secret, po, nc, ns, from_client)  # broker trusts the client


def test_proofs_refuse_replay_reflection_and_wrong_secret() -> None:
    secret, po, nc, ns = b"s3cret", "homeweb", new_nonce(), new_nonce()
    proof = client_proof(secret, po, nc, ns)
    # A recorded client proof fails against the next connection's fresh server nonce.
    assert not verify_client_proof(secret, po, nc, new_nonce(), proof)
    # The broker's proof cannot be reflected back as the client's.
    assert not verify_client_proof(secret, po, nc, ns, server_proof(secret, po, nc, ns))
    assert not verify_client_proof(b"wrong", po, nc, ns, proof)
    assert not verify_client_proof(secret, "other", nc, ns, proof)
    assert not verify_client_proof(secret, po, nc, ns, proof[:-1])
    assert not verify_server_proof(secret, po, nc[:-1], ns, proof)


def test_bad_nonce_or_empty_secret() -> None:
    with pytest.raises(AuthError) as info:
        client_proof(b"s", "po", b"short", new_nonce())
    assert info.value.close_reason.name == "AUTHENTICATION_FAILURE"
    with pytest.raises(ConfigError):
        server_proof(b"", "po", new_nonce(), new_nonce())
