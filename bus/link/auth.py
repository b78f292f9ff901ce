"""Authenticator primitives for the broker's connect step (seed 001; ``docs/PROTOCOL.md`` 4.1).

Sans-I/O and pure: no sockets, no clock. Nonces come in as arguments so every result can be
checked against the examples; :func:`new_nonce` makes fresh ones with :mod:`secrets`.

- MOP's Base64 (:func:`b64_encode`, :func:`b64_decode`, :func:`b64_encode_int`,
  :func:`b64_decode_int`): the RFC 4648 alphabet without padding, but a leftover group of 1 or 2
  bytes is *right-justified* in 2 or 3 characters (``b"ab"`` is ``"GFi"``, not ``"YWI"``).
- MOP message ids (:class:`IdGenerator`): ``B64(counter) + "." + postOfficeName``.
- MOP's authenticator (:func:`mop_authenticator`, :func:`verify_mop_authenticator`):
  ``B64(SHA-256(secret || UTF8(poName) || UTF8(id)))``, verified in constant time.
- busgate's default challenge-response (:func:`server_proof`, :func:`client_proof` and their
  ``verify_*``): HMAC-SHA256 under a per-post-office key over a length-prefixed transcript
  of both nonces, proving each side to the other.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from typing import Final, Literal

from bus.errors import AuthError, ConfigError, DecodeError, EncodeError

__all__ = [
    "AUTH_LABEL",
    "KEY_LABEL",
    "LOGIN_REFUSED",
    "MOP_ALPHABET",
    "NONCE_SIZE",
    "IdGenerator",
    "b64_decode",
    "b64_decode_int",
    "b64_encode",
    "b64_encode_int",
    "client_proof",
    "mop_authenticator",
    "new_nonce",
    "post_office_key",
    "server_proof",
    "transcript",
    "verify_client_proof",
    "verify_mop_authenticator",
    "verify_server_proof",
]

#: MOP's Base64 alphabet: RFC 4648 section 4, value 0..63 in this order.
MOP_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
#: First transcript part of every challenge-response proof (names protocol and version).
AUTH_LABEL: Final = b"busgate-auth-v1"
#: First transcript part of the per-post-office key derivation.
KEY_LABEL: Final = b"busgate-key-v1"
#: Length of a challenge-response nonce, in bytes.
NONCE_SIZE: Final = 32
#: The one refusal for a post office that does not exist and for a wrong secret, whatever the
#: mode (busgate or MOP): a stranger cannot tell which post offices the broker knows.
LOGIN_REFUSED: Final = "login refused: unknown post office or wrong secret"

_VALUE: Final = {char: value for value, char in enumerate(MOP_ALPHABET)}
_U32: Final = struct.Struct(">I")
_U64_LIMIT: Final = 1 << 64
Role = Literal["server", "client"]


# --- MOP Base64 -----------------------------------------------------------------------------------


def _group_chars(bits: int, count: int) -> str:
    """``count`` bytes of right-justified ``bits`` as ``count + 1`` characters (MOP encodeBits)."""
    return "".join(MOP_ALPHABET[(bits >> shift) & 0x3F] for shift in range(count * 6, -1, -6))


def b64_encode(data: bytes) -> str:
    """Encode bytes in MOP's Base64: 4 characters per 3 bytes, a last 1-2 bytes right-justified.

    Args:
        data: the bytes (may be empty: ``""``).

    Returns:
        The text, ``len(data) // 3 * 4`` characters plus 2 or 3 for a leftover of 1 or 2 bytes.
    """
    out = []
    for at in range(0, len(data), 3):
        group = data[at : at + 3]
        out.append(_group_chars(int.from_bytes(group, "big"), len(group)))
    return "".join(out)


def _group_bits(text: str, start: int, end: int) -> int:
    bits = 0
    for offset in range(start, end):
        value = _VALUE.get(text[offset])
        if value is None:
            raise DecodeError(f"invalid MOP Base64 character {text[offset]!r}", offset)
        bits = bits << 6 | value
    return bits


def b64_decode(text: str) -> bytes:
    """Decode MOP's Base64 text to bytes; only the one canonical encoding is accepted.

    Args:
        text: the Base64 text (``""`` gives ``b""``).

    Returns:
        The decoded bytes.

    Raises:
        DecodeError: a character outside the alphabet, a length of 4n+1, or a leftover group
            whose unused high bits are not zero (the original would silently drop them).
    """
    if len(text) % 4 == 1:
        raise DecodeError(f"MOP Base64 length {len(text)} is 1 more than a multiple of 4")
    out = bytearray()
    for start in range(0, len(text), 4):
        end = min(start + 4, len(text))
        count = end - start - 1  # bytes in this group
        bits = _group_bits(text, start, end)
        if bits >> (8 * count):
            raise DecodeError("non-canonical MOP Base64: unused high bits set", start)
        out += bits.to_bytes(count, "big")
    return bytes(out)


def b64_encode_int(number: int) -> str:
    """Encode a number as MOP's ``Base64.encode(long)`` does (message ids, frame lengths).

    The number's minimal big-endian bytes (at least one) are encoded as by :func:`b64_encode`.
    For numbers of more than 3 bytes whose byte count is not a multiple of 3, the original
    leaves the higher bits in the leftover group's first character; this mirrors it exactly
    (below 2**24, every MOP id and length, there is no difference).

    Args:
        number: 0 <= number < 2**64 (Java long bits; 0 is ``"AA"``).

    Returns:
        2 to 11 characters.

    Raises:
        EncodeError: the number is negative or needs more than 64 bits.
    """
    if not 0 <= number < _U64_LIMIT:
        raise EncodeError(f"MOP Base64 numbers are 0..2**64-1, got {number}")
    remaining = max(1, (number.bit_length() + 7) // 8)
    out = []
    while remaining >= 3:
        remaining -= 3
        out.append(_group_chars(number >> (8 * remaining), 3))
    if remaining:
        # Quirk of the original: the unmasked number, so bits above the group leak into char 0.
        out.append(_group_chars(number, remaining))
    return "".join(out)


def b64_decode_int(text: str) -> int:
    """Decode a number written by :func:`b64_encode_int` (or MOP's ``Base64.encode(long)``).

    Args:
        text: 2 to 11 characters.

    Returns:
        The number.

    Raises:
        DecodeError: bad length or character, more than 8 bytes, or neither the encoding that
            :func:`b64_encode_int` gives for the decoded number nor :func:`b64_encode` of its
            minimal big-endian bytes (the two differ only above 2**24, see the quirk).
    """
    if not text or len(text) % 4 == 1:
        raise DecodeError(f"MOP Base64 number of {len(text)} characters")
    if len(text) > 11:
        raise DecodeError("MOP Base64 number longer than 8 bytes")
    number = 0
    for start in range(0, len(text), 4):
        end = min(start + 4, len(text))
        # As the original decodeLong: shift by the group's bytes, OR in all its bits.
        number = number << (8 * (end - start - 1)) | _group_bits(text, start, end)
    minimal = number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")
    if text not in (b64_encode_int(number), b64_encode(minimal)):
        raise DecodeError(f"non-canonical MOP Base64 number {text!r}")
    return number


# --- MOP ids and the SHA-256 authenticator --------------------------------------------------------


class IdGenerator:
    """MOP message ids of one post office: ``B64(counter) + "." + poName``, counter from 1.

    Args:
        po_name: the post office's bare name (``"test1"``).
        last: the last counter value used; the next id uses ``last + 1`` (as Java's
            ``AtomicLong.incrementAndGet``). Default 0, so the first id is ``"AB." + po_name``.

    Raises:
        ConfigError: ``po_name`` is empty or holds a dot.
    """

    def __init__(self, po_name: str, last: int = 0) -> None:
        if not po_name or "." in po_name:
            raise ConfigError(f"post office name must be non-empty without dots: {po_name!r}")
        self.po_name = po_name
        self.last = last

    def next(self) -> str:
        """Return the next id.

        Returns:
            ``b64_encode_int(counter) + "." + po_name``.
        """
        self.last += 1
        return f"{b64_encode_int(self.last)}.{self.po_name}"


def _mop_digest(secret: bytes, po_name: str, message_id: str) -> bytes:
    if not po_name or not message_id:
        raise EncodeError("the MOP authenticator needs a post office name and a message id")
    digest = hashlib.sha256(secret)
    digest.update(po_name.encode("utf-8"))
    digest.update(message_id.encode("utf-8"))
    return digest.digest()


def mop_authenticator(secret: bytes, po_name: str, message_id: str) -> str:
    """MOP's connect authenticator: ``B64(SHA-256(secret || UTF8(po_name) || UTF8(id)))``.

    Args:
        secret: the post office's shared secret bytes.
        po_name: the bare post office name (``"test1"``, the part after the dot of an id).
        message_id: the id of the connect message carrying the authenticator.

    Returns:
        43 characters of MOP Base64.

    Raises:
        EncodeError: ``po_name`` or ``message_id`` is empty.
    """
    return b64_encode(_mop_digest(secret, po_name, message_id))


def verify_mop_authenticator(
    secret: bytes, po_name: str, message_id: str, authenticator: str
) -> bool:
    """Check a received MOP authenticator in constant time.

    Args:
        secret: the post office's shared secret bytes.
        po_name: the post office name the peer claims.
        message_id: the id of the message that carried ``authenticator``.
        authenticator: the received text (anything; malformed text is simply wrong).

    Returns:
        True only if it equals :func:`mop_authenticator` of the same inputs.
    """
    if not po_name or not message_id:
        return False
    expected = mop_authenticator(secret, po_name, message_id).encode("ascii")
    return hmac.compare_digest(expected, authenticator.encode("utf-8", "surrogatepass"))


# --- challenge-response: HMAC-SHA256 over a length-prefixed transcript ---------------------------


def new_nonce() -> bytes:
    """A fresh random nonce for the challenge-response.

    Returns:
        :data:`NONCE_SIZE` bytes from :func:`secrets.token_bytes`.
    """
    return secrets.token_bytes(NONCE_SIZE)


def transcript(*parts: bytes) -> bytes:
    """Join parts so no two different part lists give the same bytes.

    Args:
        parts: byte strings, each under 2**32 bytes.

    Returns:
        For each part, its length as u32 big-endian, then its bytes.
    """
    return b"".join(_U32.pack(len(part)) + part for part in parts)


def post_office_key(secret: bytes, po_name: str) -> bytes:
    """The per-post-office HMAC key: ``HMAC-SHA256(secret, transcript(KEY_LABEL, UTF8(po_name)))``.

    Deriving it keeps the challenge-response key apart from the raw secret that the MOP
    authenticator hashes, and binds it to the post office's name.

    Args:
        secret: the post office's shared secret bytes (not empty).
        po_name: the bare post office name.

    Returns:
        32 bytes.

    Raises:
        ConfigError: the secret is empty.
    """
    if not secret:
        raise ConfigError(f"post office {po_name!r} has an empty secret")
    message = transcript(KEY_LABEL, po_name.encode("utf-8"))
    return hmac.new(secret, message, hashlib.sha256).digest()


def _proof(
    role: Role, secret: bytes, po_name: str, client_nonce: bytes, server_nonce: bytes
) -> bytes:
    for nonce in (client_nonce, server_nonce):
        if len(nonce) != NONCE_SIZE:
            raise AuthError(f"nonce of {len(nonce)} bytes, expected {NONCE_SIZE}")
    message = transcript(
        AUTH_LABEL, role.encode("ascii"), po_name.encode("utf-8"), client_nonce, server_nonce
    )
    return hmac.new(post_office_key(secret, po_name), message, hashlib.sha256).digest()


def server_proof(secret: bytes, po_name: str, client_nonce: bytes, server_nonce: bytes) -> bytes:
    """The broker's proof that it knows the post office's secret.

    ``HMAC-SHA256(post_office_key(secret, po_name), transcript(AUTH_LABEL, b"server",
    UTF8(po_name), client_nonce, server_nonce))``.

    Args:
        secret: the post office's shared secret bytes.
        po_name: the bare post office name.
        client_nonce: the client's nonce (:data:`NONCE_SIZE` bytes).
        server_nonce: the broker's nonce (:data:`NONCE_SIZE` bytes).

    Returns:
        32 bytes.

    Raises:
        AuthError: a nonce is not :data:`NONCE_SIZE` bytes.
        ConfigError: the secret is empty.
    """
    return _proof("server", secret, po_name, client_nonce, server_nonce)


def client_proof(secret: bytes, po_name: str, client_nonce: bytes, server_nonce: bytes) -> bytes:
    """The client's proof that it knows the post office's secret (role ``b"client"``).

    Args:
        secret: the post office's shared secret bytes.
        po_name: the bare post office name.
        client_nonce: the client's nonce (:data:`NONCE_SIZE` bytes).
        server_nonce: the broker's nonce (:data:`NONCE_SIZE` bytes).

    Returns:
        32 bytes.

    Raises:
        AuthError: a nonce is not :data:`NONCE_SIZE` bytes.
        ConfigError: the secret is empty.
    """
    return _proof("client", secret, po_name, client_nonce, server_nonce)


def _verify(
    role: Role,
    secret: bytes,
    po_name: str,
    client_nonce: bytes,
    server_nonce: bytes,
    proof: bytes,
) -> bool:
    try:
        expected = _proof(role, secret, po_name, client_nonce, server_nonce)
    except AuthError:
        return False
    return hmac.compare_digest(expected, bytes(proof))


def verify_server_proof(
    secret: bytes, po_name: str, client_nonce: bytes, server_nonce: bytes, proof: bytes
) -> bool:
    """Client side: check the broker's proof in constant time.

    Args:
        secret: the post office's shared secret bytes.
        po_name: this client's post office name.
        client_nonce: the nonce this client sent.
        server_nonce: the nonce the broker sent.
        proof: the broker's proof as received.

    Returns:
        True only if it equals :func:`server_proof` of the same inputs.

    Raises:
        ConfigError: the secret is empty.
    """
    return _verify("server", secret, po_name, client_nonce, server_nonce, proof)


def verify_client_proof(
    secret: bytes, po_name: str, client_nonce: bytes, server_nonce: bytes, proof: bytes
) -> bool:
    """Broker side: check a client's proof in constant time.

    Args:
        secret: the post office's shared secret bytes (from the broker's configuration).
        po_name: the post office name the client claims.
        client_nonce: the nonce the client sent.
        server_nonce: the nonce the broker sent on this connection (fresh each time).
        proof: the client's proof as received.

    Returns:
        True only if it equals :func:`client_proof` of the same inputs.

    Raises:
        ConfigError: the secret is empty.
    """
    return _verify("client", secret, po_name, client_nonce, server_nonce, proof)
