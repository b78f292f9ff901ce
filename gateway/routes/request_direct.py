"""``POST /v1/request/{group}`` answered from the HTTP protocol's callbacks (PROTOCOL.md 9.2).

Every request through the gateway takes this route, and under uvicorn each one cost a scope
dict, a ``RequestResponseCycle`` with its ``asyncio.Event``, the ``run_asgi`` wrapper, the
proxy-headers middleware, the app's dispatch and the route's own coroutines before the first
byte went to the bus. Here the gateway's protocol (:mod:`gateway.process.http_protocol`) hands
the request's head to :meth:`DirectRequests.take`; a plain request (the route or a typed one,
no query string, a small body with its length, one JSON answer wanted) is then answered by one
task per request, which sends it on the bus and writes the answer's bytes itself.

It answers as the ASGI route does, byte for byte: the same checks in the same order (group
name, caller, timeout, body limit, body), the same metrics, the same headers in the same order
(the server's date and server headers first). Anything else the route knows how to answer
(OpenTelemetry spans, ``Idempotency-Key``, a NATS micro service, a stream of responses, a
client not reading) is handed to the route the ASGI way, through a real uvicorn cycle made
then; errors are answered by the app's own handlers through such a cycle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from bus import otel
from bus.accelerators import accelerator
from bus.errors import BusError, LimitError
from bus.message import trace as bus_trace
from bus.message.message import Message
from gateway.access.auth import ANONYMOUS
from gateway.bridge import render_response
from gateway.process.cycle import DIRECT_CYCLE, SERVER_CYCLE, default_lines
from gateway.process.metrics import Outcome
from gateway.routes.request_answers import _ANSWER_LINES, answer_open, request_failed, send_ack
from gateway.routes.routes_request import _command_payload, check_group, parse_timeout
from gateway.routes.typed import typed_body
from gateway.state import Gateway

__all__ = ["MAX_DIRECT_BODY", "DirectRequests"]

log = logging.getLogger("busgate.gateway")

#: The largest body taken this way (uvicorn's read high-water mark): a larger one, or one
#: without a Content-Length, goes the ASGI way, which reads it as it comes.
MAX_DIRECT_BODY: Final = 65536

#: Headers that send a request the ASGI way: a proxy's (uvicorn's middleware rewrites the
#: client's address from them), a 100-continue, a chunked body, a retry key (9.12).
_ASGI_HEADERS: Final = frozenset(
    {b"expect", b"transfer-encoding", b"idempotency-key", b"forwarded", b"x-forwarded-for",
     b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port"}
)  # fmt: skip
_WANTED: Final = frozenset({b"content-length", b"accept", b"x-busgate-timeout", b"traceparent"})
_PREFIX: Final = "/v1/request/"
#: An ACK's whole HTTP answer in one C call (None: pure Python, ``render_response``).
_HTTP_ANSWER: Final[Callable[..., bytes | None] | None] = getattr(
    accelerator("bus.native._hotpath"), "http_answer", None
)

#: The app's answer for a request the ASGI way (``gateway.app._answer_request``).
Answer = Callable[[Scope, Receive, Send], Awaitable[None]]
#: The app's answer for an error raised before one started (``gateway.app``'s handlers).
ErrorAnswer = Callable[[Scope, Receive, Send, Exception], Awaitable[None]]


class DirectRequests:
    """The gateway app's requests answered from its protocol's callbacks (module docstring).

    Args:
        app: the Starlette app (its ``state.gateway``; it is the scope's ``app``).
        reserved: the first path segments no typed route has.
        answer: the route the ASGI way, with the app's error handlers.
        answer_error: the app's answer for an error.
    """

    def __init__(
        self, app: Any, reserved: frozenset[str], answer: Answer, answer_error: ErrorAnswer
    ) -> None:
        self.app = app
        self.gateway: Gateway = app.state.gateway
        self.reserved = reserved
        self.answer = answer
        self.answer_error = answer_error

    def take(self, protocol: Any) -> bool:
        """Take the request whose head ``protocol`` (uvicorn's httptools protocol) just read.

        Returns:
            False when uvicorn must go on with it (then nothing has changed).
        """
        cycle = protocol.cycle
        if cycle is not None and not cycle.response_complete:
            return False  # pipelined behind a response not sent yet: uvicorn queues it
        parser = protocol.parser
        if (
            parser.get_method() != b"POST"
            or parser.get_http_version() != "1.1"
            or parser.should_upgrade()
        ):
            return False
        exchange = self._exchange(
            protocol, protocol.url, protocol.headers, protocol.scope, parser.should_keep_alive()
        )
        if exchange is None:
            return False
        protocol.scope["method"] = "POST"  # as uvicorn's on_headers_complete leaves it
        protocol.cycle = exchange
        return True

    def take_whole(
        self,
        protocol: Any,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
    ) -> bool:
        """Take a whole ``POST`` read in one piece, not fed to uvicorn's parser (its head and
        body as ``bus.native._hotpath.http_request`` read them, as uvicorn's callbacks would
        have): answered at once, its scope made only if something needs it.

        Returns:
            False when the bytes must go to uvicorn's parser (then nothing has changed).
        """
        cycle = protocol.cycle
        if cycle is not None and not cycle.response_complete:
            return False  # behind a response not sent yet: uvicorn's parser queues it
        exchange = self._exchange(protocol, url, headers, None, keep_alive)
        if exchange is None:
            return False
        protocol.cycle = exchange
        exchange.body = body
        exchange.more_body = False
        exchange.set()
        return True

    def _exchange(
        self,
        protocol: Any,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        scope: dict[str, Any] | None,
        keep_alive: bool,
    ) -> _Exchange | None:
        """The exchange for a ``POST`` of ``url``, if it is one taken this way."""
        if (
            protocol.limit_concurrency is not None
            or protocol.root_path
            or getattr(protocol.config, "reset_contextvars", False)  # (uvicorn >= 0.53)
        ):
            return None
        try:  # (a str: ``b"?" in url`` raises and clears a TypeError inside CPython 3.11)
            path = url.decode("ascii")
        except UnicodeDecodeError:
            return None
        if "?" in path or "%" in path or "#" in path:
            return None  # a query (?timeout=, ?key=) or an escape: the ASGI way
        params = self._params(path)
        if params is None:
            return None
        wanted: dict[bytes, bytes] = {}
        for name, value in headers:
            if name in _WANTED:
                if name not in wanted:  # the first of a repeated header wins
                    wanted[name] = value
            elif name in _ASGI_HEADERS:
                return None
        length = wanted.get(b"content-length")
        if length is None or not length.isdigit() or int(length) > MAX_DIRECT_BODY:
            return None
        accept = wanted.get(b"accept")
        if accept is not None and (
            accept.find(b"/x-ndjson") >= 0 or accept.find(b"/event-stream") >= 0
        ):
            return None  # a stream of responses (9.4)
        return _Exchange(self, protocol, params, wanted, url, headers, scope, keep_alive)

    def _params(self, path: str) -> tuple[str, str | None] | None:
        """The group and (typed route) command of a request path, else None."""
        if path.startswith(_PREFIX):
            group = path[len(_PREFIX) :]
            return None if not group or "/" in group else (group, None)
        if not path.startswith("/v1/"):
            return None
        group, slash, cmd = path[4:].partition("/")
        if not (group and cmd and slash) or "/" in cmd or group in self.reserved:
            return None
        return group, cmd


class _Exchange:
    """One request taken from the protocol: as its ``cycle``, it has what the protocol's
    callbacks use of uvicorn's (``body``, ``more_body``, ``message_event``, ``keep_alive``,
    ``disconnected``, ``response_complete``); its :meth:`set` is told when the body is whole
    or the client left."""

    __slots__ = ("body", "cmd", "direct", "disconnected", "group", "headers", "keep_alive",
                 "more_body", "protocol", "response_complete", "scope", "started", "url",
                 "wanted")  # fmt: skip

    def __init__(
        self,
        direct: DirectRequests,
        protocol: Any,
        params: tuple[str, str | None],
        wanted: dict[bytes, bytes],
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        scope: dict[str, Any] | None,
        keep_alive: bool,
    ) -> None:
        self.direct = direct
        self.protocol = protocol
        # This request's own (a pipelined request's head, read meanwhile, gets new ones); a
        # request read whole has no scope until something needs it (:meth:`_scope`).
        self.scope = scope
        self.url = url
        self.headers = headers
        self.group, self.cmd = params
        self.wanted = wanted
        self.body: bytes | bytearray = bytearray()
        self.more_body = True
        self.keep_alive = keep_alive
        self.disconnected = False
        self.response_complete = False
        self.started = False

    @property
    def message_event(self) -> _Exchange:
        """What uvicorn's callbacks "set" (see :meth:`set`): this exchange itself, not kept in
        an attribute (a reference to itself would make every request cyclic garbage)."""
        return self

    def set(self) -> None:
        """uvicorn's protocol: more of the body came, all of it, or the client left."""
        if self.more_body or self.started or self.disconnected:
            return  # (a client gone before its body was whole: nobody to answer)
        self.started = True
        protocol = self.protocol
        task = protocol.loop.create_task(self._run())
        tasks = protocol.tasks  # the server waits for them at shutdown, as for uvicorn's
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def clear(self) -> None:
        """(``asyncio.Event``'s: nothing waits on this one)"""

    async def _run(self) -> None:
        try:
            await self._answer()
        except Exception as exc:  # as uvicorn's run_asgi does for an app's error
            log.error("Exception in ASGI application\n", exc_info=exc)
            self.protocol.transport.close()

    async def _answer(self) -> None:
        """``RequestApp.__call__`` and ``_single`` (gateway/routes/routes_request.py) for one
        plain request: the same checks in the same order, the same metrics."""
        gateway = self.direct.gateway
        group, cmd = self.group, self.cmd
        bridge = gateway.bridge
        if otel.active() or (cmd is not None and bridge.micro.active):
            await self._the_asgi_way()  # a span of its own; a micro service's endpoint
            return
        try:
            check_group(group)
        except BusError as exc:
            await self._error(exc, None)
            return
        started = gateway.monotonic()
        wanted = self.wanted
        trace = bus_trace.parse(wanted.get(b"traceparent")) or bus_trace.new()
        try:
            principal = ANONYMOUS if gateway.open else gateway.admit(Request(self._scope()))
            principal.check_group(group)
            timeout = gateway.settings.cap_timeout(parse_timeout(wanted.get(b"x-busgate-timeout")))
            limit = gateway.max_body(principal)
            body = bytes(self.body)
            self.body = bytearray()
            if len(body) > limit:
                raise LimitError("max_body", len(body), limit)
            caller = None if principal is ANONYMOUS else principal.name
            if cmd is None:
                message = bridge.make_request(
                    group, body, _command_payload, caller=caller, trace=trace
                )
            else:  # POST /v1/{group}/{cmd}: the body is the arguments (9.9)
                check_group(cmd)
                body = typed_body(bridge.directory, group, cmd, body)
                message = bridge.make_request(
                    group, body, _command_payload, caller=caller, trace=trace, cmd=cmd
                )
        except BusError as exc:
            # Refused before reaching the bus (400, 401, 403, 413, 429): counted, not sent.
            now = gateway.monotonic()
            gateway.metrics.observe(group, Outcome.REJECTED, now - started, now)
            await self._error(exc, trace)
            return
        except Exception as exc:
            await self._error(exc, trace)
            return
        started = gateway.monotonic()
        bridge.begin()
        try:
            ack, rest = await bridge.request_open(message, timeout)
        except BaseException as exc:
            request_failed(gateway, group, started, exc)
            if not isinstance(exc, Exception):
                raise
            await self._error(exc, trace)
            return
        if rest is not None:  # a command that streams: the route's NDJSON answer (9.4)
            scope, cycle = self._promote(trace)
            try:
                await answer_open(
                    gateway, group, message, ack, rest, started, timeout, trace,
                    self.wanted.get(b"accept", b""), scope, cycle.receive, cycle.send,
                )  # fmt: skip
            finally:
                _forget(scope)
            return
        bridge.end()
        now = gateway.monotonic()
        gateway.metrics.observe(group, Outcome.ACK, now - started, now)
        # The ACK's RID is the request's MID, which this gateway made; the trace was parsed
        # or made here: nothing in these lines came unchecked.
        mid = (message.mid or "").encode("latin-1")
        if self._write_ack(ack, mid, trace.encode("latin-1")):
            return
        answer = render_response(ack)
        lines = _ANSWER_LINES % (len(answer), mid, trace.encode("latin-1"))
        if not self._write(200, lines, answer):  # the ASGI way: send waits for the client
            scope, cycle = self._promote(trace)
            try:
                await send_ack(scope, cycle.send, message, ack, trace)
            finally:
                _forget(scope)

    def _write_ack(self, ack: Message, mid: bytes, trace: bytes) -> bool:
        """Write the answer of a JSON ACK still on the wire in one C call (the accelerator's
        ``http_answer``: the bytes :meth:`_write` writes for ``render_response(ack)``).

        Returns:
            False when the reference way must write it (no accelerator, a decoded ACK, one
            the accelerator leaves to ``render_response``, a client not reading).
        """
        raw = ack.wire
        if _HTTP_ANSWER is None or raw is None or self.disconnected:
            return False
        protocol = self.protocol
        defaults = default_lines(protocol.server_state.default_headers)
        if defaults is None or protocol.flow.write_paused:
            return False
        close = b"" if self.keep_alive else b"connection: close\r\n"
        whole = _HTTP_ANSWER(raw, ack.header, STATUS_LINE[200], defaults, mid, trace, close)
        if whole is None:
            return False
        self._send(200, whole)
        return True

    def _write(self, status: int, lines: bytes, body: bytes) -> bool:
        """Write the whole answer, as ``gateway.process.cycle.write_whole`` does.

        Returns:
            False when it must go the ASGI way (a client not reading: ``send`` waits).
        """
        if self.disconnected:
            return True  # nobody to answer (uvicorn's send writes nothing then)
        protocol = self.protocol
        defaults = default_lines(protocol.server_state.default_headers)
        if defaults is None or protocol.flow.write_paused:
            return False
        close = b"" if self.keep_alive else b"connection: close\r\n"
        self._send(status, b"".join((STATUS_LINE[status], defaults, lines, close, b"\r\n", body)))
        return True

    def _send(self, status: int, answer: bytes) -> None:
        """Write the whole answer (its access log line first, as uvicorn's ``send``); the
        response is complete."""
        protocol = self.protocol
        if protocol.access_log:
            scope = self._scope()
            protocol.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),  # type: ignore[arg-type]
                "POST",
                get_path_with_query_string(scope),  # type: ignore[arg-type]
                "1.1",
                status,
            )
        transport = protocol.transport
        write = getattr(transport, "write_whole", None) or transport.write
        write(answer)
        self.response_complete = True
        if not self.keep_alive:
            transport.close()
        protocol.on_response_complete()

    def _scope(self) -> dict[str, Any]:
        """This request's ASGI scope, as uvicorn and the app's dispatch would have made it."""
        scope = self.scope
        if scope is None:  # read whole: what uvicorn's on_message_begin would have made
            protocol = self.protocol
            scope = self.scope = {
                "type": "http",
                "asgi": {"version": protocol.asgi_version, "spec_version": "2.3"},
                "http_version": "1.1",
                "server": protocol.server,
                "client": protocol.client,
                "scheme": protocol.scheme,
                "root_path": protocol.root_path,
                "headers": self.headers,
                "state": protocol.app_state.copy(),
                "method": "POST",
            }
        if "path" not in scope:
            url = self.url
            params = {"group": self.group}
            if self.cmd is not None:
                params["cmd"] = self.cmd
            scope.update(
                path=url.decode("ascii"), raw_path=url, query_string=b"", path_params=params,
                app=self.direct.app,
            )  # fmt: skip
        return scope

    def _promote(self, trace: str | None) -> tuple[dict[str, Any], Any]:
        """This request as uvicorn would have run it: its scope and a real cycle (what is
        left of the body in it), the protocol's cycle from now on."""
        protocol = self.protocol
        scope = self._scope()
        cycle = RequestResponseCycle(
            scope=scope,  # type: ignore[arg-type]  # (uvicorn's scope: the one made for it)
            transport=protocol.transport,
            flow=protocol.flow,
            logger=protocol.logger,
            access_logger=protocol.access_logger,
            access_log=protocol.access_log,
            default_headers=protocol.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=self.keep_alive,
            on_response=protocol.on_response_complete,
        )
        cycle.body = bytearray(self.body)
        cycle.more_body = False
        cycle.disconnected = self.disconnected
        cycle.message_event.set()  # the body, whole
        if protocol.cycle is self:
            protocol.cycle = cycle
        scope[SERVER_CYCLE] = cycle
        scope[DIRECT_CYCLE] = cycle
        if trace is not None:
            scope["busgate.trace"] = trace  # the error handlers answer with it
        return scope, cycle

    async def _the_asgi_way(self) -> None:
        scope, cycle = self._promote(None)
        try:
            await self.direct.answer(scope, cycle.receive, cycle.send)
        finally:
            _forget(scope)

    async def _error(self, exc: Exception, trace: str | None) -> None:
        scope, cycle = self._promote(trace)
        try:
            await self.direct.answer_error(scope, cycle.receive, cycle.send, exc)
        except ClientDisconnect:
            pass
        finally:
            _forget(scope)


def _forget(scope: dict[str, Any]) -> None:
    """The cycle out of the scope (left there, the two hold each other: cyclic garbage)."""
    scope.pop(SERVER_CYCLE, None)
    scope.pop(DIRECT_CYCLE, None)
