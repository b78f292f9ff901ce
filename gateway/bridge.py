"""The gateway's side of the bus: one client, kept connected, and the HTTP <-> message mapping.

:class:`Bridge` owns the gateway's bus client. It connects in the background and keeps trying
while the bus is away (``/readyz`` says 503 meanwhile); once connected, the client itself
reconnects after a drop. Every operation the routes need goes through it: a request (one answer
or a stream of them), a publication, the shared SSE subscriptions
(:class:`gateway.events.hub.EventHub`)
and the service directory. It counts in-flight requests so that shutdown can drain them.

A request travels as an RQS with ``ENC=JSON`` (the body's JSON becomes the payload frame by
Kestrel's mapping, ``bus.frame.jsonmap``); its ACK/NAK comes back as JSON text made by the same
mapping,
wrapped as ``{"header": {...}, "payload": {...}}`` (:func:`render_response`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from bus.asyncio.loop import until_tick
from bus.discovery.topics import INBOX_PREFIX
from bus.errors import BusError, DisconnectedError, LinkError, PublishFailedError, RequestTimeout
from bus.frame.enums import CloseReason, Encoding
from bus.frame.frame import DataFrame
from bus.frame.jsonmap import to_json
from bus.masking import mask_url, mask_urls_in
from bus.message.message import Message
from gateway.events.hub import EventHub
from gateway.events.presence import Presence
from gateway.micro import MicroDirectory
from gateway.process.settings import GatewaySettings

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client
    from bus.asyncio.directory import ServiceDirectory
    from bus.asyncio.requests import Rest

__all__ = ["Bridge", "render_header", "render_response"]

log = logging.getLogger("busgate.gateway")

#: Seconds a request waits for a bus link that was lost that long ago at most (on a NATS
#: cluster it is moving to another node, PROTOCOL.md 10.4) before it is refused with 503.
FAILOVER_GRACE: Final = 1.0

Connector = Callable[[GatewaySettings], Awaitable["Client"]]


def render_header(message: Message) -> str:
    """The header fields of a message (all but PLD) as Kestrel JSON text.

    A GRP that is this gateway's own inbox (``_INBOX.``: where the answer came to) is left
    out: it says nothing to the HTTP caller about the service.
    """
    header = message.frame.copy()  # shallow: the fields are not checked again
    header.remove("PLD")
    grp = header.get("GRP")
    if isinstance(grp, str) and grp.startswith(INBOX_PREFIX):
        header.remove("GRP")
    return to_json(header)


def _without_inbox(header: bytes, grp: str | None) -> bytes | None:
    """The header JSON without its ``"GRP":"_INBOX..."`` member; None when it cannot be cut."""
    if grp is None or not grp.startswith(INBOX_PREFIX):
        return header
    member = b'"GRP":"' + grp.encode("latin-1") + b'"'
    at = header.find(member)
    if at < 0:
        return None
    end = at + len(member)
    if header[end : end + 1] == b",":
        return header[:at] + header[end + 1 :]
    if header[at - 1 : at] == b",":
        return header[: at - 1] + header[end:]
    return header[:at] + header[end:]


def render_response(message: Message) -> bytes:
    """A response as the gateway answers it: ``{"header": {...}, "payload": {...}}`` (UTF-8).

    A JSON message still on the wire is cut, not decoded: its header and payload go out as the
    service wrote them (``Message.json_parts``); anything else is written from its frame.
    """
    parts = message.json_parts()
    if parts is not None:
        header = _without_inbox(parts[0], message.grp)
        if header is not None:
            return b"".join((b'{"header":', header, b',"payload":', parts[1], b"}"))
    text = f'{{"header":{render_header(message)},"payload":{to_json(message.payload)}}}'
    return text.encode()


async def _default_connect(settings: GatewaySettings) -> Client:
    from bus.asyncio.client import connect  # noqa: PLC0415  (the client is only needed at run time)

    return await connect(
        settings.bus_url,
        name=settings.bus_name,
        secret=settings.bus_secret,
        backoff_initial=settings.connect_retry,
        backoff_max=settings.reconnect_max,
        on_publish_failed=_publish_failed,
    )


def _publish_failed(error: PublishFailedError) -> None:
    """Events published over HTTP without ``confirm`` that the bus could not deliver after
    all (PROTOCOL.md 5.12): their callers were answered already, so they are logged, never
    raised at an unrelated later request."""
    mids = ", ".join(event.mid or "?" for event in error.events[:20])
    more = f" (+{len(error.events) - 20} more)" if len(error.events) > 20 else ""
    log.warning("%d published event(s) not delivered: %s; MIDs %s%s",
                len(error.events), error.cause, mids, more)  # fmt: skip


class Bridge:
    """The gateway's bus connection and the operations the routes use.

    Args:
        settings: the gateway settings.
        connector: makes a connected client (default: ``bus.asyncio.connect`` on ``bus_url``).
    """

    def __init__(self, settings: GatewaySettings, connector: Connector | None = None) -> None:
        self.settings = settings
        self._connector = connector or _default_connect
        self.client: Client | None = None
        self.directory: ServiceDirectory | None = None
        self.hub = EventHub(
            self._subscribe,
            _render_event,
            settings.event_buffer,
            settings.subscription_linger,
            settings.sse_queue,
            self._resume,
            self._settled,
        )
        self.presence = Presence()  # who subscribes, on every gateway and the bus (9.11)
        self.hub.presence = self.presence
        self.presence.on_change = self.hub.presence_changed
        self.micro = MicroDirectory(self)  # NATS micro services (PROTOCOL.md 10.3)
        self.in_flight = 0
        self.last_error = ""
        #: Wall-clock time the link was found lost; ``None`` while connected. The service
        #: directory's clock stands still meanwhile (see :meth:`_directory_clock`).
        self.lost_at: float | None = None
        self._wall = time.time
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    # Connection -------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while the client is connected to the bus."""
        return self.client is not None and bool(self.client.connected)

    @property
    def reconnects(self) -> int:
        """How many times the client reconnected after a lost link."""
        return self.client.reconnects if self.client is not None else 0

    async def start(self) -> None:
        """Start connecting in the background (returns at once)."""
        self._task = asyncio.create_task(self._connect_loop(), name="gateway-bus-connect")

    async def wait_connected(self, timeout: float) -> None:
        """Wait until connected (for tests and the CLI). Raises ``TimeoutError``."""
        async with asyncio.timeout(timeout):
            while not self.connected:
                await asyncio.sleep(0.02)

    async def _connect_loop(self) -> None:
        # Only the first connection is ours to retry: once up, the client reconnects itself.
        while self.client is None:
            await self._connect_once()
            if self.client is None:
                await asyncio.sleep(self.settings.connect_retry)
        await self._watch_link()

    async def _watch_link(self) -> None:
        """After a reconnection: probe the services, then let the directory's clock run again.

        The probe's answers come in before the clock resumes, so a service that stayed up
        through the outage never disappears from the list for a heartbeat interval.
        """
        retry = self.settings.connect_retry
        while True:
            # with the process's other chores; once a second at most while no loss was seen
            await asyncio.sleep(until_tick(retry if self.lost_at is not None else max(retry, 1)))
            if self.lost_at is None or not self.connected:
                continue
            if self.directory is not None:
                with contextlib.suppress(BusError):
                    await self.directory.probe()
            await asyncio.sleep(self.settings.connect_retry)
            if self.connected:
                self.lost_at = None

    def _directory_clock(self) -> float:
        """The service directory's clock: it stands still while the bus is away.

        Heartbeats cannot reach a gateway that lost its link, so their absence says nothing
        about the services (Eureka's "self-preservation"): the list is kept as it was, and
        ``/v1/services`` marks it ``stale``, rather than expiring every service one by one.
        """
        if self.lost_at is None and not self.connected:
            self.lost_at = self._wall()
        return self._wall() if self.lost_at is None else self.lost_at

    async def _connect_once(self) -> None:
        try:
            client = await self._connector(self.settings)
        except BusError as exc:
            error = mask_urls_in(str(exc))  # /readyz shows it: no password of any URL in it
            if error != self.last_error:  # say it once, not every retry
                log.warning(
                    "cannot reach the bus at %s: %s", mask_url(self.settings.bus_url), error
                )
            self.last_error = error
            return
        self.client, self.last_error = client, ""
        log.info("connected to the bus at %s", mask_url(self.settings.bus_url))
        await self._start_directory(client)
        try:
            await self.presence.start(client)
        except BusError as exc:
            log.warning("presence not followed: %s", exc)
        if hasattr(client.transport, "nats"):
            self.micro.start()

    async def _start_directory(self, client: Client) -> None:
        from bus.asyncio.directory import ServiceDirectory  # noqa: PLC0415

        if self.directory is not None:
            await self.directory.stop()
        directory = ServiceDirectory(client, clock=self._directory_clock)
        try:
            await directory.start()
        except BusError as exc:
            log.warning("service directory not started: %s", exc)
            return
        self.directory = directory

    def check_connected(self) -> None:
        """Raise :class:`DisconnectedError` unless connected to the bus."""
        self._client()

    async def _linked(self, timeout: float) -> Client:
        """The connected client; a link lost less than :data:`FAILOVER_GRACE` s ago is waited
        for that long (within ``timeout``).

        Raises:
            DisconnectedError: not connected (then).
        """
        client = self.client
        if client is not None and client.connected:
            return client
        if client is not None and client.down_since is not None:
            left = FAILOVER_GRACE - (asyncio.get_running_loop().time() - client.down_since)
            if left > 0:
                with contextlib.suppress(TimeoutError, BusError):
                    await client.wait_connected(min(left, timeout))
        return self._client()

    def _client(self) -> Client:
        if self.client is None or not self.client.connected:
            detail = f" ({self.last_error})" if self.last_error else ""
            where = mask_url(self.settings.bus_url)
            raise DisconnectedError(f"not connected to the bus at {where}{detail}")
        return self.client

    def give_up(self, why: str) -> None:
        """Answer every request still in flight now, with ``why`` (503; a stream's final error
        line): the gateway's shutdown grace is running out."""
        client = self.client
        if client is not None and self.in_flight:
            error = DisconnectedError(why, CloseReason.SERVER_SHUTDOWN)
            failed = client.fail_pending(error)
            log.info("shutting down: %d requests in flight answered 503", failed)

    async def stop(self, grace: float) -> None:
        """Drain in-flight requests (up to ``grace`` seconds), then close everything."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.hub.shutdown()
        await self.micro.stop()
        await self.presence.stop()
        if self.directory is not None:
            await self.directory.stop()
        if self.client is not None:
            with contextlib.suppress(BusError):
                await self.client.close()
        self.client = None

    # Requests ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Count one more request in flight (pair with :meth:`end`)."""
        self.in_flight += 1
        self._idle.clear()

    def end(self) -> None:
        """One request in flight less; shutdown waits until none is left."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    @contextlib.asynccontextmanager
    async def tracked(self) -> AsyncIterator[None]:
        """Count one request in flight for the duration of the block."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def make_request(
        self,
        group: str,
        body: bytes,
        parse: Callable[[bytes], DataFrame],
        *,
        caller: str | None = None,
        trace: str | None = None,
        cmd: str | None = None,
    ) -> Message:
        """The request (ENC=JSON) for a JSON body, its RPY this gateway's inbox.

        The body goes on as it came when the JSON lane vouches for it (``Message.json_request``:
        ASCII, CMD first, within the limits); otherwise ``parse`` reads it into a frame (and
        raises the caller's error for a bad body) and the request is built from that.

        Never connected yet, the body is still checked (a bad one is the caller's 400 whatever
        the bus is doing); sending it then fails with :class:`DisconnectedError`.

        Args:
            group, body, parse: as above.
            caller: the HTTP caller it is made for (CLR, PROTOCOL.md 5.11), if authenticated.
            trace: its traceparent (TRC).
            cmd: its CMD when the URL names it (``POST /v1/{group}/{cmd}``), else the body's.
        """
        client = self.client
        inbox = src = None
        if client is not None:
            inbox = client.inbox
            # SRC is our post office, as the broker would stamp it (PROTOCOL.md 5.11): named
            # here, the request's bytes go on as they are instead of being spliced there.
            src = client.sender
            message = Message.json_request(
                group, body, reply_to=inbox, src=src, caller=caller, trace=trace
            )
            if message is not None:
                return message
        payload = parse(body)
        if cmd is None:
            cmd = str(payload.get("CMD", ""))
        return Message.request(
            group,
            cmd,
            payload,
            reply_to=inbox,
            enc=Encoding.JSON,
            src=src,
            caller=caller,
            trace=trace,
        )

    async def request(self, message: Message, timeout: float) -> Message:
        """Send a request made by :meth:`make_request` and wait for its answer.

        Args:
            message: the request.
            timeout: seconds to wait.

        Returns:
            The ACK.

        Raises:
            NakError, NoRespondersError, RequestTimeout, LinkError: as the client does.
        """
        client = self.client
        if client is None or not client.connected:  # (the hot path: one test)
            client = await self._linked(timeout)
        try:
            ack: Message = await client.call(message, timeout=timeout)
        except BusError:
            raise  # RequestTimeout is an OSError too (TimeoutError): keep it as it is
        except OSError as exc:
            raise LinkError(f"bus link failed: {exc}") from exc
        return ack

    async def request_open(self, message: Message, timeout: float) -> tuple[Message, _Until | None]:
        """:meth:`request`, and when the ACK says more follow, the responses after it, up to
        the last, all within ``timeout`` of now (None when the ACK is the only answer).

        Raises:
            NakError, NoRespondersError, RequestTimeout, LinkError: as :meth:`request` (the
            rest as :meth:`stream`).
        """
        client = self.client
        if client is None or not client.connected:  # (the hot path: one test)
            client = await self._linked(timeout)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            ack, rest = await client.call_open(message, timeout=timeout)
        except BusError:
            raise
        except OSError as exc:
            raise LinkError(f"bus link failed: {exc}") from exc
        if rest is None:
            return ack, None
        return ack, _Until(rest, message.grp or "", timeout, deadline)

    async def stream(self, message: Message, timeout: float) -> AsyncIterator[Message]:
        """Send a request (ENC=JSON) and yield every response (ACK or NAK) until the last.

        ``timeout`` bounds the whole exchange, not each response: the HTTP request that waits
        for the stream holds a connection, and the server's cap on timeouts must bound it.

        Raises:
            RequestTimeout: the last response did not arrive within ``timeout``.
            NoRespondersError, LinkError: as the client does.
        """
        client = await self._linked(timeout)
        group = message.grp or ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        responses = client.call_stream(message, timeout=timeout)
        try:
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        response = await anext(responses)
                except TimeoutError as exc:
                    raise RequestTimeout(group, timeout) from exc
                except StopAsyncIteration:
                    return
                yield response
                if not response.more:
                    return
        finally:
            aclose = getattr(responses, "aclose", None)  # typed as an iterator, made as a generator
            if aclose is not None:
                await aclose()

    async def publish(
        self, type_: str, payload: DataFrame, confirm: bool = False, timeout: float | None = None
    ) -> tuple[str, int | None]:
        """Publish an event (ENC=JSON); returns its MID and, with ``confirm``, its journal seq
        once the broker has journaled it (PROTOCOL.md 5.12), waiting ``timeout`` seconds at
        most (default: the settings')."""
        timeout = self.settings.default_timeout if timeout is None else timeout
        client = await self._linked(timeout)
        message = Message.event(type_, payload)
        message.enc = Encoding.JSON
        seq = await _wrap_link(client.publish_event(message, confirm=confirm, timeout=timeout))
        return message.mid or "", seq

    async def mail(
        self, target: str, payload: DataFrame, cmd: str | None, expect: bool, timeout: float
    ) -> Message | None:
        """Direct mail to ``postoffice.mailbox`` (a MOP mailbox, or a bus client's), from this
        gateway's mailbox ``http``; with ``expect``, its reply (PROTOCOL.md 9.13).

        Raises:
            NakError: the reply is a NAK (404: no such post office or mailbox).
            RequestTimeout, DisconnectedError, LinkError: as :meth:`request`.
        """
        client = self._client()
        call = client.mail(target, payload, expect=expect, cmd=cmd, mailbox="http", timeout=timeout)
        reply: Message | None = await _wrap_link(call)
        return reply

    async def _subscribe(self, pattern: str) -> Any:
        client = self._client()
        # Over JetStream only a stream consumer numbers events: the hub listens through one
        # (from the stream's end), so its SSE ids are stream sequences any gateway resumes from.
        # relay: presence counts its SSE clients, not this shared subscription (5.16)
        return await client.subscribe(pattern, resume=client.streams, relay=True)

    async def _resume(
        self, pattern: str, since: int | None, since_time: float | None, last: bool = False
    ) -> Any:
        client = self._client()
        if last:  # the last journaled event of each type, then live (PROTOCOL.md 5.15)
            return await client.subscribe(pattern, last=True, relay=True)
        return await client.subscribe(pattern, since=since or 0, since_time=since_time, relay=True)

    def _settled(self, source: Any) -> bool:
        """Whether a stream's own durable subscription has caught up and holds nothing unread,
        on the broker's link, where each live event is given to every subscription of its
        pattern at once (PROTOCOL.md 5.14): its stream may move to the shared one. Over
        JetStream each is a consumer of its own, with no such moment: it stays."""
        client = self.client
        return (
            client is not None
            and client.connected
            and not client.streams
            and not source.catching_up
            and source.pending() == 0
        )

    def services(self) -> dict[str, Any]:
        """The live services as JSON (from the service directory).

        Returns:
            ``{"services": [...], "stale": bool, "as_of": float | None}``: while the bus is
            away, the list as it was when the link was lost, ``stale`` true and ``as_of`` the
            wall-clock time of that loss.

        Raises:
            DisconnectedError: the gateway never reached the bus (there is no list at all).
        """
        if self.directory is None:
            self._client()
            return {"services": [], "stale": False, "as_of": None}
        services = self._service_list(self.directory)
        stale = not self.connected
        if stale and self.lost_at is None:
            self.lost_at = self._wall()
        return {"services": services, "stale": stale, "as_of": self.lost_at if stale else None}

    @staticmethod
    def _service_list(directory: ServiceDirectory) -> list[dict[str, Any]]:
        return [
            {
                "group": info.group,
                "instances": info.instances,
                "status": info.status,
                "last_seen": info.last_seen,
                "commands": list(info.commands),
                "load": {
                    "in_flight": info.load.in_flight,
                    "queued": info.load.queued,
                    "handled": info.load.handled,
                    "failed": info.load.failed,
                },
            }
            for info in directory.services()
        ]


