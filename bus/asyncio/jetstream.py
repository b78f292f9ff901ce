"""JetStream under the NATS transport: confirmed publishes and durable subscriptions.

When the nats-server runs JetStream (``nats-server -js``, its INFO says ``jetstream``),
:class:`bus.asyncio.nats.NatsTransport` gives its link a :class:`JetStream`
(``docs/PROTOCOL.md`` 10.1):

- **The stream** (:mod:`bus.asyncio.jetstream_stream`): made or checked in the background
  (``BUSGATE``, or ``?stream=NAME`` in the URL, over ``<prefix>.evt.>``, with its replicas), so
  the link is up at once for everything else; durable subscriptions wait until it is there.
- **Confirmed publish** (:mod:`bus.asyncio.jetstream_confirms`): the event goes out with the
  header ``Nats-Msg-Id`` = its ``MID`` and the reply subject ``<prefix>._INBOX.<id>.js.<n>``,
  again until the stream answers; the PubAck becomes the broker's answer,
  ``ACK {seq, stream[, duplicate]}`` (a duplicate's ``seq`` is the first copy's), or ``NAK`` 503.
- **Durable subscription.** ``manage.subscribe`` with ``since``, ``sinceTime`` or ``fromEnd`` makes
  an ephemeral push consumer of the stream (no acks, in memory, idle heartbeats every
  :data:`HEARTBEAT` s) that starts after ``since``, at that time, or after the stream's last
  message; what it delivers reaches the client with ``SEQ`` (the stream sequence) and ``RPL``
  (the pattern), as the broker's replay does, so the client's position, its resuming after a
  reconnection and its "none twice" work unchanged. A consumer that skips a message, or goes
  silent for :data:`STALL` s (its server died: it lived there alone), is replaced by a new one
  from the last position delivered, tried again until JetStream makes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
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
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bus.asyncio.jetstream_confirms import Confirms
from bus.asyncio.jetstream_stream import (
    DEFAULT_STREAM,
    DUPLICATE_WINDOW,
    MAX_AGE,
    MAX_BYTES,
    Replicas,
    attach,
    ensure_stream,
    stream_config,
)
from bus.discovery.topics import matches
from bus.errors import ConfigError, NakError
from bus.message.message import Message

__all__ = [
    "DEFAULT_STREAM",
    "DUPLICATE_WINDOW",
    "MAX_AGE",
    "MAX_BYTES",
    "JetStream",
    "Replicas",
    "ensure_stream",
    "stream_config",
]

log = logging.getLogger("bus.asyncio.nats")

#: Seconds after which nats-server deletes a consumer whose link is gone.
CONSUMER_IDLE: Final = 30.0
#: Seconds for one JetStream API call (stream info, consumer create).
API_TIMEOUT: Final = 5.0
#: Seconds between a consumer's idle heartbeats.
HEARTBEAT: Final = 2.0
#: Seconds of silence (no event, no heartbeat) after which a consumer is taken for dead.
STALL: Final = 3 * HEARTBEAT
#: Seconds between attempts to replace a consumer: the first, doubling up to the last.
REFOLLOW_FIRST, REFOLLOW_MAX = 0.5, 5.0

Deliver = Callable[[Message], None]
Decode = Callable[[bytes], Message | None]


@dataclass
class _Follower:
    """One durable pattern's consumer on this link."""

    pattern: str
    subscription: NatsSubscription | None = None
    consumer: str = ""
    next_seq: int = 1  # the stream sequence it delivers next
    delivered: int = 0  # its consumer sequence: a gap means NATS dropped one
    stopped: bool = False
    seen: float = 0.0  # when it last delivered anything, heartbeats included (loop time)


