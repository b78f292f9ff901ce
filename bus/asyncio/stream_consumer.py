"""The recorder's durable pull consumer: :class:`StreamConsumer` (PROTOCOL.md 10.2).

One consumer per journal name, ``busgate-<prefix>-<name>``, on the bus's events
(``<prefix>.evt.>``), acknowledged with ``AckAll``, replicated as the stream is (nats-server's
default for a durable consumer), so it survives a lost link and a lost node. It is made anew
whenever a recorder becomes active, starting right after the journal's tail: the journal, not
the consumer, says where recording resumes (a standby's copy on another disk may be behind the
consumer's acknowledgements, and deliveries the dead recorder never acknowledged would
otherwise wait ``ack_wait`` before coming again).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

__all__ = ["ACK_WAIT", "MAX_ACK_PENDING", "Start", "StreamConsumer", "consumer_name"]

log = logging.getLogger("bus.asyncio.nats")

#: Seconds JetStream waits for an acknowledgement before it delivers a message again.
ACK_WAIT: Final = 30.0
#: Messages delivered and not yet acknowledged at most (then JetStream waits for acks).
MAX_ACK_PENDING: Final = 50_000


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
        js: the JetStream context.
        stream: the event stream's name.
        prefix: the bus's subject prefix.
        name: the journal's name.
    """

    def __init__(self, js: JetStreamContext, stream: str, prefix: str, name: str) -> None:
        self.js = js
        self.stream = stream
        self.subject = f"{prefix}.evt.>"
        self.durable = consumer_name(prefix, name)
        self.lost = False  # the server lost the consumer: restart it from the journal
        self._sub: JetStreamContext.PullSubscription | None = None

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
        self._sub = await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        self.lost = False

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """The next messages (oldest first), or none within ``timeout`` seconds.

        A consumer the server no longer has sets :attr:`lost`; a link that is down gives none
        (nats-py reconnects by itself).
        """
        if self._sub is None:
            self.lost = True
            return []
        try:
            return await self._sub.fetch(batch, timeout=max(0.05, timeout))
        except nats.errors.TimeoutError:
            return []
        except nats.js.errors.NotFoundError:
            self.lost = True
            return []
        except nats.js.errors.APIError as exc:
            if exc.code in (404, 409):  # consumer deleted, leadership changed
                self.lost = True
                return []
            log.warning("JetStream fetch of %s: %s", self.durable, exc)
        except (nats.errors.Error, OSError) as exc:
            log.debug("JetStream fetch of %s: %s", self.durable, exc)
        await asyncio.sleep(min(timeout, 0.2))  # the link is down: do not spin
        return []

    async def close(self) -> None:
        """Stop fetching (the consumer stays on the server for the next recorder)."""
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None
