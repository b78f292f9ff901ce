"""The recorder's durable pull consumer: :class:`StreamConsumer` (PROTOCOL.md 10.2).

One consumer per journal name, ``busgate-<prefix>-<name>``, on the bus's events
(``<prefix>.evt.>``), acknowledged with ``AckAll``, replicated as the stream is (nats-server's
default for a durable consumer), so it survives a lost link and a lost node. It is made anew
whenever a recorder becomes active, starting right after the journal's tail: the journal, not
the consumer, says where recording resumes (a standby's copy on another disk may be behind the
consumer's acknowledgements, and deliveries the dead recorder never acknowledged would
otherwise wait ``ack_wait`` before coming again).

It pulls through an inbox of its own (``$JS.API.CONSUMER.MSG.NEXT``, up to two requests of a
batch each in flight, so the next batch is on its way while one is journaled) instead of
nats-py's ``fetch``, which waits for each message in a task of its own: some 150 us a message,
too slow to keep up with a busy bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

__all__ = ["ACK_WAIT", "MAX_ACK_PENDING", "Start", "StreamConsumer", "consumer_name"]

log = logging.getLogger("bus.asyncio.nats")

#: Seconds JetStream waits for an acknowledgement before it delivers a message again.
ACK_WAIT: Final = 30.0
#: Messages delivered and not yet acknowledged at most (then JetStream waits for acks).
MAX_ACK_PENDING: Final = 50_000
#: Seconds a pull request waits on the server for messages before it expires.
PULL_EXPIRES: Final = 2.0
#: Pull requests in flight at most.
PULLS: Final = 2


def consumer_name(prefix: str, name: str) -> str:
    """The durable consumer of the journal ``name`` of the bus ``prefix``."""
    return f"busgate-{prefix}-{name}"


@dataclass(frozen=True)
class Start:
    """Where a consumer begins: after stream sequence ``after``, or at epoch second ``time``."""

    after: int = 0
    time: float | None = None


class StreamConsumer:
    """The durable pull consumer (see the module doc).

    Args:
        nc: the NATS connection.
        js: its JetStream context.
        stream: the event stream's name.
        prefix: the bus's subject prefix.
        name: the journal's name.
    """

    def __init__(
        self, nc: NatsClient, js: JetStreamContext, stream: str, prefix: str, name: str
    ) -> None:
        self.nc = nc
        self.js = js
        self.stream = stream
        self.subject = f"{prefix}.evt.>"
        self.durable = consumer_name(prefix, name)
        self.lost = False  # the server lost the consumer: restart it from the journal
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{self.durable}"
        self._inbox = ""
        self._sub: NatsSubscription | None = None
        self._ready: deque[Msg] = deque()
        self._pulls: deque[list[float]] = deque()  # [messages still due, local deadline]
        self._arrived = asyncio.Event()

    def config(self, start: Start) -> ConsumerConfig:
        """The consumer's configuration, starting at ``start``."""
        config = ConsumerConfig(
            durable_name=self.durable,
            description="busgate journal recorder (docs/PROTOCOL.md 10.2)",
            filter_subject=self.subject,
            ack_policy=AckPolicy.ALL,
            ack_wait=ACK_WAIT,
            max_ack_pending=MAX_ACK_PENDING,
            max_deliver=-1,
        )
        if start.time is not None:
            config.deliver_policy = DeliverPolicy.BY_START_TIME
            config.opt_start_time = datetime.datetime.fromtimestamp(start.time, datetime.UTC)
        elif start.after > 0:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = start.after + 1
        else:
            config.deliver_policy = DeliverPolicy.ALL
        return config

    async def restart(self, start: Start, tail: int | None = None) -> None:
        """Make the consumer anew from ``start`` (dropping what the old one had delivered).

        Args:
            start: where it begins.
            tail: the journal's last stream sequence, when the journal was just opened: a
                stream that no longer holds the events after it is reported.

        Raises:
            nats.js.errors.APIError: JetStream refused.
            nats.errors.TimeoutError: no answer.
        """
        await self.close()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.js.delete_consumer(self.stream, self.durable)
        if tail:
            state = (await self.js.stream_info(self.stream)).state
            if state.first_seq > tail + 1 and state.messages:
                log.warning(
                    "stream %s no longer holds events %d..%d (its limits dropped them while no "
                    "recorder was active): this journal misses them",
                    self.stream,
                    tail + 1,
                    state.first_seq - 1,
                )
        await self.js.add_consumer(self.stream, self.config(start))
        self._inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(self._inbox, cb=self._received)
        self.lost = False

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """The next messages (at most ``batch``, oldest first), or none within ``timeout`` s.

        A consumer the server no longer has sets :attr:`lost`; a link that is down gives none
        (nats-py reconnects by itself, and pulls it lost expire here).
        """
        if self._sub is None:
            self.lost = True
            return []
        await self._pull(batch)
        if not self._ready and not self.lost:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), max(0.05, timeout))
        ready = self._ready
        taken = [ready.popleft() for _ in range(min(batch, len(ready)))]
        await self._pull(batch)  # the next batch comes while this one is journaled
        return taken

    async def _pull(self, batch: int) -> None:
        now = time.monotonic()
        pulls = self._pulls
        while pulls and pulls[0][1] < now:  # lost with a link, or its end never came
            pulls.popleft()
        due = sum(pull[0] for pull in pulls) + len(self._ready)
        if len(pulls) >= PULLS or due >= PULLS * batch or self.lost:
            return
        request = {"batch": batch, "expires": int(PULL_EXPIRES * 1e9)}
        try:
            await self.nc.publish(self._next, json.dumps(request).encode(), reply=self._inbox)
        except (nats.errors.Error, OSError) as exc:
            log.debug("JetStream pull of %s: %s", self.durable, exc)
            await asyncio.sleep(0.2)  # the link is down: do not spin
            return
        pulls.append([batch, now + PULL_EXPIRES + 1.0])

    async def _received(self, msg: Msg) -> None:
        status = msg.headers.get("Status") if msg.headers else None
        pulls = self._pulls
        if status is None:
            self._ready.append(msg)
            if pulls:
                pulls[0][0] -= 1
                if pulls[0][0] <= 0:
                    pulls.popleft()
        elif status in ("404", "408"):  # the oldest pull ended (no messages, expired)
            if pulls:
                pulls.popleft()
        elif status == "409":  # consumer deleted, leadership changed, ...: pulls are gone
            description = (msg.headers or {}).get("Description", "")
            if "deleted" in description.lower():
                self.lost = True
            pulls.clear()
        else:
            return  # a heartbeat (100)
        self._arrived.set()

    async def close(self) -> None:
        """Stop pulling (the consumer stays on the server for the next recorder)."""
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None
        self._ready.clear()
        self._pulls.clear()
