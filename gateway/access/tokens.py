"""Bearer tokens (JWTs), checked with PyJWT: HS256 with a shared secret, or keys from a JWKS.

Two ways to trust a token, usable together (``docs/PROTOCOL.md`` section 9.7):

- ``HS256`` with the gateway's ``jwt_secret``, for simple setups (mint one with
  :func:`sign_jwt`);
- ``RS256``/``ES256`` (any asymmetric algorithm of PyJWT: ``RS*``, ``PS*``, ``ES*``, ``EdDSA``)
  with the public keys of a JWKS document (``jwt_jwks``: an identity provider's
  ``jwks_uri`` or a file), chosen by the token's ``kid``. The :class:`KeySet` holds the keys;
  fetching the document is the I/O driver's job (``gateway/access/jwks.py``).

PyJWT checks the signature, the algorithm against the key, ``exp``/``nbf``/``iat`` (30 s of
leeway, on PyJWT's own clock) and ``aud``/``iss``. Before it, the compact form is checked strictly
(three base64url parts of RFC 7515's alphabet, no padding, at most :data:`MAX_TOKEN` bytes), so
junk appended to a signature is refused; after it, ``exp``, ``nbf`` and ``iat`` must be JSON
numbers (a NaN, an infinity or a string is refused, never read as "no expiry"). A token with an
``aud`` is refused unless the gateway is configured with that audience (RFC 7519 section 4.1.3).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jwt
from jwt import PyJWK

from bus.errors import AuthError, ConfigError

__all__ = [
    "ASYMMETRIC",
    "JWT_LEEWAY",
    "MAX_TOKEN",
    "KeySet",
    "TokenVerifier",
    "looks_like_jwt",
    "sign_jwt",
    "unverified_header",
]

JWT_LEEWAY: Final = 30.0
#: Longest token accepted, in bytes (identity providers' tokens are a few KiB at most).
MAX_TOKEN: Final = 16 * 1024
#: Largest JWKS document read, in bytes.
MAX_JWKS: Final = 1024 * 1024
#: The algorithms a JWKS key may verify (a JWKS never holds a shared secret for us).
ASYMMETRIC: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_NUMERIC_DATES = ("exp", "nbf", "iat")


def looks_like_jwt(token: str) -> bool:
    """True for a credential shaped like a compact JWT (two dots); anything else is an API key."""
    return token.count(".") == 2


def sign_jwt(claims: Mapping[str, Any], secret: str) -> str:
    """Make an HS256 JWT (to mint tokens by hand, and for tests).

    Args:
        claims: the payload claims.
        secret: the shared secret.

    Returns:
        The compact token ``header.payload.signature``.
    """
    return jwt.encode(dict(claims), secret, algorithm="HS256")


def _check_compact(token: str) -> None:
    if len(token) > MAX_TOKEN:
        raise AuthError(f"malformed token: longer than {MAX_TOKEN} bytes")
    if not _COMPACT.fullmatch(token):
        raise AuthError(
            "malformed token: expected three base64url parts header.payload.signature "
            "(no padding, no other characters)"
        )


def unverified_header(token: str) -> dict[str, Any]:
    """The token's header, not yet trusted (to choose the key).

    Raises:
        AuthError: the token is not a well-formed compact JWT.
    """
    _check_compact(token)
    try:
        return jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise AuthError(f"malformed token: {exc}") from exc


@dataclass
class _Keys:
    by_kid: dict[str, PyJWK]
    unnamed: list[PyJWK]


class KeySet:
    """The signing keys of a JWKS document, by ``kid``, and when to fetch it again.

    Sans-I/O: the driver fetches the document and hands it to :meth:`load`, with the time.

    Args:
        ttl: seconds a loaded document is used before it is fetched again (300).
        retry: least seconds between two fetches, whether the last one failed or a token named
            an unknown ``kid`` (10): a flood of made-up ``kid`` values costs one fetch per
            ``retry``, not one per token.
    """

    def __init__(self, ttl: float = 300.0, retry: float = 10.0) -> None:
        self.ttl = ttl
        self.retry = retry
        self._keys = _Keys({}, [])
        self.loaded_at: float | None = None
        self.attempted_at: float | None = None
        self.error: str | None = None
        self.skipped = 0

    def load(self, document: bytes | str | Mapping[str, Any], now: float) -> int:
        """Replace the keys with those of a JWKS document.

        Keys for encryption (``use: enc``), symmetric keys (``kty: oct``) and keys PyJWT cannot
        use are skipped (counted in :attr:`skipped`).

        Args:
            document: the JWKS, ``{"keys": [...]}``, as bytes, text or parsed.
            now: the time (monotonic seconds).

        Returns:
            How many signing keys it holds.

        Raises:
            ConfigError: not a JWKS, or no usable signing key in it (the old keys are kept).
        """
        self.attempted_at = now
        try:
            keys = self._parse(document)
        except ConfigError as exc:
            self.error = str(exc)
            raise
        self._keys = keys
        self.loaded_at = now
        self.error = None
        return len(keys.by_kid) + len(keys.unnamed)

    def failed(self, reason: str, now: float) -> None:
        """A fetch failed: the old keys stay, the next fetch waits :attr:`retry` seconds."""
        self.attempted_at = now
        self.error = reason

    def _parse(self, document: bytes | str | Mapping[str, Any]) -> _Keys:
        try:
            data = document if isinstance(document, Mapping) else json.loads(document)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"the JWKS is not JSON: {exc}") from exc
        entries = data.get("keys") if isinstance(data, Mapping) else None
        if not isinstance(entries, list):
            raise ConfigError('the JWKS has no "keys" list')
        keys = _Keys({}, [])
        self.skipped = 0
        for entry in entries:
            key = self._signing_key(entry)
            if key is None:
                self.skipped += 1
            elif key.key_id:
                keys.by_kid[key.key_id] = key
            else:
                keys.unnamed.append(key)
        if not keys.by_kid and not keys.unnamed:
            raise ConfigError(f"the JWKS has no usable signing key ({len(entries)} entries)")
        return keys

    @staticmethod
    def _signing_key(entry: Any) -> PyJWK | None:
        if not isinstance(entry, dict) or entry.get("kty") == "oct":
            return None
        if entry.get("use", "sig") != "sig":
            return None
        try:
            key = PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError):
            return None
        return key if key.algorithm_name in ASYMMETRIC else None

    @property
    def kids(self) -> list[str]:
        """The ``kid`` of every key held."""
        return sorted(self._keys.by_kid)

    def has(self, kid: str | None) -> bool:
        """True when :meth:`find` would find a key for this ``kid``."""
        if kid is None:
            return len(self._keys.by_kid) + len(self._keys.unnamed) == 1
        return kid in self._keys.by_kid

    def find(self, kid: str | None) -> PyJWK:
        """The key for a token's ``kid`` (a token without one: the only key of the set).

        Raises:
            AuthError: no such key.
        """
        if kid is not None:
            key = self._keys.by_kid.get(kid)
            if key is None:
                raise AuthError(f"token key id {kid[:64]!r} is not in the JWKS")
            return key
        if self.has(None):
            return (list(self._keys.by_kid.values()) + self._keys.unnamed)[0]
        raise AuthError("token has no key id (kid) and the JWKS holds several keys")

    def stale(self, now: float) -> bool:
        """True when the document is older than :attr:`ttl` (or was never loaded)."""
        return self.loaded_at is None or now - self.loaded_at >= self.ttl

    def may_fetch(self, now: float) -> bool:
        """True when :attr:`retry` seconds have passed since the last fetch."""
        return self.attempted_at is None or now - self.attempted_at >= self.retry


class TokenVerifier:
    """Checks bearer tokens and returns their claims.

    Args:
        secret: the HS256 secret (``None``: HS256 tokens are refused).
        keyset: the JWKS keys (``None``: asymmetric tokens are refused).
        audience: the required ``aud``, if any (a token with an ``aud`` needs one).
        issuer: the required ``iss``, if any.
        leeway: seconds of clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    """

    def __init__(
        self,
        secret: str | None = None,
        keyset: KeySet | None = None,
        *,
        audience: str | None = None,
        issuer: str | None = None,
        leeway: float = JWT_LEEWAY,
    ) -> None:
        self.secret = secret
        self.keyset = keyset
        self.audience = audience
        self.issuer = issuer
        self.leeway = leeway

    def verify(self, token: str) -> dict[str, Any]:
        """Check a compact JWT.

        Returns:
            Its claims.

        Raises:
            AuthError: malformed, an algorithm or key we do not accept, a bad signature,
                expired, not valid yet, the wrong audience or issuer, or a bad time claim.
        """
        header = unverified_header(token)
        alg = header.get("alg")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthError("malformed token: kid must be a string")
        key: Any
        if alg == "HS256" and self.secret:
            key = self.secret
        elif alg in ASYMMETRIC and self.keyset is not None:
            jwk = self.keyset.find(kid)
            if jwk.algorithm_name != alg:
                raise AuthError(f"token algorithm {alg!r} does not match its key's")
            key = jwk.key
        else:
            raise AuthError(
                f"token algorithm {str(alg)[:16]!r} is not accepted ({self._accepts()})"
            )
        claims = self._decode(token, key, str(alg))
        for name in _NUMERIC_DATES:
            _check_numeric_date(claims, name)
        return claims

    def _accepts(self) -> str:
        accepted = ["HS256"] if self.secret else []
        if self.keyset is not None:
            accepted.append("the JWKS's RS*/PS*/ES*/EdDSA keys")
        return "accepted: " + (" and ".join(accepted) or "none")

    def _decode(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise AuthError("token is not valid yet") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError(f"token audience does not match: {exc}") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("token issuer does not match") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthError("token signature does not match") from exc
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {exc}") from exc
        return claims


def _check_numeric_date(claims: Mapping[str, Any], name: str) -> None:
    # RFC 7519 section 2: a NumericDate is a JSON number. PyJWT also takes "123" and True.
    if name not in claims:
        return
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AuthError(f"invalid token: claim {name!r} must be a finite number")
