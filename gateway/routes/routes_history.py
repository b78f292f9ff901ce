"""``GET /v1/history/{type}``: the journaled events of a type or pattern (PROTOCOL.md 9.10).

Read from the broker's journal (``manage.history``, 5.15) or, on ``nats://``, from the
JetStream stream, so every gateway of a bus gives the same answer::

    GET /v1/history/sensor.temp?limit=10        the newest 10, oldest first
    GET /v1/history/sensor.*?since=1042         forward from after sequence number 1042
    GET /v1/history/sensor.*?since=15m          forward from a time
    GET /v1/history/sensor.temp?before=1042     the newest before 1042 (paging back)
    GET /v1/history/sensor.*?last=1             the last event of each type (the current state)

The answer is ``{"events": [{"seq", "type", "time", "header", "payload"}, ...], "seq", "more",
"next"}``: ``seq`` is the journal's last sequence number when it was read (``GET
/v1/subscribe?since=<seq>`` goes on live from there, nothing missed), ``next`` the query of
the next page when ``more``. A type the bus keeps none of is 409 ``not_journaled`` naming the
journal's filter, never an empty list.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bus.asyncio.history import HistoryEvent, HistoryPage
from bus.discovery.topics import check_pattern
from bus.errors import ConfigError, DecodeError
from bus.journal.times import SINCE_HINT, parse_since
from gateway.bridge import render_response
from gateway.state import gateway_of

__all__ = ["history_endpoint", "render_page"]

#: Events a page holds unless ``limit`` says otherwise, and at most.
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


async def history_endpoint(request: Request) -> Response:
    """Handle ``GET /v1/history/{type}``."""
    gateway = gateway_of(request)
    pattern = request.path_params["type"]
    try:
        check_pattern(pattern)
    except ConfigError as exc:
        raise DecodeError(str(exc)) from exc
    principal = gateway.admit(request)
    principal.check_type(pattern)
    query = request.query_params
    limit = _integer(query.get("limit"), "limit", DEFAULT_LIMIT, MAX_LIMIT) or 0
    before = _integer(query.get("before"), "before", None, None)
    since, since_time = _since(query.get("since"))
    last = (query.get("last") or "").strip().lower() in ("1", "true", "yes")
    gateway.bridge.check_connected()
    client = gateway.bridge.client
    assert client is not None
    page = await client.history(
        pattern,
        limit=limit,
        since=since,
        since_time=since_time,
        before=before,
        last=last,
        timeout=gateway.settings.default_timeout,
    )
    return Response(render_page(page), media_type="application/json")


def _integer(text: str | None, name: str, default: int | None, top: int | None) -> int | None:
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or (top is not None and value > top):
        bound = f"0..{top}" if top is not None else ">= 0"
        raise DecodeError(f"{name}={text[:40]!r}: expected an integer {bound}")
    return value


def _since(text: str | None) -> tuple[int | None, float | None]:
    if text is None or text == "":
        return None, None
    try:
        return parse_since(text, time.time())
    except ValueError as exc:
        raise DecodeError(f"since={text.strip()[:40]!r}: {SINCE_HINT}") from exc


def render_event(event: HistoryEvent) -> str:
    """One event: ``{"seq", "type", "time", "header", "payload"}``."""
    message = event.message
    head = f'{{"seq":{event.seq},"type":{json.dumps(message.grp or "")},"time":{event.time!r},'
    return head + render_response(message)[1:].decode()


def render_page(page: HistoryPage) -> bytes:
    """The JSON answer of ``GET /v1/history/{type}``."""
    rest: dict[str, Any] = {"seq": page.seq, "more": page.more, "next": page.next}
    if page.filter is not None:  # the journal keeps only some of these types
        rest["journal_filter"] = page.filter
    events = ",".join(render_event(event) for event in page.events)
    return f'{{"events":[{events}],{json.dumps(rest)[1:]}'.encode()
