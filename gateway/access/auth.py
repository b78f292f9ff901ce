"""Who is calling and what they may do: API keys, JWTs, permissions, rate limits, throttling.

Sans-I/O: nothing here reads a socket; the current time is an argument (PyJWT reads its own
clock for ``exp``/``nbf``, see :mod:`gateway.access.tokens`).

Credentials are read, in order, from ``X-API-Key: KEY``, ``Authorization: Bearer TOKEN`` (a token
with two dots is a JWT, anything else an API key) and the ``key`` (or ``access_token``) query
parameter, for browsers' ``EventSource`` and ``WebSocket``, which cannot set headers.

A JWT is checked by :class:`gateway.access.tokens.TokenVerifier` (HS256 with ``jwt_secret``, or the
keys
of the ``jwt_jwks`` document). Its ``sub`` names the caller; its ``groups`` and ``types`` claims
(lists of ``fnmatch`` patterns) say what it may reach, all of it when absent.

Wrong secrets are throttled per client address (:class:`FailureThrottle`): after
``auth_fail_limit`` (10) refused credentials at once, the address gets 429 with ``Retry-After``
for everything it sends until its bucket refills (one more try every ``auth_fail_window /
auth_fail_limit`` seconds: 6 s by default). A request without any credential is not a failure,
and successful authentications never count.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from bus.errors import AuthError, LimitError, RefusedError
from gateway.access.tokens import KeySet, TokenVerifier, looks_like_jwt, sign_jwt
from gateway.process.settings import ApiKey, GatewaySettings

__all__ = [
    "ANONYMOUS",
    "QUERY_CREDENTIALS",
    "Authenticator",
    "CredentialsFromQuery",
    "FailureThrottle",
    "Principal",
    "RateLimiter",
    "allowed",
    "move_query_credential",
    "sign_jwt",
]

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
        presence: it may see who subscribes (PROTOCOL.md 9.11).
    """

    name: str
    groups: tuple[str, ...] = ("*",)
    types: tuple[str, ...] = ("*",)
    rate: float | None = None
    max_body: int | None = None
    presence: bool = True

    def check_group(self, group: str) -> None:
        """Raise :class:`RefusedError` unless this caller may send requests to ``group``."""
        if not allowed(self.groups, group):
            raise RefusedError(f"{self.name!r} may not send requests to group {group!r}")

    def check_type(self, type_: str) -> None:
        """Raise :class:`RefusedError` unless this caller may use event type ``type_``."""
        if not allowed(self.types, type_):
            raise RefusedError(f"{self.name!r} may not use event type {type_!r}")

    def check_presence(self) -> None:
        """Raise :class:`RefusedError` unless this caller may see who subscribes."""
        if not self.presence:
            raise RefusedError(
                f"{self.name!r} may not see presence (an API key with :presence, or a token "
                "with the claim presence: true)"
            )


ANONYMOUS = Principal("anonymous")


