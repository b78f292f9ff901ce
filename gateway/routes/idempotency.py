"""``Idempotency-Key`` on ``POST /v1/publish``, ``/v1/request`` and the typed routes
(PROTOCOL.md 9.12, :mod:`bus.idempotency`).

A repeat of a key (same caller, same route) within ``idempotency_window`` gets the first outcome
again, with ``Idempotent-Replayed: true``; a repeat with a different body is ``409 conflict``.
Two layers make it hold on any gateway:

- this gateway remembers each key's body digest and outcome
  (:class:`gateway.routes.idempotency_cache.IdempotencyCache`), and a
  repeat that comes while the first is still in flight waits for its outcome;
- the message sent carries the MID :func:`bus.idempotency.derive_mid` makes from the key, so a
  repeat through another gateway is the same message to the bus: a publish is confirmed (the
  broker's or JetStream's de-duplication journals it once and answers with the first ``seq``;
  when it was a repeat, the first event is read back from the journal to compare bodies), and a
  request is run once by a busgate service, which answers a repeat with its first answers
  (:mod:`bus.asyncio.idempotent`) or 409.

Kept: an ACK, a NAK (the service's outcome), a publish taken by the bus. Not kept (a repeat
tries again): no responders, a timeout, the bus unavailable, a refused body.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from starlette.responses import Response
from starlette.types import Send

from bus.errors import BusError, ConfigError, NakError
from bus.frame.enums import Encoding
from bus.frame.frame import DataFrame
from bus.idempotency import CONFLICT, check_key, derive_mid, digest
from bus.message.message import Message, encode_message, read_message
from gateway.bridge import render_response
from gateway.process.metrics import Outcome as MetricsOutcome
from gateway.routes.errors import ErrorCode, error_body, http_error
from gateway.routes.idempotency_cache import ENTRIES, IdempotencyCache, Outcome

if TYPE_CHECKING:  # pragma: no cover
    from gateway.state import Gateway

__all__ = ["ENTRIES", "IdempotencyCache", "Outcome", "publish_once", "request_once"]

_JSON: Final = (b"content-type", b"application/json")
_REPLAYED: Final = (b"idempotent-replayed", b"true")


def _conflict(key: str) -> Outcome:
    text = f"Idempotency-Key {key!r} was used with a different body (or route) within the window"
    body = json.dumps(error_body(ErrorCode.CONFLICT, text)).encode()
    return Outcome(409, (_JSON,), body)


def _error(exc: BusError, response: Message | None = None) -> Outcome:
    rendered = json.loads(render_response(response)) if response is not None else None
    error = http_error(exc, rendered)
    headers = tuple((k.lower().encode(), v.encode()) for k, v in error.headers.items())
    return Outcome(error.status, (_JSON, *headers), json.dumps(error.body()).encode())


async def _send(send: Send, outcome: Outcome, replayed: bool) -> None:
    headers = [(b"content-length", b"%d" % len(outcome.body)), *outcome.headers]
    if replayed:
        headers.append(_REPLAYED)
    await send({"type": "http.response.start", "status": outcome.status, "headers": headers})
    await send({"type": "http.response.body", "body": outcome.body})


def _respond(outcome: Outcome, replayed: bool) -> Response:
    headers = {k.decode(): v.decode() for k, v in outcome.headers if k != b"content-type"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(outcome.body, outcome.status, headers, media_type="application/json")


async def request_once(
    gateway: Gateway,
    send: Send,
    message: Message,
    *,
    key: str,
    caller: str,
    route: str,
    timeout: float,
    trace: str,
) -> None:
    """Answer a request (one answer) with an ``Idempotency-Key``: see the module doc."""
    check_key(key)
    message.mid = derive_mid(caller, route, key)
    wanted = digest(message.payload_data())
    cache, cache_key = gateway.idempotency, (caller, route, key)
    entry, repeat = cache.begin(cache_key, wanted)
    if repeat is None:
        await _send(send, _conflict(key), False)
        return
    if repeat:
        await entry.done.wait()
        if entry.outcome is not None:
            await _send(send, entry.outcome, True)
            return
        entry, _ = cache.begin(cache_key, wanted)  # the first was not answered: try again
    group = message.grp or ""
    started = gateway.monotonic()
    extra = ((b"x-busgate-mid", (message.mid or "").encode()), (b"traceparent", trace.encode()))
    gateway.bridge.begin()
    try:
        ack = await gateway.bridge.request(message, timeout)
    except NakError as exc:
        now = gateway.monotonic()
        gateway.metrics.observe(group, MetricsOutcome.NAK, now - started, now)
        if exc.rcd == 409 and exc.msg == CONFLICT:  # another gateway's first: another body
            outcome = _conflict(key)
        else:
            answer = exc.response
            outcome = _error(exc, answer if isinstance(answer, Message) else None)
            outcome = Outcome(outcome.status, (*outcome.headers, *extra), outcome.body)
        cache.settle(cache_key, entry, outcome)
        await _send(send, outcome, False)
        return
    except BaseException:
        cache.settle(cache_key, entry, None)  # not answered: a repeat tries again
        raise
    finally:
        gateway.bridge.end()
    now = gateway.monotonic()
    gateway.metrics.observe(group, MetricsOutcome.ACK, now - started, now)
    outcome = Outcome(200, (_JSON, *extra), render_response(ack))
    cache.settle(cache_key, entry, outcome)
    await _send(send, outcome, False)


async def publish_once(
    gateway: Gateway,
    type_: str,
    payload: DataFrame,
    *,
    key: str,
    caller: str,
    confirm: bool,
    timeout: float | None = None,
) -> Response:
    """Answer a publish with an ``Idempotency-Key``: see the module doc (``timeout``: how long
    a confirmation may take, default the settings')."""
    check_key(key)
    route = f"publish {type_}"
    event = Message.event(type_, payload)
    event.enc = Encoding.JSON  # as every publish of the gateway (PROTOCOL.md 9.5)
    event.mid = derive_mid(caller, route, key)
    wanted = digest(read_message(encode_message(event)).payload_data())
    cache, cache_key = gateway.idempotency, (caller, route, key)
    entry, repeat = cache.begin(cache_key, wanted)
    if repeat is None:
        return _respond(_conflict(key), False)
    if repeat:
        await entry.done.wait()
        if entry.outcome is not None:
            return _respond(entry.outcome, True)
        entry, _ = cache.begin(cache_key, wanted)
    try:
        outcome = await _publish(gateway, event, key, wanted, confirm, timeout)
    except BaseException:
        cache.settle(cache_key, entry, None)
        raise
    cache.settle(cache_key, entry, outcome)
    return _respond(outcome, False)


async def _publish(
    gateway: Gateway, event: Message, key: str, wanted: str, confirm: bool, timeout: float | None
) -> Outcome:
    client = gateway.bridge.client
    gateway.bridge.check_connected()
    assert client is not None
    type_, mid = event.grp or "", event.mid or ""
    timeout = gateway.settings.default_timeout if timeout is None else timeout
    answer: dict[str, Any] = {"type": type_, "mid": mid}
    try:
        seq, duplicate = await client.publish_confirmed(event, timeout=timeout)
    except ConfigError:  # NATS without JetStream: nothing confirms, nothing de-duplicates
        if confirm:
            raise
        await client.publish_event(event)
        seq, duplicate = None, False
    except NakError as exc:  # routed but not journaled: delivered, once on this gateway only
        if confirm or exc.rcd != 503:
            raise
        seq, duplicate = None, False
    gateway.metrics.event_published()
    if duplicate and seq is not None and not await _same_event(client, type_, seq, wanted):
        return _conflict(key)
    if confirm:
        answer["seq"] = seq
        return Outcome(200, (_JSON,), json.dumps(answer).encode())
    return Outcome(202, (_JSON,), json.dumps(answer).encode())


async def _same_event(client: Any, type_: str, seq: int, wanted: str) -> bool:
    """Whether the event the bus holds at ``seq`` (the first publish of this key, made through
    another gateway or before a restart) has this body."""
    try:
        page = await client.history(type_, since=seq - 1, before=seq + 1, limit=1)
    except BusError:
        return True  # it cannot be read back: the key's MID decides, as on the bus
    return not page.events or digest(page.events[0].message.payload_data()) == wanted
