"""``POST /v1/publish/{type}`` and ``GET /v1/subscribe?types=...`` (Server-Sent Events).

A publication is an EVT message (ENC=JSON) whose GRP is the ``major.minor`` type; the answer is
``202 {"type", "mid"}`` once the bus client has taken it.

A subscription is an SSE stream: ``event: message``, ``id: <epoch>-<seq>``, ``data`` the event
as ``{"type", "header", "payload"}``; a ``: keepalive`` comment every ``keepalive`` seconds. A
client that reconnects with ``Last-Event-ID`` (or ``?last_event_id=``) first gets what it missed,
as far as the gateway's event log still holds it (:mod:`gateway.hub`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from bus.broker.routing import check_pattern
from bus.errors import ConfigError, DecodeError
from gateway.hub import Listener
from gateway.routes_request import read_body, read_payload
from gateway.state import Gateway, gateway_of

__all__ = ["publish_endpoint", "subscribe_endpoint"]

#: A ``major.minor`` event type (two to eight dot-separated tokens).
TYPE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){1,7}")
MAX_PATTERNS = 32


async def publish_endpoint(request: Request) -> Response:
    """Handle ``POST /v1/publish/{type}``."""
    gateway = gateway_of(request)
    type_ = request.path_params["type"]
    if not TYPE_NAME.fullmatch(type_):
        raise DecodeError(f"bad event type {type_[:64]!r}: expected major.minor")
    principal = gateway.admit(request)
    principal.check_type(type_)
    payload = read_payload(await read_body(request, gateway.max_body(principal)), need_cmd=False)
    mid = await gateway.bridge.publish(type_, payload)
    gateway.metrics.published += 1
    return JSONResponse({"type": type_, "mid": mid}, status_code=202)


def parse_types(text: str | None) -> list[str]:
    """Split and check the ``types`` parameter.

    Raises:
        DecodeError: missing, too many, or a malformed pattern.
    """
    if not text:
        raise DecodeError("types is required: a comma-separated list of event types")
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    if not patterns or len(patterns) > MAX_PATTERNS:
        raise DecodeError(f"types must name 1..{MAX_PATTERNS} patterns")
    for pattern in patterns:
        try:
            check_pattern(pattern)
        except ConfigError as exc:
            raise DecodeError(str(exc)) from exc
    return list(dict.fromkeys(patterns))


async def subscribe_endpoint(request: Request) -> Response:
    """Handle ``GET /v1/subscribe``."""
    gateway = gateway_of(request)
    patterns = parse_types(request.query_params.get("types"))
    principal = gateway.admit(request)
    for pattern in patterns:
        principal.check_type(pattern)
    last_id = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    gateway.bridge.check_connected()
    listener = await gateway.bridge.hub.open(patterns, last_id)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _events(gateway, listener), media_type="text/event-stream", headers=headers
    )


_OVERFLOW = (
    'event: error\ndata: {"code":"overflow","message":"events came faster than this client '
    'read them; reconnect with Last-Event-ID"}\n\n'
)


async def _events(gateway: Gateway, listener: Listener) -> AsyncIterator[str]:
    hub = gateway.bridge.hub
    gateway.metrics.stream_opened()
    try:
        yield "retry: 2000\n: subscribed\n\n"
        while not (listener.overflowed or listener.ended):
            try:
                event = await asyncio.wait_for(listener.queue.get(), gateway.settings.keepalive)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if event is None:
                break
            yield f"id: {hub.event_id(event)}\nevent: message\ndata: {event.data}\n\n"
        if listener.overflowed:
            yield _OVERFLOW
        else:
            yield ": the gateway is shutting down\n\n"
    finally:
        gateway.metrics.stream_closed()
        hub.close(listener)