async def _wrap_link(call: Awaitable[Any]) -> Any:
    """Await a client call; an OS-level failure that escaped the client becomes a LinkError."""
    try:
        return await call
    except BusError:
        raise  # RequestTimeout is an OSError too (TimeoutError): keep it as it is
    except OSError as exc:
        raise LinkError(f"bus link failed: {exc}") from exc


def _render_event(message: Message) -> tuple[str, str, str | None, int | None]:
    type_ = message.grp or ""
    data = f'{{"type":{json.dumps(type_)},{render_response(message)[1:].decode()}'
    return type_, data, message.mid, message.seq


class _Until:
    """``responses`` up to the last, raising RequestTimeout once ``deadline`` (loop time)
    passes: the timeout bounds the whole exchange, as :meth:`Bridge.stream`'s does."""

    def __init__(self, responses: Rest, group: str, timeout: float, deadline: float) -> None:
        self._responses = responses
        self._group = group
        self._timeout = timeout
        self._deadline = deadline

    def __aiter__(self) -> _Until:
        return self

    async def __anext__(self) -> Message:
        try:
            async with asyncio.timeout_at(self._deadline):
                return await anext(self._responses)
        except TimeoutError as exc:
            await self._responses.aclose()
            raise RequestTimeout(self._group, self._timeout) from exc

    async def aclose(self) -> None:
        await self._responses.aclose()
