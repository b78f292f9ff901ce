"""Fetching the JWKS (``jwt_jwks``): from an identity provider's URL or a file, kept fresh.

The keys live in a sans-I/O :class:`gateway.access.tokens.KeySet`; this module is its driver:

- at start the document is loaded once (a failure is logged, the gateway still starts and
  refuses asymmetric tokens until a fetch works);
- a token whose ``kid`` is unknown waits for one fetch, so keys rotated at the provider work at
  their first use; fetches are at least ``jwt_jwks_retry`` (10 s) apart, so made-up ``kid``
  values cannot turn the gateway into a flood against the provider;
- a document older than ``jwt_jwks_ttl`` (300 s) is fetched again in the background at the next
  token, so removed keys stop working within that time; the old keys serve meanwhile.

:class:`JwksMiddleware` does the waiting before a request reaches its route, so the routes'
authentication (``Gateway.admit``) stays synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from bus.errors import AuthError, ConfigError
from gateway.access.tokens import ASYMMETRIC, MAX_JWKS, KeySet, looks_like_jwt, unverified_header

__all__ = ["FETCH_TIMEOUT", "JwksMiddleware", "JwksRefresher", "read_jwks"]

log = logging.getLogger("busgate.gateway.jwks")

#: Seconds one fetch of the JWKS may take.
FETCH_TIMEOUT = 5.0


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _fetch_url(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read(MAX_JWKS + 1)
    except urllib.error.HTTPError as exc:
        # An error status: its body holds the socket, which stayed open until the collector
        # found the exception (a ResourceWarning then, in whatever ran at that moment).
        exc.close()
        raise
    if len(data) > MAX_JWKS:
        raise ConfigError(f"the JWKS at {url} is larger than {MAX_JWKS} bytes")
    return data


def _read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read(MAX_JWKS + 1)
    if len(data) > MAX_JWKS:
        raise ConfigError(f"the JWKS file {path} is larger than {MAX_JWKS} bytes")
    return data


async def read_jwks(location: str, timeout: float = FETCH_TIMEOUT) -> bytes:
    """The JWKS document's bytes, from an ``http(s)://`` URL or a file path.

    Raises:
        ConfigError: it cannot be read (the cause chained).
    """
    path = location.removeprefix("file://")
    try:
        if _is_url(location):
            return await asyncio.wait_for(
                asyncio.to_thread(_fetch_url, location, timeout), timeout + 1.0
            )
        return await asyncio.to_thread(_read_file, path)
    except ConfigError:
        raise
    except (OSError, ValueError, TimeoutError, http.client.HTTPException) as exc:
        raise ConfigError(f"cannot read the JWKS from {location}: {exc}") from exc


class JwksRefresher:
    """Keeps a :class:`KeySet` loaded from ``location``; one fetch at a time.

    Args:
        keyset: the keys to keep fresh.
        location: URL or file of the JWKS.
        clock: monotonic seconds (a test may pass its own).
    """

    def __init__(
        self, keyset: KeySet, location: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.keyset = keyset
        self.location = location
        self.clock = clock
        self.fetches = 0
        self._inflight: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Load the document once (failures are logged; asymmetric tokens wait for a fetch)."""
        await self.refresh()
        if self.keyset.error is not None:
            log.warning("JWKS not loaded: %s", self.keyset.error)

    async def stop(self) -> None:
        """Cancel a fetch in flight."""
        task, self._inflight = self._inflight, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refresh(self) -> None:
        """Fetch and load the document, or join the fetch in flight."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.get_running_loop().create_task(self._fetch())
        await asyncio.shield(self._inflight)

    async def _fetch(self) -> None:
        self.fetches += 1
        try:
            document = await read_jwks(self.location)
            count = self.keyset.load(document, self.clock())
        except ConfigError as exc:
            log.warning("JWKS fetch failed (old keys kept): %s", exc)
            self.keyset.failed(str(exc), self.clock())
            return
        log.info("JWKS loaded from %s: %d signing keys %s", self.location, count, self.keyset.kids)

    async def ensure(self, kid: str | None) -> None:
        """Before a token with this ``kid`` is checked: fetch if the key is unknown (and a fetch
        is allowed now), or start a background fetch if the document is stale."""
        now = self.clock()
        inflight = self._inflight is not None and not self._inflight.done()
        if self.keyset.has(kid):
            if self.keyset.stale(now) and self.keyset.may_fetch(now) and not inflight:
                self._inflight = asyncio.get_running_loop().create_task(self._fetch())
            return
        if inflight or self.keyset.may_fetch(now):
            await self.refresh()


class JwksMiddleware:
    """ASGI middleware: a request bearing an asymmetric JWT waits until its key is known.

    It reads the credential where ``CredentialsFromQuery`` (which runs first) leaves it and only
    looks at the token's header; checking the token stays with the routes.

    Args:
        app: the ASGI app to call.
        refresher: the JWKS driver.
    """

    def __init__(self, app: ASGIApp, refresher: JwksRefresher) -> None:
        self.app = app
        self.refresher = refresher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            found, kid = _asymmetric_kid(scope)
            if found:
                await self.refresher.ensure(kid)
        await self.app(scope, receive, send)


def _asymmetric_kid(scope: Scope) -> tuple[bool, str | None]:
    """Whether the scope bears an asymmetric JWT, and its ``kid`` (``None``: it names none)."""
    token = ""
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key":
            token = value.decode("latin-1").strip()
            break
        if name == b"authorization":
            scheme, _, rest = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                token = rest.strip()
    if not looks_like_jwt(token):
        return False, None
    try:
        header = unverified_header(token)
    except AuthError:
        return False, None  # refused by the route, with the reason
    kid = header.get("kid")
    if header.get("alg") not in ASYMMETRIC or not (kid is None or isinstance(kid, str)):
        return False, None
    return True, kid
