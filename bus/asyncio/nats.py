"""NATS as the bus's transport: :class:`NatsTransport` (``docs/PROTOCOL.md`` section 10).

:func:`bus.asyncio.client.connect` uses it for ``nats://`` URLs, so the client API, services, the
gateway and the CLI run unchanged on a NATS server or cluster. Each message travels as our own
encoded message (a binary data frame, or JSON text when ``ENC=JSON``), byte for byte, as the
NATS payload; only the subject and the reply subject are NATS's.

The subject mapping is :mod:`bus.discovery.nats_subjects` (pure functions); this driver only
publishes
and subscribes. Also:

- ``manage.status`` is answered by the transport itself with what the NATS connection knows
  (server, version, this link's subscriptions and counters): there is no central post office.
- On a server with JetStream, confirmed publishes and durable subscriptions go through a
  stream (:mod:`bus.asyncio.jetstream`, PROTOCOL.md 10.1); without it a confirmed publish is
  published and answered ``NAK`` 503, and a durable subscription is live only.

The client reconnects by itself (``docs/PROTOCOL.md`` 5.8), so the NATS connection is opened
without NATS's own reconnection: a lost server ends this transport, pending requests fail with
:class:`~bus.errors.DisconnectedError` and the client restores its subscriptions on a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from bus.asyncio.jetstream import DEFAULT_STREAM, JetStream, Replicas
from bus.asyncio.jetstream_history import history, keeps_events
from bus.asyncio.nats_settle import drain, settle, unsubscribe
from bus.asyncio.nats_status import LinkFacts, link_status
from bus.asyncio.transport import LostHandler, MessageHandler, SessionInfo, Transport
from bus.discovery.nats_subjects import (
    NO_RESPONDERS_STATUS,
    event_subjects,
    group_subjects,
    inbox_subject,
    no_responders,
    office_subject,
    route,
    split_url,
    url_prefix,
    url_stream,
)
from bus.discovery.topics import INBOX_PREFIX, matches
from bus.errors import (
    AuthError,
    BusError,
    ConfigError,
    ConnectError,
    DisconnectedError,
    LimitError,
    NakError,
    RefusedError,
    RequestTimeout,
)
from bus.frame.codec import Limits
from bus.frame.enums import CloseReason, Encoding
from bus.frame.frame import DataFrame
from bus.message.message import Message, MessageType, decode_message, encode_message, new_id

__all__ = ["NatsTransport", "settle"]

log = logging.getLogger("bus.asyncio.nats")

_EVENTS: Final = frozenset({MessageType.EVT.value, MessageType.HBT.value})


def _answer(typ: MessageType, args: Mapping[str, Any], msg: str | None = None) -> Message:
    frame = DataFrame()
    frame.add("MID", new_id())
    frame.add("TYP", typ.value)
    frame.add("ENC", Encoding.FRAM.value)
    if msg:
        frame.add("MSG", msg)
    frame.add("PLD", DataFrame(dict(args)))
    return Message(frame)


Callback = Callable[[Msg], Awaitable[None]]


class NatsTransport(Transport):
    """One link to the bus through a NATS server (see the module doc for the subjects).

    Args:
        url: ``nats://[user:password@]host[:port]`` (default port 4222); several servers of one
            cluster may be given separated by commas (:mod:`bus.link.bus_url`).
        name: the post office name (default ``anonymous``); also the NATS user when the URL
            has none and a ``secret`` is given.
        secret: the NATS password for ``name`` (None: the URL's, or no authentication).
        inbox: the reply group (``_INBOX.<id>``); its subject is subscribed from ``open`` on.
        prefix: first token of the bus's subjects (default: the URL's ``?prefix=``, else
            ``bus``), so several buses can share one NATS cluster.
        stream: the JetStream stream of the bus's events (default: the URL's ``?stream=``,
            else ``BUSGATE``); used when the server has JetStream.
        connect_timeout: seconds to connect.
        ping_interval: seconds between NATS pings; two unanswered pings close the link.
        known: the servers of the cluster learnt by the links before this one (``nats://
            host:port`` each; the servers each NATS server names in its INFO), shared by the
            transports of one client and tried after the URL's: a client given one server of
            a cluster moves to another when it goes, as NATS's own clients do.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str | None,
        secret: str | None,
        inbox: str,
        prefix: str | None = None,
        stream: str | None = None,
        connect_timeout: float = 5.0,
        ping_interval: float = 5.0,
        known: list[str] | None = None,
    ) -> None:
        self.url = url
        self.servers, user, password = split_url(url)
        self.known = known if known is not None else []
        self.name = name or user or "anonymous"
        self.user = user or (name if secret is not None else None)
        self.password = password if password is not None else secret
        self.inbox = inbox
        self.prefix = prefix or url_prefix(url)
        self.stream = stream or url_stream(url) or DEFAULT_STREAM
        Replicas.of(url, {})  # a bad ?replicas= (or variable) is the caller's error at once
        self.jetstream: JetStream | None = None  # when the server has JetStream
        self.connect_timeout = connect_timeout
        self.ping_interval = ping_interval
        self.info: SessionInfo | None = None
        self._nc: NatsClient | None = None
        self._on_message: MessageHandler = _ignore
        self._on_lost: LostHandler = _ignore
        self._closed: DisconnectedError | None = None
        self._connect_error: Exception | None = None
        self._opening = False
        self._limits = Limits()
        self._max_payload = 1024 * 1024
        self._patterns: dict[str, list[NatsSubscription]] = {}
        self._groups: dict[str, list[NatsSubscription]] = {}

    # -- opening -----------------------------------------------------------------------------

    async def open(self, on_message: MessageHandler, on_lost: LostHandler) -> SessionInfo:
        """Connect and subscribe the inbox and the post office; see :meth:`Transport.open`."""
        self._on_message, self._on_lost = on_message, on_lost
        self._connect_error, self._opening = None, True
        try:
            nc = self._nc = NatsClient()
            await asyncio.wait_for(self._connect(nc), self.connect_timeout + 1)
            self._opening = False
            responses = inbox_subject(self.inbox, self.prefix)
            await nc.subscribe(responses, cb=self._received)
            await nc.subscribe(f"{responses}.>", cb=self._status)
            await nc.subscribe(office_subject(self.name, self.prefix), "po", cb=self._received)
            await settle(nc, max(1, round(self.connect_timeout)))
            self._learn(nc)
            self.alternatives = len({*self.servers, *self.known}) > 1
            self._start_jetstream(nc, responses)
        except nats.errors.AuthorizationError as exc:
            await self._abort()
            raise AuthError(f"NATS refused {self.name!r}: {exc}") from exc
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            await self._abort()
            if "authorization" in str(exc).lower():
                raise AuthError(f"NATS refused {self.name!r}: {exc}") from exc
            servers = ",".join(self.servers)
            why = self._connect_error if isinstance(exc, nats.errors.NoServersError) else exc
            raise ConnectError(
                f"cannot connect to NATS at {servers}: {_describe(why) or 'timeout'}"
            ) from exc
        except BaseException:  # cancelled (a client closed while reconnecting)
            await self._abort()
            raise
        self._max_payload = nc.max_payload
        self._limits = Limits(max_size=max(self._max_payload, 1024 * 1024))
        self.info = SessionInfo(
            name=self.name,
            inbox=self.inbox,
            max_message_size=self._max_payload,
            ping_interval=self.ping_interval,
        )
        return self.info

    def _start_jetstream(self, nc: NatsClient, responses: str) -> None:
        """Use JetStream when the server has it (PROTOCOL.md 10.1): the stream is made or
        checked in the background, so this link is up at once for everything that does not
        need it (requests must not wait for a JetStream that elects a leader)."""
        if not nc._server_info.get("jetstream"):
            return
        replicas = Replicas.of(self.url, nc._server_info)
        self.jetstream = JetStream(
            nc,
            self.stream,
            self.prefix,
            f"{responses}.js",
            self._decode,
            self._on_message,
            replicas,
            self._jetstream_refused,
        )
        self.confirms = self.streams = True
        self.jetstream.start()

    def _jetstream_refused(self, why: str) -> None:
        self.confirms = self.streams = False  # as on a server without JetStream

    def _stream(self) -> JetStream | None:
        """The JetStream side, unless JetStream refused the stream."""
        jetstream = self.jetstream
        return jetstream if jetstream is not None and jetstream.refused is None else None

    def _learn(self, nc: NatsClient) -> None:
        """Remember the cluster's servers this server named, for the next link."""
        for uri in nc.discovered_servers:
            server = f"nats://{uri.netloc.rpartition('@')[2]}"
            if server not in self.servers and server not in self.known:
                self.known.append(server)

    async def _connect(self, nc: NatsClient) -> None:
        await nc.connect(
            servers=[*self.servers, *(s for s in self.known if s not in self.servers)],
            name=self.name,
            user=self.user,
            password=self.password,
            allow_reconnect=False,  # the bus client reconnects and restores (PROTOCOL.md 5.8)
            # nats-py tries each server up to 60 times, 2 s apart, even without reconnecting:
            # a refused connection must be reported at once (the client's backoff retries).
            max_reconnect_attempts=1,
            reconnect_time_wait=0,
            connect_timeout=max(1, round(self.connect_timeout)),
            ping_interval=max(1, round(self.ping_interval)),
            max_outstanding_pings=2,
            error_cb=self._error,
            disconnected_cb=self._disconnected,
            closed_cb=self._disconnected,
        )

    # -- receiving ---------------------------------------------------------------------------

    async def _received(self, msg: Msg) -> None:
        self._deliver(msg.data)

    def _deliver(self, raw: bytes) -> None:
        message = self._decode(raw)
        if message is not None:
            self._on_message(message)

    def _decode(self, raw: bytes) -> Message | None:
        try:
            return decode_message(raw, self._limits)
        except BusError as exc:
            log.warning("undecodable message from NATS dropped: %s", exc)
            return None

    async def _status(self, msg: Msg) -> None:
        if self.jetstream is not None and msg.subject.startswith(self.jetstream.acks + "."):
            answer = self.jetstream.acked(msg)
            if answer is not None:
                self._on_message(answer)
            return
        status = (msg.headers or {}).get("Status")
        if status != NO_RESPONDERS_STATUS:
            return
        try:
            nak = no_responders(msg.subject, self.inbox, self.prefix)
        except ValueError:
            return
        if nak.grp == self.inbox:
            self._on_message(nak)
            return
        with contextlib.suppress(BusError):  # a forwarded request: the NAK goes to its RPY
            await self.send(nak)

    def _event_callback(self, pattern: str) -> Callback:
        start = len(self.prefix) + 5  # "bus.evt."

        async def received(msg: Msg) -> None:
            # NATS sends one copy per matching subscription; we deliver it once per link
            # (PROTOCOL.md 5.3), through the first of our patterns that matches.
            event_type = msg.subject[start:]
            for mine in self._patterns:
                if matches(mine, event_type):
                    if mine == pattern:
                        self._deliver(msg.data)
                    return

        return received

    # -- sending -----------------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        """Publish one message on its subject; see :meth:`Transport.send`."""
        nc = self._live()
        where = route(message, self.inbox, self.prefix)
        if where is None:
            self._refuse(message)
            return
        data = encode_message(message)
        if len(data) > self._max_payload:
            raise LimitError("max_message_size", len(data), self._max_payload)
        confirm = message.typ == MessageType.EVT.value and message.rpy == self.inbox
        try:
            jetstream = self._stream() if confirm else None
            if jetstream is not None:
                await jetstream.publish(where.subject, data, message)
                return
            await nc.publish(where.subject, data, reply=where.reply or "")
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError) as exc:
            raise self._closed or DisconnectedError(str(exc), CloseReason.SOCKET_ERROR) from exc
        if confirm:  # asked for a confirmation this server cannot give (the broker's 503)
            text = "published but not stored: the NATS server has no JetStream (nats-server -js)"
            nak = message.nak(text, 503, src="central")
            asyncio.get_running_loop().call_soon(self._on_message, nak)

    def _refuse(self, message: Message) -> None:
        """A request that cannot be routed gets the broker's NAK 400 (PROTOCOL.md 5.1 rule 5)."""
        if message.typ != MessageType.RQS.value or message.rpy != self.inbox:
            log.info("message without a valid GRP or TGT dropped")
            return
        nak = message.nak("no valid GRP or TGT to route to", 400)
        nak.src = "central"
        asyncio.get_running_loop().call_soon(self._on_message, nak)

    @property
    def nats(self) -> NatsClient | None:
        """The link's NATS connection (micro discovery answers on it, PROTOCOL.md 10.3)."""
        return self._nc

    def _live(self) -> NatsClient:
        if self._closed is not None:
            raise self._closed
        if self._nc is None or not self._nc.is_connected:
            raise DisconnectedError("not connected to NATS", CloseReason.SOCKET_ERROR)
        return self._nc

    # -- control commands --------------------------------------------------------------------

    async def call(self, cmd: str, args: Mapping[str, Any], timeout: float) -> Message:
        """Subscribe, consume, unsubscribe, leave or status on NATS; see :meth:`Transport.call`.

        ``manage.status`` is answered here, from the NATS connection (:meth:`_status_answer`).

        Raises:
            NakError: any other command (RCD 404: there is no central post office on NATS), or
                a malformed pattern or group (RCD 400).
            RefusedError: consuming an inbox group.
        """
        nc = self._live()
        if cmd == "manage.status":
            return _answer(MessageType.ACK, self._status_answer(nc))
        if cmd == "manage.flush":  # nats-server has processed everything sent before (PING)
            await settle(nc, max(1, math.ceil(timeout)))
            return _answer(MessageType.ACK, {"seq": 0})
        try:
            jetstream = self._stream()
            if cmd == "manage.history" or args.get("last") is True:  # 5.15: from the stream
                keeps_events(jetstream)
            if cmd == "manage.subscribe" and "since" in args:  # resuming needs a stream (10.1)
                keeps_events(jetstream, "durable subscriptions (resume, since)")
            if cmd == "manage.history":
                assert jetstream is not None
                return _answer(MessageType.ACK, await history(jetstream, args, timeout))
            if cmd == "manage.subscribe":
                key = str(args.get("pattern", args.get("type", "")))
                await self._subscribe(nc, key)
                if "since" in args and jetstream is not None:  # durable (5.14, 10.1)
                    answer = await jetstream.subscribe(key, args)
                    return _answer(MessageType.ACK, answer)
            elif cmd == "manage.unsubscribe":
                key = str(args.get("pattern", args.get("type", "")))
                await unsubscribe(self._patterns.pop(key, []))
                if self.jetstream is not None:
                    await self.jetstream.unfollow(key)
            elif cmd == "manage.consume":
                key = str(args.get("group", ""))
                await self._consume(nc, key)
            elif cmd == "manage.leave":
                key = str(args.get("group", ""))
                await drain(nc, self._groups.pop(key, []), max(1, math.ceil(timeout)))
            else:
                raise NakError(f"unknown command {cmd!r} (no central post office on NATS)", 404)
            # the server has the subscription before we answer
            await settle(nc, max(1, math.ceil(timeout)))
        except ConfigError as exc:
            raise NakError(str(exc), 400) from exc
        except nats.js.errors.APIError as exc:
            raise NakError(f"JetStream: {exc.description or exc}", 503) from exc
        except nats.errors.TimeoutError as exc:
            raise RequestTimeout("central", timeout) from exc
        except (nats.errors.ConnectionClosedError, nats.errors.Error) as exc:
            raise self._closed or DisconnectedError(str(exc), CloseReason.SOCKET_ERROR) from exc
        name = "pattern" if cmd.endswith("subscribe") else "group"
        return _answer(MessageType.ACK, {name: key})

    def _status_answer(self, nc: NatsClient) -> dict[str, Any]:
        jetstream = self._stream()
        return link_status(
            nc,
            LinkFacts(
                name=self.name,
                inbox=self.inbox,
                prefix=self.prefix,
                max_payload=self._max_payload,
                stream=self.stream if jetstream is not None else "",
                stream_replicas=jetstream.stream_replicas if jetstream is not None else None,
                patterns=sorted(self._patterns),
                groups=sorted(self._groups),
            ),
        )

    async def _subscribe(self, nc: NatsClient, pattern: str) -> None:
        if pattern in self._patterns:
            return
        subjects = event_subjects(pattern, self.prefix)
        self._patterns[pattern] = []
        callback = self._event_callback(pattern)
        for subject in subjects:
            self._patterns[pattern].append(await nc.subscribe(subject, cb=callback))

    async def _consume(self, nc: NatsClient, group: str) -> None:
        if group.startswith(INBOX_PREFIX):
            raise RefusedError(f"{group!r} is an inbox group")
        if group in self._groups:
            return
        queue_subject, all_subject = group_subjects(group, self.prefix)
        self._groups[group] = [
            await nc.subscribe(queue_subject, group, cb=self._received),
            await nc.subscribe(all_subject, cb=self._received),
        ]

    # -- closing -----------------------------------------------------------------------------

    async def _error(self, exc: Exception) -> None:
        if self._opening:
            self._connect_error = exc  # why the connection failed, for open()'s error
        if isinstance(exc, nats.errors.SlowConsumerError):  # NATS dropped messages: say so
            log.warning("NATS: %s", exc)
        else:
            log.debug("NATS: %s", exc)

    async def _disconnected(self) -> None:
        if self._nc is not None:
            self._learn(self._nc)
        self._lost(CloseReason.SOCKET_ERROR, "the NATS connection was lost")

    def _lost(self, reason: CloseReason, detail: str) -> None:
        if self._closed is not None:
            return
        error = DisconnectedError(detail, reason)
        self._closed = error
        if self.jetstream is not None:
            self.jetstream.close()
        if self.info is not None:
            self._on_lost(error)

    async def _abort(self) -> None:
        self._closed = self._closed or DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()

    async def close(self) -> None:
        """Close the NATS connection; see :meth:`Transport.close`."""
        self._lost(CloseReason.CLIENT_CLOSING, "closed by this client")
        if self._nc is not None and not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await self._nc.close()


def _ignore(*_: object) -> None:
    return None


def _describe(exc: BaseException | None) -> str:
    """An error in words: ``connection refused (127.0.0.1:4222)`` rather than its repr."""
    if exc is None:
        return ""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)
