"""What every route shares: settings, the bus bridge, metrics, authentication and rate limits.

The app keeps one :class:`Gateway` in ``app.state.gateway``; routes reach it with
:func:`gateway_of`. :meth:`Gateway.admit` is the gate every ``/v1`` route passes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from gateway.access.auth import ANONYMOUS, Authenticator, Principal, RateLimiter
from gateway.bridge import Bridge
from gateway.events.push import PushManager
from gateway.process.metrics import Metrics
from gateway.process.settings import GatewaySettings
from gateway.routes.idempotency_cache import IdempotencyCache

__all__ = ["Gateway", "gateway_of"]


@dataclass
class Gateway:
    """The shared state of one gateway app.

    Attributes:
        settings: the settings it runs with.
        bridge: its bus connection.
        metrics: counters for ``/metrics`` and ``/v1/stats``.
        authenticator: turns credentials into a principal.
        limiter: per-key token buckets.
        monotonic: the clock for durations, rate limits and the throttling of wrong secrets.
        workers: with ``--workers N``, how many of the N worker processes are ready, of how
            many (:mod:`gateway.process.readiness`; ``None``: one process).
    """

    settings: GatewaySettings
    bridge: Bridge
    metrics: Metrics = field(default_factory=Metrics)
    authenticator: Authenticator | None = None
    limiter: RateLimiter | None = None
    monotonic: Callable[[], float] = time.monotonic
    workers: Callable[[], tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        if self.authenticator is None:
            self.authenticator = Authenticator(self.settings)
        if self.limiter is None:
            self.limiter = RateLimiter(self.settings.rate_limit, self.settings.rate_burst)
        #: each Idempotency-Key's first outcome (PROTOCOL.md 9.12)
        self.idempotency = IdempotencyCache(self.settings.idempotency_window)
        #: its push subscriptions (9.13), when it runs any
        self.push: PushManager | None = None
        if self.settings.push_dir or self.settings.push:
            self.push = PushManager(
                self.settings.push, self.settings.push_dir, self.bridge, self.metrics
            )
        # No credentials to check and no rate to keep: every caller is admitted as it is,
        # without reading its headers or parsing its query string.
        self.open = not self.authenticator.enabled and self.settings.rate_limit <= 0

    def admit(self, conn: HTTPConnection) -> Principal:
        """Authenticate the caller (throttling wrong secrets by address) and take one token
        from its rate bucket.

        Args:
            conn: the HTTP request or WebSocket.

        Returns:
            The principal.

        Raises:
            AuthError: credentials missing or invalid (401).
            LimitError: rate limit exceeded, or too many wrong secrets from this address (429).
        """
        if self.open:
            return ANONYMOUS
        assert self.authenticator is not None and self.limiter is not None
        address = conn.client.host if conn.client is not None else ""
        now = self.monotonic()
        principal = self.authenticator.authenticate(
            conn.headers, conn.query_params, address=address, now=now
        )
        key = principal.name
        if principal.name == "anonymous" and conn.client is not None:
            key = f"addr:{address}"
        self.limiter.check(key, now, principal.rate)
        return principal

    closing: bool = False

    def begin_shutdown(self) -> None:
        """The server is about to stop: ``/readyz`` says 503 and SSE streams end now.

        Call it when the stop is decided (a signal), before uvicorn waits for open responses:
        SSE streams never end on their own and would hold the shutdown for its whole grace.
        """
        if self.closing:
            return
        self.closing = True
        self.bridge.hub.end_all()
        # Requests and streams still open a second before the server's grace ends are answered
        # (503, a final error line) rather than cut by the server with a traceback.
        with contextlib.suppress(RuntimeError):  # no loop: nothing is in flight either
            asyncio.get_running_loop().call_later(
                max(0.0, self.settings.shutdown_grace - 1.0),
                self.bridge.give_up,
                "the gateway is shutting down",
            )

    def stop_now(self) -> None:
        """A second Ctrl-C: answer what is in flight at once (503, a stream's final line)."""
        self.begin_shutdown()
        self.bridge.give_up("the gateway is stopping now")

    def max_body(self, principal: Principal) -> int:
        """The largest body this principal may send."""
        return principal.max_body or self.settings.max_body


def gateway_of(conn: HTTPConnection) -> Gateway:
    """The :class:`Gateway` of the app serving ``conn``."""
    gateway: Gateway = conn.app.state.gateway
    return gateway
