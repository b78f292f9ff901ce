"""JetStream under the NATS transport: confirmed publishes and durable subscriptions.

When the nats-server runs JetStream (``nats-server -js``, its INFO says ``jetstream``),
:class:`bus.asyncio.nats.NatsTransport` attaches a :class:`JetStream` to its link
(``docs/PROTOCOL.md`` 10.1):

- **The stream.** :func:`ensure_stream` makes the stream (``BUSGATE``, or ``?stream=NAME`` in
  the URL) over the bus's event subjects, ``<prefix>.evt.>``, when it is missing: events and
  heartbeats only (no requests, responses or mail); file storage, :data:`MAX_AGE`,
  :data:`MAX_BYTES` (the oldest go first), a :data:`DUPLICATE_WINDOW` of 120 s as the broker's.
  A stream that exists is used as it is (an operator may tune it with ``nats stream edit``);
  one that lacks the subject gets it added.
- **Confirmed publish.** The event goes out with the header ``Nats-Msg-Id`` = its ``MID`` and the
  reply subject ``<prefix>._INBOX.<id>.js.<n>``; the stream's PubAck there becomes the broker's
  answer, ``ACK {seq, stream[, duplicate]}`` (a duplicate's ``seq`` is the first copy's), or
  ``NAK`` 503.
- **Durable subscription.** ``manage.subscribe`` with ``since``, ``sinceTime`` or ``fromEnd`` makes
  an ephemeral push consumer of the stream (no acks, in memory) that starts after ``since``, at
  that time, or after the stream's last message; what it delivers reaches the client with
  ``SEQ`` (the stream sequence) and ``RPL`` (the pattern), as the broker's replay does, so the
  client's position, its resuming after a reconnection and its "none twice" work unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext

from bus.errors import ConfigError
from bus.message import Message
from bus.topics import matches

__all__ = [
    "DEFAULT_STREAM",
    "DUPLICATE_WINDOW",
    "MAX_AGE",
    "MAX_BYTES",
    "JetStream",
    "ensure_stream",
    "stream_config",
]

log = logging.getLogger("bus.asyncio.nats")

#: The stream's name unless the URL names another (``nats://host:4222?stream=NAME``).
DEFAULT_STREAM: Final = "BUSGATE"
#: Seconds an event stays in a stream busgate makes (7 days).
MAX_AGE: Final = 7 * 24 * 3600.0
#: Bytes a stream busgate makes holds before the oldest events go (1 GiB).
MAX_BYTES: Final = 1 << 30
#: Seconds within which a confirmed publish sent again (same MID) is stored once, as the broker.
DUPLICATE_WINDOW: Final = 120.0
#: Seconds after which nats-server deletes a consumer whose link is gone.
CONSUMER_IDLE: Final = 30.0
#: Seconds for one JetStream API call (stream info, consumer create).
API_TIMEOUT: Final = 5.0

Deliver = Callable[[Message], None]
Decode = Callable[[bytes], Message | None]


def stream_config(name: str, prefix: str) -> StreamConfig:
    """The stream busgate makes: the bus's events only, with the limits above."""
    return StreamConfig(
        name=name,
        subjects=[f"{prefix}.evt.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=MAX_AGE,
        max_bytes=MAX_BYTES,
        duplicate_window=DUPLICATE_WINDOW,
        description="busgate events (docs/PROTOCOL.md 10.1)",
    )


async def ensure_stream(js: JetStreamContext, name: str, prefix: str) -> None:
    """Make the stream if it is missing, add the bus's subject to one that lacks it; idempotent.

    Raises:
        nats.js.errors.APIError: JetStream refused (no JetStream for this account, subjects
            that overlap another stream's, ...).
        nats.errors.TimeoutError: no answer.
    """
    config = stream_config(name, prefix)
    try:
        info = await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        try:
            await js.add_stream(config)
            return
        except nats.js.errors.BadRequestError:  # another link made it meanwhile
            info = await js.stream_info(name)
    subjects = list(info.config.subjects or [])
    wanted = f"{prefix}.evt.>"
    if wanted not in subjects:
        info.config.subjects = [*subjects, wanted]
        await js.update_stream(info.config)


@dataclass
class _Follower:
    """One durable pattern's consumer on this link."""

    pattern: str
    subscription: NatsSubscription | None = None
    consumer: str = ""
    next_seq: int = 1  # the stream sequence it delivers next
    delivered: int = 0  # its consumer sequence: a gap means NATS dropped one
    stopped: bool = False


class JetStream:
    """The JetStream side of one NATS link (see the module doc).

    Args:
        nc: the link's NATS connection.
        stream: the stream's name.
        prefix: the bus's subject prefix.
        acks: the subject under which publish acks come back (the link subscribes to it).
        decode: a NATS payload to our message (None: undecodable, already logged).
        deliver: hands a message to the client.
    """

    def __init__(
        self,
        nc: NatsClient,
        stream: str,
        prefix: str,
        acks: str,
        decode: Decode,
        deliver: Deliver,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=API_TIMEOUT)
        self.stream = stream
        self.prefix = prefix
        self.acks = acks
        self._decode = decode
        self._deliver = deliver
        self._waiting: dict[str, Message] = {}  # ack subject token -> the confirmed publish
        self._numbers = itertools.count(1)
        self._followers: dict[str, _Follower] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def attach(
        cls, nc: NatsClient, stream: str, prefix: str, acks: str, decode: Decode, deliver: Deliver
    ) -> JetStream | None:
        """The JetStream side of a link whose server has JetStream, once the stream exists.

        Returns:
            None when JetStream refuses (no JetStream for this account, a stream whose subjects
            overlap another's): logged, and the link goes on without it.

        Raises:
            nats.errors.TimeoutError: no answer (a server still starting): the connection
                fails and the client tries again.
        """
        jetstream = cls(nc, stream, prefix, acks, decode, deliver)
        try:
            await ensure_stream(jetstream.js, stream, prefix)
        except nats.js.errors.APIError as exc:
            log.warning(
                "NATS JetStream refused stream %r (%s): confirmed publishes and durable "
                "subscriptions are not available on this link",
                stream,
                exc.description or exc,
            )
            return None
        return jetstream

    # -- confirmed publish -------------------------------------------------------------------

    async def publish(self, subject: str, data: bytes, message: Message) -> None:
        """Publish into the stream; the answer comes to :meth:`acked`.

        Raises:
            ValueError: a MID that cannot be a NATS header value.
            nats.errors.Error: the link is gone.
        """
        mid = message.mid or ""
        if not mid or any(char in mid for char in "\r\n"):
            raise ValueError("a confirmed publish needs a MID without line breaks")
        token = str(next(self._numbers))
        self._waiting[token] = Message({"MID": mid, "RPY": message.rpy, "ENC": message.enc.value})
        try:
            await self.nc.publish(
                subject, data, reply=f"{self.acks}.{token}", headers={"Nats-Msg-Id": mid}
            )
        except BaseException:
            self._waiting.pop(token, None)
            raise

    def acked(self, msg: Msg) -> Message | None:
        """The broker's answer to a confirmed publish from the stream's PubAck (or None: not
        one of ours)."""
        request = self._waiting.pop(msg.subject[len(self.acks) + 1 :], None)
        if request is None:
            return None
        if (msg.headers or {}).get("Status") == "503":  # no responders: no stream takes it
            text = f"published but not stored: no JetStream stream holds {self.prefix}.evt.>"
            return request.nak(text, 503, src="central")
        try:
            answer = json.loads(msg.data)
            if "error" in answer:
                error = answer["error"]
                text = error.get("description", "error") if isinstance(error, dict) else error
                return request.nak(f"JetStream did not store it: {text}", 503, src="central")
            args: dict[str, Any] = {"seq": int(answer["seq"]), "stream": str(answer["stream"])}
        except (ValueError, KeyError, TypeError) as exc:
            return request.nak(f"unreadable JetStream ack: {exc}", 502, src="central")
        if answer.get("duplicate"):
            args["duplicate"] = True
        return request.ack(args, src="central")

    # -- durable subscriptions ---------------------------------------------------------------

    async def subscribe(self, pattern: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """``manage.subscribe`` with ``since``, ``sinceTime`` or ``fromEnd`` (PROTOCOL.md 5.14):
        :meth:`follow` with its arguments checked.

        Raises:
            ConfigError: a bad ``since`` or ``sinceTime``.
        """
        since, since_time = args.get("since", 0), args.get("sinceTime")
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ConfigError("since must be a sequence number >= 0")
        if since_time is not None:
            if isinstance(since_time, bool) or not isinstance(since_time, int | float):
                raise ConfigError("sinceTime must be epoch seconds")
            if not math.isfinite(since_time) or since_time < 0:
                raise ConfigError("sinceTime must be epoch seconds >= 0")
            since_time = float(since_time)
        from_end, last = bool(args.get("fromEnd")), args.get("last") is True
        return await self.follow(pattern, since, since_time, from_end, last)

    async def follow(
        self, pattern: str, since: int, since_time: float | None, from_end: bool, last: bool = False
    ) -> dict[str, Any]:
        """Deliver the stream's events of ``pattern`` from a position on, then live ones.

        A consumer this link already has for the pattern is kept when it is not past the
        position asked for (the client skips what it has); otherwise it is replaced. ``last``:
        the last message of each subject first (PROTOCOL.md 5.15), then live ones.

        Returns:
            The ``manage.subscribe`` answer: ``{pattern, seq, stream, more: false}``, ``seq``
            the position the delivery starts after.

        Raises:
            nats.js.errors.APIError: JetStream refused. nats.errors.TimeoutError: no answer.
        """
        if from_end:
            stream = await self.js.stream_info(self.stream)
            since = stream.state.last_seq
        current = self._followers.get(pattern)
        reuse = current is not None and since_time is None and not last
        if reuse and current is not None and current.next_seq <= since + 1:
            return self._answer(pattern, since)
        await self.unfollow(pattern)
        follower = self._followers[pattern] = _Follower(pattern)
        config = ConsumerConfig(
            deliver_subject=self.nc.new_inbox(),
            ack_policy=AckPolicy.NONE,
            filter_subject=self._filter(pattern),
            inactive_threshold=CONSUMER_IDLE,
            mem_storage=True,
            description=f"busgate durable subscription {pattern}",
        )
        if last:
            config.deliver_policy = DeliverPolicy.LAST_PER_SUBJECT
        elif since_time is not None:
            config.deliver_policy = DeliverPolicy.BY_START_TIME
            config.opt_start_time = datetime.datetime.fromtimestamp(since_time, datetime.UTC)
        else:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = since + 1
        assert config.deliver_subject is not None
        follower.subscription = await self.nc.subscribe(
            config.deliver_subject, cb=self._callback(follower)
        )
        try:
            info = await self.js.add_consumer(self.stream, config)
        except BaseException:
            await self.unfollow(pattern)
            raise
        follower.consumer = info.name
        # the position the consumer starts after (nats-server says it on creation)
        start = info.delivered.stream_seq if info.delivered is not None else since
        follower.next_seq = max(follower.next_seq, start + 1)
        return self._answer(pattern, start)

    def _answer(self, pattern: str, seq: int) -> dict[str, Any]:
        return {"pattern": pattern, "seq": seq, "stream": self.stream, "more": False}

    def _filter(self, pattern: str) -> str:
        # One subject per consumer (nats-server 2.9): a major type ``sensor`` (two subjects)
        # reads every event and keeps its own (the callback matches the pattern).
        tokens = pattern.split(".")
        if len(tokens) == 1 and pattern not in ("*", ">"):
            return f"{self.prefix}.evt.>"
        return f"{self.prefix}.evt.{pattern}"

    def _callback(self, follower: _Follower) -> Callable[[Msg], Any]:
        start = len(self.prefix) + 5  # "bus.evt."

        async def received(msg: Msg) -> None:
            if follower.stopped:
                return  # replaced: its successor delivers from the right place
            try:
                sequence = msg.metadata.sequence
            except (ValueError, IndexError, AttributeError):
                return  # not a stream message (a status)
            if sequence.consumer != follower.delivered + 1:
                log.warning(
                    "JetStream delivery of %r skipped %d message(s): resuming from %d",
                    follower.pattern,
                    sequence.consumer - follower.delivered - 1,
                    follower.next_seq,
                )
                self._restart(follower)
                return
            follower.delivered = sequence.consumer
            follower.next_seq = sequence.stream + 1
            if not matches(follower.pattern, msg.subject[start:]):
                return
            message = self._decode(msg.data)
            if message is None:
                return
            message.seq = sequence.stream
            message.rpl = follower.pattern
            self._deliver(message)

        return received

    def _restart(self, follower: _Follower) -> None:
        follower.stopped = True
        task = asyncio.get_running_loop().create_task(self._refollow(follower))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refollow(self, follower: _Follower) -> None:
        if self._followers.get(follower.pattern) is not follower:
            return  # replaced or unsubscribed meanwhile
        await self.unfollow(follower.pattern)
        try:
            await self.follow(follower.pattern, follower.next_seq - 1, None, False)
        except nats.errors.Error as exc:  # the link went: the client resumes on the next one
            log.info("could not resume %r from JetStream: %s", follower.pattern, exc)

    async def unfollow(self, pattern: str) -> None:
        """Stop the pattern's consumer (and delete it, if the server is there)."""
        follower = self._followers.pop(pattern, None)
        if follower is None:
            return
        follower.stopped = True
        if follower.subscription is not None:
            with contextlib.suppress(nats.errors.Error):
                await follower.subscription.unsubscribe()
        if follower.consumer and self.nc.is_connected:
            with contextlib.suppress(nats.errors.Error):
                await self.js.delete_consumer(self.stream, follower.consumer)

    def close(self) -> None:
        """The link is gone: forget the consumers (nats-server deletes them when idle)."""
        self._followers.clear()
        self._waiting.clear()
        for task in self._tasks:
            task.cancel()
