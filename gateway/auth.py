"""Who is calling and what they may do: API keys, HS256 JWTs, permissions and rate limits.

Sans-I/O: nothing here reads a socket or a clock; the current time is an argument.

Credentials are read, in order, from ``X-API-Key: KEY``, ``Authorization: Bearer TOKEN`` (a token
with two dots is a JWT, anything else an API key) and the ``key`` (or ``access_token``) query
parameter, for browsers' ``EventSource`` and ``WebSocket``, which cannot set headers.

A JWT must be HS256-signed with the gateway's ``jwt_secret``; ``exp`` and ``nbf`` are checked with
a 30 s leeway, ``aud`` and ``iss`` when configured. Its ``sub`` names the caller; its ``groups`` and
``types`` claims (lists of ``fnmatch`` patterns) say what it may reach, all of it when absent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from bus.errors import AuthError, LimitError, RefusedError
from gateway.settings import ApiKey, GatewaySettings

__all__ = [
    "ANONYMOUS",
    "QUERY_CREDENTIALS",
    "Authenticator",
    "CredentialsFromQuery",
    "Principal",
    "RateLimiter",
    "allowed",
    "sign_jwt",
    "verify_jwt",
]

JWT_LEEWAY = 30.0
#: Query parameters that may carry a credential (for EventSource and WebSocket).
QUERY_CREDENTIALS = (b"key", b"access_token")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller.

    Attributes:
        name: the key's name or the token's ``sub`` (``"anonymous"`` when auth is off).
        groups: patterns of the request groups it may reach.
        types: patterns of the event types it may publish or subscribe to.
        rate: its requests per second (``None``: the gateway's default).
        max_body: its largest request body (``None``: the gateway's default).
    """

    name: str
    groups: tuple[str, ...] = ("*",)
    types: tuple[str, ...] = ("*",)
    rate: float | None = None
    max_body: int | None = None

    def check_group(self, group: str) -> None:
        """Raise :class:`RefusedError` unless this caller may send requests to ``group``."""
        if not allowed(self.groups, group):
            raise RefusedError(f"{self.name!r} may not send requests to group {group!r}")

    def check_type(self, type_: str) -> None:
        """Raise :class:`RefusedError` unless this caller may use event type ``type_``."""
        if not allowed(self.types, type_):
            raise RefusedError(f"{self.name!r} may not use event type {type_!r}")


ANONYMOUS = Principal("anonymous")


def allowed(patterns: Sequence[str], name: str) -> bool:
    """True when ``name`` matches one of the ``fnmatch`` patterns (case-sensitive)."""
    if "*" in patterns:  # the default: everything, decided without matching
        return True
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise AuthError("malformed token: bad base64url") from exc


def sign_jwt(claims: Mapping[str, Any], secret: str) -> str:
    """Make an HS256 JWT (used by tests and to mint tokens by hand).

    Args:
        claims: the payload claims.
        secret: the shared secret.

    Returns:
        The compact token ``header.payload.signature``.
    """
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(dict(claims), separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}".encode("ascii")
    signature = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


def _json_part(text: str) -> dict[str, Any]:
    try:
        value = json.loads(_unb64url(text))
    except (UnicodeDecodeError, ValueError) as exc:
        raise AuthError("malformed token: bad JSON") from exc
    if not isinstance(value, dict):
        raise AuthError("malformed token: not a JSON object")
    return value