class JetStream:
    """The JetStream side of one NATS link (see the module doc); :meth:`start` it.

    Args:
        nc: the link's NATS connection.
        stream: the stream's name.
        prefix: the bus's subject prefix.
        acks: the subject under which publish acks come back (the link subscribes to it).
        decode: a NATS payload to our message (None: undecodable, already logged).
        deliver: hands a message to the client.
        replicas: how many copies of the stream to keep (:class:`Replicas`).
        on_refused: called with JetStream's reason when it refuses the stream for good.
    """

    def __init__(
        self,
        nc: NatsClient,
        stream: str,
        prefix: str,
        acks: str,
        decode: Decode,
        deliver: Deliver,
        replicas: Replicas | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=API_TIMEOUT)
        self.stream = stream
        self.prefix = prefix
        self.acks = acks
        self.replicas = replicas or Replicas(None, False, 1)
        self.stream_replicas: int | None = None  # once the stream is there
        self.refused: str | None = None
        self._on_refused = on_refused
        self._decode = decode
        self._deliver = deliver
        loop = asyncio.get_running_loop()
        self._time = loop.time
        self.confirms = Confirms(nc, acks, prefix, deliver, loop.time)
        self._ready = asyncio.Event()
        self._followers: dict[str, _Follower] = {}
        self._wanted: set[str] = set()  # patterns subscribed durably (until unsubscribed)
        self._tasks: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        """Make or check the stream in the background (:func:`attach`)."""

        def ensure() -> Any:
            return ensure_stream(self.js, self.stream, self.prefix, self.replicas)

        self._spawn(attach(ensure, self.stream, self._attached, self._refuse))

    def _attached(self, replicas: int) -> None:
        self.stream_replicas = replicas
        self._ready.set()

    def _refuse(self, why: str) -> None:
        log.warning(
            "NATS JetStream refused stream %r (%s): confirmed publishes and durable "
            "subscriptions are not available on this link",
            self.stream,
            why,
        )
        self.refused = why
        self._ready.set()
        if self._on_refused is not None:
            self._on_refused(why)

    async def wait_ready(self, timeout: float = API_TIMEOUT) -> None:
        """Return once the stream is there.

        Raises:
            nats.errors.TimeoutError: not within ``timeout`` seconds (JetStream not answering).
            NakError: JetStream refused the stream (503).
        """
        if not self._ready.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError as exc:
                raise nats.errors.TimeoutError from exc
        if self.refused is not None:
            raise NakError(f"JetStream refused stream {self.stream!r}: {self.refused}", 503)

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- confirmed publish -------------------------------------------------------------------

    async def publish(self, subject: str, data: bytes, message: Message) -> None:
        """Publish into the stream, again until it answers; the answer comes to :meth:`acked`.

        Raises:
            ValueError: a MID that cannot be a NATS header value.
            nats.errors.Error: the link is gone.
        """
        await self.confirms.publish(subject, data, message)

    def acked(self, msg: Msg) -> Message | None:
        """The broker's answer to a confirmed publish from the stream's PubAck (or None: not
        one of ours, or one to send again)."""
        return self.confirms.acked(msg)

    # -- durable subscriptions ---------------------------------------------------------------

    async def subscribe(self, pattern: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """``manage.subscribe`` with ``since``, ``sinceTime`` or ``fromEnd`` (PROTOCOL.md 5.14):
        :meth:`follow` with its arguments checked, once the stream is there.

        Raises:
            ConfigError: a bad ``since`` or ``sinceTime``.
            NakError: JetStream refused the stream.
            nats.errors.TimeoutError: JetStream does not answer.
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
        await self.wait_ready()
        self._wanted.add(pattern)
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
        reuse = current is not None and not current.stopped and since_time is None and not last
        if reuse and current is not None and current.next_seq <= since + 1:
            return self._answer(pattern, since)
        await self.unfollow(pattern, keep_wanted=True)
        follower = self._followers[pattern] = _Follower(pattern, seen=self._time())
        config = ConsumerConfig(
            deliver_subject=self.nc.new_inbox(),
            ack_policy=AckPolicy.NONE,
            filter_subject=self._filter(pattern),
            inactive_threshold=CONSUMER_IDLE,
            idle_heartbeat=HEARTBEAT,
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
            await self.unfollow(pattern, keep_wanted=True)
            raise
        follower.consumer = info.name
        follower.seen = self._time()
        # the position the consumer starts after (nats-server says it on creation)
        start = info.delivered.stream_seq if info.delivered is not None else since
        follower.next_seq = max(follower.next_seq, start + 1)
        if self._watch is None or self._watch.done():
            self._watch = self._spawn(self._watch_followers())
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
            follower.seen = self._time()
            try:
                sequence = msg.metadata.sequence
            except (ValueError, IndexError, AttributeError):
                self._heartbeat(follower, msg)
                return
            if sequence.consumer != follower.delivered + 1:
                self._skipped(follower, sequence.consumer - follower.delivered - 1)
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

    def _heartbeat(self, follower: _Follower, msg: Msg) -> None:
        """An idle heartbeat says what the consumer sent last: more than we got is a gap."""
        last = (msg.headers or {}).get("Nats-Last-Consumer", "")
        if last.isdigit() and int(last) > follower.delivered:
            self._skipped(follower, int(last) - follower.delivered)

    def _skipped(self, follower: _Follower, count: int) -> None:
        log.warning(
            "JetStream delivery of %r skipped %d message(s): resuming from %d",
            follower.pattern,
            count,
            follower.next_seq,
        )
        self._restart(follower)

    async def _watch_followers(self) -> None:
        """Replace each consumer silent for :data:`STALL` s, while there are any."""
        while self._followers and not self._closed:
            await asyncio.sleep(HEARTBEAT)
            now = self._time()
            for follower in list(self._followers.values()):
                if not follower.stopped and follower.consumer and now - follower.seen > STALL:
                    log.warning(
                        "JetStream consumer of %r silent for %.0f s (its server may be gone): "
                        "a new one from %d",
                        follower.pattern,
                        now - follower.seen,
                        follower.next_seq,
                    )
                    self._restart(follower)

    def _restart(self, follower: _Follower) -> None:
        follower.stopped = True
        self._spawn(self._refollow(follower))

    async def _refollow(self, follower: _Follower) -> None:
        """A new consumer from where ``follower`` stopped, tried until JetStream makes it (or
        the pattern is unsubscribed, replaced, or the link goes)."""
        pattern, delay, failures = follower.pattern, REFOLLOW_FIRST, 0
        while not self._closed and pattern in self._wanted:
            current = self._followers.get(pattern)
            if current is not None and current is not follower and not current.stopped:
                return  # replaced meanwhile
            try:
                await self.follow(pattern, follower.next_seq - 1, None, False)
            except (nats.errors.Error, TimeoutError) as exc:
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "could not resume %r from JetStream yet: %s", pattern, exc)
                self._followers.setdefault(pattern, follower)  # still to be replaced
                await asyncio.sleep(delay)
                delay = min(delay * 2, REFOLLOW_MAX)
                continue
            if failures:
                log.info("%r resumed from JetStream after %d attempt(s)", pattern, failures + 1)
            return

    async def unfollow(self, pattern: str, *, keep_wanted: bool = False) -> None:
        """Stop the pattern's consumer (and delete it, if the server is there); without
        ``keep_wanted`` the pattern is no longer followed (``manage.unsubscribe``)."""
        if not keep_wanted:
            self._wanted.discard(pattern)
        follower = self._followers.pop(pattern, None)
        if follower is None:
            return
        follower.stopped = True
        if follower.subscription is not None:
            with contextlib.suppress(nats.errors.Error):
                await follower.subscription.unsubscribe()
        if follower.consumer and self.nc.is_connected:
            # in the background: a consumer whose server died answers nothing for API_TIMEOUT
            self._spawn(self._delete(follower.consumer))

    async def _delete(self, consumer: str) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await self.js.delete_consumer(self.stream, consumer)

    def close(self) -> None:
        """The link is gone: forget the consumers (nats-server deletes them when idle)."""
        self._closed = True
        self._followers.clear()
        self._wanted.clear()
        self.confirms.close()
        for task in self._tasks:
            task.cancel()
