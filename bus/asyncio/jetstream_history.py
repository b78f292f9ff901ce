"""History from the JetStream stream on NATS: ``manage.history`` answered by the transport
(PROTOCOL.md 5.15 and 10.1).

The stream holds the bus's events (``<prefix>.evt.>``); a page of a pattern is read through
short-lived pull consumers of the stream filtered on the pattern's subject (a major type
``sensor`` is two: ``sensor`` and ``sensor.>``, read apart and merged by sequence number):

- forward (``since``, ``sinceTime``): a consumer that starts there, asked once for ``limit + 1``
  messages (the one more says whether ``more``);
- the newest ``limit`` before a sequence number: a consumer's ``num_pending`` counts the
  matching messages from its start on, so the start that leaves ``limit`` of them before
  ``before`` is found by doubling windows back from it, then halving between the last two;
  the page is read from there.

The answer is the broker's (``events``, ``seqs``, ``times``, ``seq``, ``more``, ``next``), so
the client reads both alike. Consumers are deleted after use (and are in memory, deleted by
the server after :data:`bus.asyncio.jetstream.CONSUMER_IDLE` anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from collections.abc import Mapping
from typing import Any, Final

import nats.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from bus.asyncio.jetstream import JetStream
from bus.discovery.topics import check_pattern
from bus.errors import ConfigError, NakError

__all__ = ["history", "keeps_events", "read_history", "subjects_of"]

#: Events a page holds at most.
MAX_LIMIT: Final = 1000
#: Types whose last event one read gives at most.
LAST_TYPES: Final = 100_000
#: Seconds a consumer of a history read outlives its reader at most.
_IDLE: Final = 30.0


#: RCD of the NAK for history or last values on a bus that keeps no events.
RCD_NOT_KEPT: Final = 409


def keeps_events(jetstream: JetStream | None, what: str = "history and last values") -> None:
    """Refuse ``what`` (history and last values, durable subscriptions) on NATS without
    JetStream (no stream keeps events).

    Raises:
        NakError: RCD 409.
    """
    if jetstream is None:
        raise NakError(
            f"NATS without JetStream keeps no events: start nats-server with -js for {what}",
            RCD_NOT_KEPT,
        )


async def history(jetstream: JetStream, args: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """``manage.history`` on a NATS link with JetStream: :func:`read_history` of its stream."""
    return await read_history(jetstream.js, jetstream.stream, jetstream.prefix, args, timeout)


def subjects_of(prefix: str, pattern: str) -> list[str]:
    """The stream subjects of a pattern (a major type is the type and everything under it)."""
    tokens = check_pattern(pattern)
    subject = f"{prefix}.evt.{pattern}"
    if len(tokens) == 1 and tokens[0] not in ("*", ">"):
        return [subject, f"{subject}.>"]
    return [subject]


class _Reader:
    """Pull consumers of one stream, each read once."""

    def __init__(self, js: JetStreamContext, stream: str, timeout: float) -> None:
        self.js = js
        self.nc = js._nc
        self.stream = stream
        self.timeout = timeout

    async def _consumer(
        self,
        subject: str,
        start: int | None = None,
        start_time: float | None = None,
        last: bool = False,
    ) -> tuple[str, int]:
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            filter_subject=subject,
            inactive_threshold=_IDLE,
            mem_storage=True,
            description="busgate history read",
        )
        if last:
            config.deliver_policy = DeliverPolicy.LAST_PER_SUBJECT
        elif start_time is not None:
            config.deliver_policy = DeliverPolicy.BY_START_TIME
            config.opt_start_time = datetime.datetime.fromtimestamp(start_time, datetime.UTC)
        else:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = max(1, start or 1)
        info = await self.js.add_consumer(self.stream, config)
        return info.name, int(info.num_pending or 0)

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(nats.errors.Error):
            await self.js.delete_consumer(self.stream, name)

    async def count(self, subject: str, start: int) -> int:
        """Messages of ``subject`` from stream sequence ``start`` on."""
        name, pending = await self._consumer(subject, start)
        await self._delete(name)
        return pending

    async def read(
        self,
        subject: str,
        count: int,
        start: int | None = None,
        start_time: float | None = None,
        last: bool = False,
    ) -> list[Msg]:
        """Up to ``count`` messages of ``subject`` from ``start`` (or ``start_time``) on;
        ``last``: the last message of each subject."""
        name, pending = await self._consumer(subject, start, start_time, last)
        try:
            return await self._fetch(name, min(count, pending)) if count and pending else []
        finally:
            await self._delete(name)

    async def _fetch(self, consumer: str, count: int) -> list[Msg]:
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        got: list[Msg] = []
        try:
            request = json.dumps({"batch": count, "no_wait": True}).encode()
            subject = f"{self.js._prefix}.CONSUMER.MSG.NEXT.{self.stream}.{consumer}"
            await self.nc.publish(subject, request, reply=inbox)
            async with asyncio.timeout(self.timeout):
                while len(got) < count:
                    msg = await sub.next_msg(timeout=None)
                    if (msg.headers or {}).get("Status"):
                        break  # 404 / 408: no more messages now
                    got.append(msg)
        except TimeoutError as exc:
            raise nats.errors.TimeoutError from exc
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        return got

    async def newest(
        self, subject: str, limit: int, before: int, first: int
    ) -> tuple[list[Msg], bool]:
        """The newest ``limit`` messages of ``subject`` before sequence ``before``, and whether
        the stream may hold older ones (they were not all counted)."""
        if limit <= 0 or before <= first:
            return [], before > first
        after = await self.count(subject, before)  # those at or after ``before``
        window, short = 4 * limit, before  # fewer than ``limit`` from ``short`` on
        while True:  # windows back from ``before``, each twice the one before
            start = max(first, before - window)
            found = await self.count(subject, start) - after
            if found >= limit or start == first:
                break
            short, window = start, window * 2
        while found > 2 * limit and short - start > 1:  # halving: about limit to 2 * limit
            middle = (start + short) // 2
            counted = await self.count(subject, middle) - after
            if counted >= limit:
                start, found = middle, counted
            else:
                short = middle
        msgs = await self.read(subject, found, start=start)
        kept = [m for m in msgs if m.metadata.sequence.stream < before]
        return kept[-limit:], start > first or len(kept) > limit


async def read_history(
    js: JetStreamContext,
    stream: str,
    prefix: str,
    args: Mapping[str, Any],
    timeout: float,
    max_bytes: int = 512 * 1024,
) -> dict[str, Any]:
    """The ``manage.history`` answer for ``args`` from the stream (PROTOCOL.md 5.15).

    Raises:
        ConfigError: a bad argument. nats.js.errors.APIError: JetStream refused.
        nats.errors.TimeoutError: no answer.
    """
    pattern, limit, since, since_time, before = _args(args)
    reader = _Reader(js, stream, timeout)
    state = (await js.stream_info(stream)).state
    end, first = int(state.last_seq), max(1, int(state.first_seq))
    subjects = subjects_of(prefix, pattern)
    if args.get("last") is True:  # the last event of each type (JetStream's last per subject)
        found: list[Msg] = []
        for subject in subjects:
            found += await reader.read(subject, LAST_TYPES, last=True)
        found.sort(key=lambda m: m.metadata.sequence.stream)
        kept = found[-limit:] if limit else []
        answer = _answer(kept, limit, end, True, False, max_bytes)
        answer["more"] = len(found) > limit
        answer.pop("next", None)
        return answer
    forward = since is not None or since_time is not None
    msgs: list[Msg] = []
    older = False  # backward: the stream may hold older events of the pattern
    for subject in subjects:
        if forward:
            start = None if since_time is not None else (since or 0) + 1
            msgs += await reader.read(subject, limit + 1, start=start, start_time=since_time)
        else:
            upto = end + 1 if before is None else min(before, end + 1)
            found, maybe = await reader.newest(subject, limit, upto, first)
            msgs += found
            older = older or maybe
    msgs.sort(key=lambda m: m.metadata.sequence.stream)
    if forward and before is not None:
        msgs = [m for m in msgs if m.metadata.sequence.stream < before]
    return _answer(msgs, limit, end, forward, older, max_bytes)


def _answer(
    msgs: list[Msg], limit: int, end: int, forward: bool, older: bool, max_bytes: int
) -> dict[str, Any]:
    more = len(msgs) > limit or older
    msgs = msgs[:limit] if forward else msgs[-limit:] if limit else []
    size = 0
    kept: list[Msg] = []
    for msg in msgs if forward else reversed(msgs):
        size += len(msg.data)
        if size > max_bytes and kept:
            more = True
            break
        kept.append(msg)
    if not forward:
        kept.reverse()
    answer: dict[str, Any] = {
        "events": [msg.data for msg in kept],
        "seqs": [msg.metadata.sequence.stream for msg in kept],
        "times": [msg.metadata.timestamp.timestamp() for msg in kept],
        "seq": end,
        "more": more,
    }
    if more and kept:
        seq = kept[-1 if forward else 0].metadata.sequence.stream
        answer["next"] = {"since": seq} if forward else {"before": seq}
    return answer


def _args(args: Mapping[str, Any]) -> tuple[str, int, int | None, float | None, int | None]:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError("missing argument 'pattern'")
    check_pattern(pattern)
    limit = args.get("limit", 100)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT:
        raise ConfigError(f"limit must be an integer in 0..{MAX_LIMIT}")
    values: list[int | None] = []
    for name in ("since", "before"):
        value = args.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{name} must be a sequence number (an integer >= 0)")
        if value is not None and value < 0:
            raise ConfigError(f"{name} must be a sequence number (an integer >= 0)")
        values.append(value)
    since_time = args.get("sinceTime")
    if since_time is not None:
        if isinstance(since_time, bool) or not isinstance(since_time, int | float):
            raise ConfigError("sinceTime must be epoch seconds")
        since_time = float(since_time)
    return pattern, limit, values[0], since_time, values[1]