def verify_jwt(
    token: str,
    secret: str,
    now: float,
    *,
    audience: str | None = None,
    issuer: str | None = None,
    leeway: float = JWT_LEEWAY,
) -> dict[str, Any]:
    """Check an HS256 JWT and return its claims.

    Args:
        token: the compact token.
        secret: the shared HS256 secret.
        now: the current time, seconds since the epoch.
        audience: the required ``aud`` (a string, or one of a list), if any.
        issuer: the required ``iss``, if any.
        leeway: seconds of clock skew tolerated on ``exp`` and ``nbf``.

    Returns:
        The claims.

    Raises:
        AuthError: malformed, wrong algorithm, bad signature, expired, not yet valid, or the
            wrong audience or issuer.
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthError("malformed token: expected header.payload.signature")
    header = _json_part(parts[0])
    if header.get("alg") != "HS256":
        raise AuthError(f"token algorithm {header.get('alg')!r} is not accepted (HS256 only)")
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256)
    if not hmac.compare_digest(expected.digest(), _unb64url(parts[2])):
        raise AuthError("token signature does not match")
    claims = _json_part(parts[1])
    _check_times(claims, now, leeway)
    if audience is not None:
        aud = claims.get("aud")
        auds = aud if isinstance(aud, list) else [aud]
        if audience not in auds:
            raise AuthError("token audience does not match")
    if issuer is not None and claims.get("iss") != issuer:
        raise AuthError("token issuer does not match")
    return claims


def _check_times(claims: Mapping[str, Any], now: float, leeway: float) -> None:
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if exp is not None and (not isinstance(exp, int | float) or now > exp + leeway):
        raise AuthError("token has expired")
    if nbf is not None and (not isinstance(nbf, int | float) or now < nbf - leeway):
        raise AuthError("token is not valid yet")


def _patterns(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = claims.get(name, ["*"])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AuthError(f"token claim {name!r} must be a list of strings")
    return tuple(value)


class Authenticator:
    """Turns request credentials into a :class:`Principal`.

    Args:
        settings: the gateway settings (``auth_enabled``, ``api_keys``, ``jwt_*``).
    """

    def __init__(self, settings: GatewaySettings) -> None:
        self.enabled = settings.auth_enabled
        self._keys: dict[bytes, ApiKey] = {_digest(k.key): k for k in settings.api_keys}
        self._jwt_secret = settings.jwt_secret
        self._audience = settings.jwt_audience
        self._issuer = settings.jwt_issuer

    def authenticate(
        self, headers: Mapping[str, str], query: Mapping[str, str], now: float
    ) -> Principal:
        """Identify the caller.

        Args:
            headers: the request headers (case-insensitive mapping, lower-case keys work).
            query: the query parameters.
            now: the current time, seconds since the epoch.

        Returns:
            The principal; :data:`ANONYMOUS` when authentication is off.

        Raises:
            AuthError: credentials are missing or invalid.
        """
        if not self.enabled:
            return ANONYMOUS
        token = _credential(headers, query)
        if token is None:
            raise AuthError("credentials required: send X-API-Key or Authorization: Bearer")
        if token.count(".") == 2 and self._jwt_secret:
            return self._from_jwt(token, now)
        key = self._keys.get(_digest(token))
        if key is None:
            raise AuthError("unknown API key")
        return Principal(key.name, key.groups, key.types, key.rate, key.max_body)

    def _from_jwt(self, token: str, now: float) -> Principal:
        assert self._jwt_secret is not None
        claims = verify_jwt(
            token, self._jwt_secret, now, audience=self._audience, issuer=self._issuer
        )
        sub = claims.get("sub")
        name = f"jwt:{sub}" if isinstance(sub, str) and sub else "jwt"
        return Principal(name, _patterns(claims, "groups"), _patterns(claims, "types"))


def _digest(key: str) -> bytes:
    # Keys are looked up by their SHA-256, so the lookup time says nothing about the key.
    return hashlib.sha256(key.encode()).digest()


def _credential(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    token = query.get("key") or query.get("access_token")
    return token or None


class CredentialsFromQuery:
    """ASGI middleware: move a ``key``/``access_token`` query parameter into ``X-API-Key``.

    The credential then never reaches an access log line or a ``Referer`` built from the URL
    (uvicorn logs the path with its query string from the same scope), and every route and the
    WebSocket see it where they look first. A header already present wins.

    Args:
        app: the ASGI app to call.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("query_string"):
            _move_query_credential(scope)
        await self.app(scope, receive, send)


def _move_query_credential(scope: Scope) -> None:
    kept: list[bytes] = []
    credential = b""
    for part in scope["query_string"].split(b"&"):
        name, _, value = part.partition(b"=")
        if name in QUERY_CREDENTIALS:
            credential = credential or unquote_to_bytes(value.replace(b"+", b" "))
        else:
            kept.append(part)
    if not credential:
        return
    # Mutated in place: the server logs from this very scope.
    scope["query_string"] = b"&".join(kept)
    headers = list(scope.get("headers", []))
    if not any(name in (b"x-api-key", b"authorization") for name, _ in headers):
        headers.append((b"x-api-key", credential))
    scope["headers"] = headers


class RateLimiter:
    """Token buckets, one per key: ``rate`` requests per second, ``burst`` at once.

    Args:
        rate: default requests per second (0: unlimited).
        burst: bucket size.
        max_keys: buckets kept; the least recently used is forgotten beyond this.
    """

    def __init__(self, rate: float, burst: int, max_keys: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def check(self, key: str, now: float, rate: float | None = None) -> None:
        """Take one token from ``key``'s bucket.

        Args:
            key: who is asking (principal name or client address).
            now: the current time in seconds (any monotonic origin).
            rate: this key's rate, overriding the default.

        Raises:
            LimitError: the bucket is empty (``limit="rate"``; ``value`` = seconds to wait).
        """
        rate = self.rate if rate is None else rate
        if rate <= 0:
            return
        tokens, last = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * rate)
        if tokens < 1.0:
            self._remember(key, tokens, now)
            raise LimitError("rate", value=math.ceil((1.0 - tokens) / rate), maximum=None)
        self._remember(key, tokens - 1.0, now)

    def _remember(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