def allowed(patterns: Sequence[str], name: str) -> bool:
    """True when ``name`` matches one of the ``fnmatch`` patterns (case-sensitive)."""
    if "*" in patterns:  # the default: everything, decided without matching
        return True
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _patterns(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = claims.get(name, ["*"])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AuthError(f"token claim {name!r} must be a list of strings")
    return tuple(value)


class Authenticator:
    """Turns request credentials into a :class:`Principal`, throttling wrong secrets.

    Args:
        settings: the gateway settings (``auth_enabled``, ``api_keys``, ``jwt_*``,
            ``auth_fail_*``).

    Attributes:
        tokens: the JWT verifier (its ``keyset`` is the JWKS, when configured).
        throttle: failed authentications per client address.
        refused: refusals so far by reason (``missing``, ``invalid``, ``throttled``), for
            ``/metrics``.
    """

    def __init__(self, settings: GatewaySettings) -> None:
        self.enabled = settings.auth_enabled
        self._keys: dict[bytes, ApiKey] = {_digest(k.key): k for k in settings.api_keys}
        keyset = None
        if settings.jwt_jwks:
            keyset = KeySet(ttl=settings.jwt_jwks_ttl, retry=settings.jwt_jwks_retry)
        self.tokens = TokenVerifier(
            settings.jwt_secret,
            keyset,
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
        )
        self._jwt = bool(settings.jwt_secret or settings.jwt_jwks)
        self.throttle = FailureThrottle(settings.auth_fail_limit, settings.auth_fail_window)
        self.refused: dict[str, int] = {"missing": 0, "invalid": 0, "throttled": 0}

    def authenticate(
        self,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        *,
        address: str = "",
        now: float = 0.0,
    ) -> Principal:
        """Identify the caller.

        Args:
            headers: the request headers (case-insensitive mapping, lower-case keys work).
            query: the query parameters.
            address: the client's address, for throttling wrong secrets.
            now: the current time in seconds (any monotonic origin), for the throttle.

        Returns:
            The principal; :data:`ANONYMOUS` when authentication is off.

        Raises:
            AuthError: credentials are missing or invalid.
            LimitError: this address sent too many wrong secrets (``limit="auth_failures"``).
        """
        if not self.enabled:
            return ANONYMOUS
        try:
            self.throttle.check(address, now)
        except LimitError:
            self.refused["throttled"] += 1
            raise
        token = _credential(headers, query)
        if token is None:
            self.refused["missing"] += 1
            raise AuthError("credentials required: send X-API-Key or Authorization: Bearer")
        try:
            return self._identify(token)
        except AuthError:
            self.refused["invalid"] += 1
            self.throttle.failed(address, now)
            raise

    def _identify(self, token: str) -> Principal:
        if self._jwt and looks_like_jwt(token):
            claims = self.tokens.verify(token)
            sub = claims.get("sub")
            name = f"jwt:{sub}" if isinstance(sub, str) and sub else "jwt"
            presence = claims.get("presence") is True
            return Principal(
                name, _patterns(claims, "groups"), _patterns(claims, "types"), presence=presence
            )
        key = self._keys.get(_digest(token))
        if key is None:
            raise AuthError("unknown API key")
        return Principal(key.name, key.groups, key.types, key.rate, key.max_body, key.presence)


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
            move_query_credential(scope)
        await self.app(scope, receive, send)


def move_query_credential(scope: Scope) -> None:
    """Move a ``key``/``access_token`` query parameter of ``scope`` into ``X-API-Key`` (see
    :class:`CredentialsFromQuery`; ``/ws`` without ASGI calls it itself)."""
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


class FailureThrottle:
    """Wrong secrets per client address, as token buckets: ``limit`` at once, then
    ``limit`` per ``window`` seconds; an empty bucket blocks its address.

    Args:
        limit: failures an address may have at once (0: no throttling).
        window: seconds for its bucket to refill completely.
        max_addresses: buckets kept; the least recently used is forgotten beyond this.
    """

    def __init__(self, limit: int, window: float, max_addresses: int = 10_000) -> None:
        self.limit = limit
        self.rate = limit / window if limit > 0 and window > 0 else 0.0
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _tokens(self, address: str, now: float) -> float:
        tokens, last = self._buckets.get(address, (float(self.limit), now))
        return min(float(self.limit), tokens + (now - last) * self.rate)

    def check(self, address: str, now: float) -> None:
        """Raise while ``address`` is blocked.

        Raises:
            LimitError: ``limit="auth_failures"``, ``value`` = seconds until it may try again.
        """
        if self.rate <= 0 or address not in self._buckets:
            return
        tokens = self._tokens(address, now)
        if tokens < 1.0:
            wait = max(1, math.ceil((1.0 - tokens) / self.rate))
            raise LimitError("auth_failures", value=wait, maximum=self.limit)

    def failed(self, address: str, now: float) -> None:
        """Count one refused credential from ``address``."""
        if self.rate <= 0:
            return
        tokens = self._tokens(address, now)
        self._buckets.pop(address, None)
        self._buckets[address] = (max(0.0, tokens - 1.0), now)
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
