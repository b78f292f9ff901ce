"""Requests, streams of responses and direct mail: the requesting half of the client.

:class:`Requests` is mixed into :class:`bus.asyncio.client.Client`; it keeps the table of
requests waiting for answers (by MID) and sends through the client's :meth:`send`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from bus.asyncio.deadlines import Deadlines
from bus.errors import (
    ConfigError,
    DisconnectedError,
    NakError,
    NoRespondersError,
    RequestTimeout,
)
from bus.frame.enums import CloseReason, Encoding
from bus.frame.frame import DataFrame
from bus.message.message import Message, MessageType, new_id
from bus.message.trace import current

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.transport import Transport
    from bus.link.connection import SessionInfo

__all__ = ["DEFAULT_TIMEOUT", "Requests", "Rest"]

log = logging.getLogger("bus.client")

#: Kestrel's default request timeout (seed 000), seconds.
DEFAULT_TIMEOUT: Final = 5.0
_NO_RESPONDERS: Final = "no responders"
#: Read once: ``MessageType.NAK.value`` costs two enum lookups, on every answer.
_NAK: Final = MessageType.NAK.value


class _Pending:
    """A request waiting for its answers: one (a future) or a stream of them (a queue)."""

    __slots__ = ("future", "group", "keep", "queue", "sent", "timeout")

    def __init__(
        self, group: str, timeout: float, stream: bool = False, keep: bool = False
    ) -> None:
        self.group = group
        self.timeout = timeout
        self.sent = False
        self.keep = keep  # one awaited first, the ones after it kept in a queue (call_open)
        self.queue: asyncio.Queue[Message | BaseException] | None = None
        self.future: asyncio.Future[Message | BaseException] | None = None
        if stream:
            self.queue = asyncio.Queue()
        else:
            self.future = asyncio.get_running_loop().create_future()

    def _time_out(self) -> None:
        self.put(_TIMED_OUT)

    def put(self, item: Message | BaseException) -> None:
        """Hand over an answer (or the error the waiter raises); a single one keeps the first."""
        if self.queue is not None:
            self.queue.put_nowait(item)
        elif self.future is not None and not self.future.done():
            self.future.set_result(item)
        elif self.keep:  # the second answer of an open call: the rest queue up from here
            self.queue = asyncio.Queue()
            self.queue.put_nowait(item)

    async def get(self, deadlines: Deadlines) -> Message | BaseException:
        """The next answer or error; raises TimeoutError after ``timeout`` seconds."""
        future = self.future
        if future is None:
            if self.queue is None:  # an open call's rest, before any of it came
                self.queue = asyncio.Queue()
            async with asyncio.timeout(self.timeout):
                return await self.queue.get()
        # A shared timer, no Timeout context: most requests are answered once.
        expire = self._time_out
        slot = deadlines.add(expire, self.timeout)
        try:
            item = await future
        finally:
            slot.pop(expire, None)
        if item is _TIMED_OUT:
            raise TimeoutError
        return item


_TIMED_OUT: Final = TimeoutError("the request timed out")


class Requests:
    """Requests and mail of a client (a mixin of :class:`bus.asyncio.client.Client`)."""

    inbox: str
    name: str
    timeout: float
    _pending: dict[str, _Pending]
    _deadlines: Deadlines
    _buffer: deque[Message]
    _closed: bool
    info: SessionInfo | None

    _connected: bool
    _transport: Transport | None

    if TYPE_CHECKING:  # provided by Client

        async def send(self, message: Message) -> None: ...
        def _check_open(self) -> None: ...

    async def _start(
        self,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None,
        timeout: float | None,
        to_all: bool,
        enc: Encoding | str,
        xpy: int | None,
        stream: bool = False,
    ) -> tuple[Message, _Pending]:
        # Made while a traced request is handled: it belongs to that trace (PROTOCOL.md 5.11).
        message = Message.request(
            group,
            cmd,
            args,
            reply_to=self.inbox,
            enc=enc,
            xpy=xpy,
            to_all=to_all,
            src=self.sender,
            trace=current(),
        )
        return message, await self._send_request(message, timeout, stream)

    @property
    def sender(self) -> str | None:
        """Our post office as the broker accepted it (None before the first connection): the
        SRC it would otherwise add (PROTOCOL.md 5.11), so it forwards our messages' bytes as
        they are."""
        info = self.info
        return None if info is None else info.name

    async def _send_request(
        self, message: Message, timeout: float | None, stream: bool
    ) -> _Pending:
        mid = message.mid
        if mid is None:
            raise ConfigError("a request needs a MID to be answered")
        where = message.grp or message.tgt or ""  # what a timeout names: the group or the target
        pending = _Pending(where, self.timeout if timeout is None else timeout, stream)
        self._pending[mid] = pending
        try:
            await self.send(message)
        except BaseException:
            self._pending.pop(mid, None)
            raise
        return pending

    async def call(self, message: Message, *, timeout: float | None = None) -> Message:
        """Send a request built by the caller (its RPY must be :attr:`inbox`) and return its
        first ACK, as :meth:`request` does.

        The gateway uses it to send a request whose JSON payload it passes on as it came
        (``Message.json_request``).

        Raises:
            NakError, NoRespondersError, RequestTimeout, DisconnectedError, BufferFullError:
                as :meth:`request`.
            ConfigError: the message has no MID.
        """
        pending = await self._send_request(message, timeout, False)
        try:
            response = await self._next(message, pending)
        finally:
            self._pending.pop(message.mid or "", None)
        if response.typ == _NAK:
            raise NakError(response.msg or "", response.rcd, response)
        return response

    async def call_open(
        self, message: Message, *, timeout: float | None = None
    ) -> tuple[Message, Rest | None]:
        """:meth:`call`, and when its first ACK says more follow (``Flag.MORE``), the rest:
        the responses after it, up to the last (None when there are none). The gateway answers
        a plain-JSON request this way (PROTOCOL.md 9.4): one ACK as it is, a stream as NDJSON.
        ``await rest.aclose()`` drops what is still to come, whether read or not.

        Raises:
            As :meth:`call` (the rest as :meth:`call_stream`).
        """
        pending = await self._send_request(message, timeout, False)
        pending.keep = True
        mid = message.mid or ""
        try:
            response = await self._next(message, pending)
        except BaseException:
            self._pending.pop(mid, None)
            raise
        if response.typ == _NAK or not response.more:
            self._pending.pop(mid, None)
            if response.typ == _NAK:
                raise NakError(response.msg or "", response.rcd, response)
            return response, None
        pending.future = None  # from here on a stream: the rest from the queue
        return response, Rest(self, message, pending)

    async def _next(self, message: Message, pending: _Pending) -> Message:
        try:
            item = await pending.get(self._deadlines)
        except TimeoutError as exc:
            self._pending.pop(message.mid or "", None)
            self._buffer_remove(message)
            raise RequestTimeout(pending.group, pending.timeout) from exc
        if isinstance(item, BaseException):
            raise item
        if item.typ == _NAK and _is_no_responders(item):
            self._pending.pop(message.mid or "", None)
            raise NoRespondersError(pending.group)
        if not item.more:
            self._pending.pop(message.mid or "", None)
        return item

    def _buffer_remove(self, message: Message) -> None:
        with contextlib.suppress(ValueError):
            self._buffer.remove(message)  # it timed out before the link came back

    async def request(
        self,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None = None,
        *,
        timeout: float | None = None,
        to_all: bool = False,
        enc: Encoding | str = Encoding.FRAM,
        xpy: int | None = None,
        retry: bool = False,
        **fields: Any,
    ) -> Message:
        """Send a request to one consumer of ``group`` and return its (first) ACK.

        ``client.request("demo", "echo", {"x": 1})`` and ``client.request("demo", "echo", x=1)``
        send the same request.

        Args:
            group: the group (GRP).
            cmd: the command (CMD).
            args: the arguments (the rest of PLD).
            **fields: more arguments as keywords (added to ``args``, which must then be a
                mapping or None).
            timeout: seconds to wait (default: the client's, 5 s).
            to_all: every consumer gets it (``Flag.ALL``); the first answer is returned.
            enc: how it travels (FRAM, or JSON as a non-framework client would).
            xpy: expiry, epoch seconds.
            retry: the caller declares the command safe to run twice (idempotent): when the
                link drops after sending, it is sent again after the reconnection, within the
                same ``timeout``, instead of raising DisconnectedError.

        Returns:
            The ACK message (``.payload`` holds the result).

        Raises:
            NakError: answered with a NAK (``.msg``, ``.rcd``, ``.response``).
            NoRespondersError: nobody consumes the group (answered at once by the broker).
            RequestTimeout: no answer within ``timeout``.
            DisconnectedError: the link dropped after the request was sent (not ``retry``).
            BufferFullError: disconnected and the buffer is full.
            ConfigError: keyword arguments with a DataFrame ``args``.
        """
        args = _with_fields(args, fields)
        if retry:

            def attempt(budget: float) -> Awaitable[tuple[Message, _Pending]]:
                return self._start(group, cmd, args, budget, to_all, enc, xpy)  # a new MID

            message, response = await self._answered(
                attempt, group, f"request {cmd}", timeout, retry
            )
        else:  # sent once: what _answered does, without its loop
            message, pending = await self._start(group, cmd, args, timeout, to_all, enc, xpy)
            response = await self._next(message, pending)
        self._pending.pop(message.mid or "", None)  # the first answer is the one we return
        if response.typ == _NAK:
            raise NakError(response.msg or "", response.rcd, response)
        return response

    async def _answered(
        self,
        attempt: Callable[[float], Awaitable[tuple[Message, _Pending]]],
        where: str,
        what: str,
        timeout: float | None,
        retry: bool,
    ) -> tuple[Message, Message]:
        """Send (``attempt(budget)``) and wait for the first answer; with ``retry``, send again
        after a lost link, all within one ``timeout``. Returns the message sent and the answer."""
        loop = asyncio.get_running_loop()
        total = budget = self.timeout if timeout is None else timeout
        deadline = loop.time() + total
        while True:
            message, pending = await attempt(budget)
            try:
                return message, await self._next(message, pending)
            except DisconnectedError:
                budget = deadline - loop.time()
                if not retry or self._closed:
                    raise
                if budget <= 0:
                    raise RequestTimeout(where, total) from None
                log.info("%s to %r: link lost, sending it again", what, where)

    async def request_stream(
        self,
        group: str,
        cmd: str,
        args: Mapping[str, Any] | DataFrame | None = None,
        *,
        timeout: float | None = None,
        to_all: bool = False,
        enc: Encoding | str = Encoding.FRAM,
        xpy: int | None = None,
        **fields: Any,
    ) -> AsyncIterator[Message]:
        """Send a request and yield every response (ACK or NAK) until one without Flag.MORE.

        ``timeout`` bounds the wait for each response; ``**fields`` are more arguments, as in
        :meth:`request`. Raises as :meth:`request`, except that a NAK is yielded rather than
        raised (but "no responders" raises NoRespondersError).
        """
        args = _with_fields(args, fields)
        message = Message.request(
            group,
            cmd,
            args,
            reply_to=self.inbox,
            enc=enc,
            xpy=xpy,
            to_all=to_all,
            src=self.sender,
            trace=current(),
        )
        async with contextlib.aclosing(self.call_stream(message, timeout=timeout)) as responses:
            async for response in responses:
                yield response

    async def call_stream(
        self, message: Message, *, timeout: float | None = None
    ) -> AsyncGenerator[Message, None]:
        """Send a request built by the caller and yield its responses, as
        :meth:`request_stream` does."""
        pending = await self._send_request(message, timeout, True)
        try:
            while True:
                response = await self._next(message, pending)
                yield response
                if not response.more:
                    return
        finally:
            self._pending.pop(message.mid or "", None)

    # -- direct mail -------------------------------------------------------------------------

    async def mail(
        self,
        target: str,
        payload: Mapping[str, Any] | DataFrame | None = None,
        *,
        expect: bool = False,
        cmd: str | None = None,
        mailbox: str = "po",
        timeout: float | None = None,
    ) -> Message | None:
        """Send direct mail to ``postoffice.mailbox`` (seed 001).

        Args:
            target: ``postoffice.mailbox``.
            payload: the content (PLD).
            expect: wait for a reply (MOP's ``expect``).
            cmd: an optional CMD.
            mailbox: our sending mailbox (SRC is ``<our post office>.<mailbox>``).
            timeout: seconds to wait for the reply.

        Returns:
            The reply when ``expect``, else None.

        Raises:
            NakError: the reply is a NAK (RCD 404 when the post office is not connected).
            RequestTimeout, DisconnectedError, BufferFullError: as :meth:`request`.
        """
        frame = DataFrame()
        frame.add("MID", new_id())
        frame.add("TGT", target)
        frame.add("SRC", f"{self.name}.{mailbox}")
        frame.add("TYP", MessageType.RQS.value)
        if expect:
            frame.add("RPY", self.inbox)
        if cmd is not None:
            frame.add("CMD", cmd)
        frame.add("ENC", Encoding.FRAM.value)
        frame.add("PLD", payload if isinstance(payload, DataFrame) else DataFrame(payload or {}))
        message = Message(frame)
        if not expect:
            await self.send(message)
            return None
        return await self.call(message, timeout=timeout)

    # -- management --------------------------------------------------------------------------

    async def manage(
        self, cmd: str, args: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Message:
        """Call a broker command (``manage.status``, ``manage.add``, ...; managers only).

        Returns:
            The ACK; its payload holds the answer.

        Raises:
            RefusedError: this post office is not a manager (NAK 403).
            NakError: another refusal. DisconnectedError: the link is down.
        """
        self._check_open()
        if not self._connected or self._transport is None:
            raise DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        name = cmd if cmd.startswith("manage.") else f"manage.{cmd}"
        return await self._transport.call(
            name, args or {}, self.timeout if timeout is None else timeout
        )

    async def status(self) -> dict[str, Any]:
        """The broker's ``manage.status`` answer as a dict (managers only)."""
        reply = await self.manage("manage.status")
        result: dict[str, Any] = reply.payload.to_dict()
        return result


def _with_fields(
    args: Mapping[str, Any] | DataFrame | None, fields: Mapping[str, Any]
) -> Mapping[str, Any] | DataFrame | None:
    """A request's arguments plus those given as keywords."""
    if not fields:
        return args
    if isinstance(args, DataFrame):
        raise ConfigError("give the arguments as a DataFrame or as keywords, not both")
    return {**(args or {}), **fields}


def _is_no_responders(message: Message) -> bool:
    return message.rcd == 503 and message.msg == _NO_RESPONDERS and message.src == "central"


class Rest:
    """The responses after the first of :meth:`Requests.call_open`, up to the last."""

    def __init__(self, owner: Requests, message: Message, pending: _Pending) -> None:
        self._owner = owner
        self._message = message
        self._pending = pending
        self._done = False

    def __aiter__(self) -> Rest:
        return self

    async def __anext__(self) -> Message:
        if self._done:
            raise StopAsyncIteration
        try:
            response = await self._owner._next(self._message, self._pending)
        except BaseException:
            self._close()
            raise
        if not response.more:
            self._close()
        return response

    async def aclose(self) -> None:
        """Stop waiting: later responses are dropped."""
        self._close()

    def _close(self) -> None:
        self._done = True
        self._owner._pending.pop(self._message.mid or "", None)
