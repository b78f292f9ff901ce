"""The broker's TCP transport: the link the client talks through to a busgate broker.

:class:`BrokerTransport` drives the sans-I/O :class:`bus.link.connection.ClientConnection` over TCP:
it feeds it what the socket reads, writes what it says, ticks it for the keepalive, and writes
the messages of a READY link itself, coalesced: everything sent in one loop iteration leaves
in one write.

The :class:`Transport` interface it implements, and the handlers it calls, are in
:mod:`bus.asyncio.transport_base` (re-exported here, with :class:`SessionInfo`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast

from bus.asyncio.loop import until_tick
from bus.asyncio.transport_base import (
    LostHandler,
    MessageHandler,
    ReceiptHandler,
    Transport,
    WrittenHandler,
)
from bus.errors import (
    AuthError,
    ConnectError,
    DisconnectedError,
    LimitError,
    NakError,
    RefusedError,
    RequestTimeout,
)
from bus.frame.codec import Limits
from bus.frame.enums import CloseReason
from bus.link import wire
from bus.link.connection import (
    Accepted,
    ClientConnection,
    Closed,
    ReceiptReceived,
    Received,
    SessionInfo,
    control_message,
)
from bus.link.receipts import event_kind
from bus.message.message import Message, MessageType, encode_message, new_id, read_message

__all__ = [
    "BrokerTransport",
    "LostHandler",
    "MessageHandler",
    "ReceiptHandler",
    "SessionInfo",
    "Transport",
    "WrittenHandler",
]

_HIGH_WATER: Final = 256 * 1024
#: Bytes read after which the link lets the loop run its other callbacks (the subscriptions'
#: readers) before it reads on: what the standard loop reads in one callback. uvloop reads
#: until the socket is empty (libuv: up to 32 reads of 64 KiB each time), so a burst filled a
#: subscription's queue before its reader ran once and the newest events were dropped.
READ_TURN: Final = 256 * 1024
#: Seconds :meth:`BrokerTransport.close` waits for what was sent to leave.
CLOSE_GRACE: Final = 5.0


class _Wire(asyncio.Protocol):
    """The asyncio side of :class:`BrokerTransport`: socket events to the transport."""

    def __init__(self, owner: BrokerTransport) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.writable = asyncio.Event()
        self.writable.set()
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._intake = 0  # bytes read since reading last gave way (READ_TURN)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.owner._feed(data)
        self._intake += len(data)
        if self._intake >= READ_TURN:
            self._give_way()

    def _give_way(self) -> None:
        """Stop reading until the loop has run what is ready (the readers of what was read)."""
        self._intake = 0
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._read_on)

    def _read_on(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def eof_received(self) -> bool | None:
        self.owner._feed(b"")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()
        if not self.gone.done():
            self.gone.set_result(None)
        self.owner._lost(CloseReason.SOCKET_ERROR, f"connection lost: {exc or 'closed'}")

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


#: How long, at most, a written message waits for others to share its syscall (the loop's work
#: since the first one was queued). Measured at 16 HTTP requests in flight, interleaved on a
#: quiet machine: 0.25 ms 3,524-3,649 req/s, 0.5 ms 3,703-4,178, 1 ms 2,842-2,853 (the stages
#: wait for each other again); 64 in flight: the same within noise, p99 lower from 0.5 ms.
COALESCE_SECONDS: Final = 0.0005
#: Confirmed publishes queued in one loop iteration wait for its end, up to this many: what
#: they wait for is their ACKs, which the broker sends once its input batch is journaled (and
#: fsynced), so one write of them is one journal write (one fsync) and one write of ACKs; the
#: broker's work per confirm is too small for sending them early to pay (PROTOCOL.md 5.12).
#: 64 in flight, fsync none, loaded 2 cores: broker CPU per confirm 19.5-22.3 -> 9.0-12.1 us.
CONFIRMS_HELD: Final = 1024


class BrokerTransport(Transport):
    """The TCP link to a busgate broker.

    Args:
        host: broker host.
        port: broker port (default 4000).
        name: post office name (default: ``anonymous`` in open mode).
        secret: the post office's secret; ``None`` uses open mode.
        mode: ``hmac-sha256`` (default with a secret), ``sha256`` (MOP authenticator) or ``open``.
        inbox: the reply group to ask for (``_INBOX.<id>``).
        reconnect: send ``manage.reconnect`` instead of ``manage.connect`` (MOP).
        connect_timeout: seconds for TCP connect plus the whole handshake.
        id_source: makes the connect id in sha256 mode (default: a UUID).
        tls: speak TLS with this context (``bus+tls://``; see :mod:`bus.link.tls`).
        socket_source: gives the connected socket to speak over instead of connecting to
            ``host:port`` (an in-process link: :meth:`bus.broker.Broker.local_link`).
    """

    confirms = True
    receipts = True
    writes_bodies = True
    writes_frames = True

    def __init__(
        self,
        host: str,
        port: int,
        *,
        name: str | None,
        secret: str | None,
        inbox: str,
        mode: str | None = None,
        reconnect: bool = False,
        connect_timeout: float = 5.0,
        id_source: Callable[[], str] | None = None,
        tls: ssl.SSLContext | None = None,
        socket_source: Callable[[], Awaitable[socket.socket]] | None = None,
    ) -> None:
        self.host = host
        self.tls = tls
        self._socket_source = socket_source
        self._heard = False  # any byte from the broker (a plain link to a TLS one gets none)
        self.port = port
        self.name = name or ""
        self.connect_timeout = connect_timeout
        self.info: SessionInfo | None = None
        self._conn = ClientConnection(
            name=self.name,
            secret=secret,
            inbox=inbox,
            mode=mode,
            reconnect=reconnect,
            now=time.monotonic(),
            id_source=id_source or new_id,
        )
        self._wire: _Wire | None = None
        self._on_message: MessageHandler = _ignore
        self._on_lost: LostHandler = _ignore
        self._calls: dict[str, asyncio.Future[Message]] = {}
        self._accepted: asyncio.Future[SessionInfo] | None = None
        self._closed: DisconnectedError | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._limits = Limits()
        self._out: list[bytes] = []
        self._out_since = 0.0  # when the oldest message in _out was written to it

    @property
    def mode(self) -> str:
        """How this link authenticates."""
        return self._conn.mode

    # -- opening -----------------------------------------------------------------------------

    async def open(self, on_message: MessageHandler, on_lost: LostHandler) -> SessionInfo:
        """Connect, authenticate and start the keepalive; see :meth:`Transport.open`."""
        loop = asyncio.get_running_loop()
        self._accepted = loop.create_future()
        try:
            async with asyncio.timeout(self.connect_timeout):
                if self._socket_source is not None:
                    sock = await self._socket_source()
                    _, protocol = await loop.create_connection(
                        lambda: _Wire(self),
                        sock=sock,
                        ssl=self.tls,
                        server_hostname=self.host if self.tls else None,
                    )
                else:
                    _, protocol = await loop.create_connection(
                        lambda: _Wire(self), self.host, self.port, ssl=self.tls
                    )
                self._wire = protocol
                # On uvloop a broker that refuses at the door (Disconnect CONNECTION_REFUSED at
                # once) may be heard before create_connection returns: the refusal is then
                # already in _accepted, and starting the handshake would be a ProtocolError.
                if not self._accepted.done():
                    self._conn.start()
                    self._write_connection()
                info = await self._accepted
        except TimeoutError as exc:
            self._give_up()
            raise ConnectError(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout:g} s"
            ) from exc
        except ssl.SSLError as exc:
            hint = (
                "is its certificate signed by a CA we trust (BUSGATE_BUS_TLS_CA)?"
                if isinstance(exc, ssl.SSLCertVerificationError)
                else "does the broker speak TLS? bus:// is plain, bus+tls:// is TLS"
            )
            raise ConnectError(
                f"TLS with {self.host}:{self.port} failed: {exc.reason or exc} ({hint})"
            ) from exc
        except OSError as exc:
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        except BaseException:  # refused, or cancelled (a client closed while reconnecting)
            self._give_up()
            raise
        self.info = info
        self._limits = Limits(max_size=max(info.max_message_size, 1024 * 1024))
        self._on_message, self._on_lost = on_message, on_lost
        self._keepalive = asyncio.create_task(self._keep_alive(), name="bus-keepalive")
        return info

    # -- the connection's events -------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if not self._heard:
            self._heard = bool(data)
        self._conn.receive_data(data, time.monotonic())
        self._drain()

    def _drain(self) -> None:
        """Handle every event the connection has, then write what it says."""
        conn = self._conn
        received = self._received
        while True:
            bodies = conn.next_messages()  # the usual input: messages, without an event each
            if bodies:
                for raw in bodies:
                    received(raw)
                continue
            event = conn.next_event()
            if event is wire.NEED_DATA:
                break
            if isinstance(event, Received):
                self._received(event.raw)
            elif isinstance(event, ReceiptReceived):
                if self.on_receipt is not None:
                    self.on_receipt(event.count, event.seq)
            elif isinstance(event, Accepted):
                if self._accepted is not None and not self._accepted.done():
                    self._accepted.set_result(event.info)
            elif isinstance(event, Closed):
                self._write_connection()
                self._closed_by(event)
                return
        self._write_connection()

    def _received(self, raw: bytes) -> None:
        message = read_message(raw, self._limits)  # decoded only when a field is read
        rid = message.rid
        if rid is not None:
            future = self._calls.pop(rid, None)
            if future is not None:
                if not future.done():
                    future.set_result(message)
                return
        self._on_message(message)

    def _closed_by(self, event: Closed) -> None:
        accepted = self._accepted
        if accepted is not None and not accepted.done():
            error = event.error or ConnectError(event.detail)
            if not self._heard and event.by_peer:
                error = self._closed_without_a_word()
            accepted.set_exception(error)
        self._lost(event.reason, event.detail)

    def _closed_without_a_word(self) -> ConnectError:
        """The broker closed the socket before it said anything: what that usually means."""
        why = (
            "a TLS broker does that to a plain link: use bus+tls://"
            if self.tls is None
            else "it wants a client certificate its CA signed: BUSGATE_BUS_TLS_CERT"
        )
        return ConnectError(f"{self.host}:{self.port} closed the connection without a word ({why})")

    # -- writing -----------------------------------------------------------------------------

    def _write_connection(self) -> None:
        """Write what the connection itself says (handshake, Pings, Disconnect)."""
        data = self._conn.data_to_send()
        if data and self._wire is not None and self._wire.transport is not None:
            self._flush_out()  # messages already queued go first
            with contextlib.suppress(RuntimeError):
                self._wire.transport.write(data)

    def _write(self, message: Message) -> None:
        data = encode_message(message)
        kind = event_kind(message)  # False: a confirmed publish
        self._put(data, kind is False)
        if kind is not None and self.on_written is not None:
            self.on_written(data if kind else None)

    def _put(self, data: bytes, confirmed: bool = False) -> None:
        """Queue one message body for the socket (see the coalescing below); a ``confirmed``
        publish waits for the end of the loop iteration (:data:`CONFIRMS_HELD`)."""
        info = self.info
        if info is not None and len(data) > info.max_message_size:
            raise LimitError("max_message_size", len(data), info.max_message_size)
        if self._closed is not None or self._wire is None or self._wire.transport is None:
            raise self._closed or DisconnectedError("not connected", CloseReason.SOCKET_ERROR)
        self._queue(wire.encode_message(data), confirmed)

    def _queue(self, frames: bytes, confirmed: bool = False) -> None:
        # Coalesced: what is written in one loop iteration goes out in one syscall, but no
        # message waits behind more than COALESCE_SECONDS of the loop's work. Holding a whole
        # iteration's requests until its end makes the processes downstream (broker, service)
        # wait, then all work at once: they run in turn instead of side by side.
        out = self._out
        out.append(frames)
        if len(out) == 1:
            asyncio.get_running_loop().call_soon(self._flush_out)
            self._out_since = time.monotonic()
        elif confirmed and len(out) < CONFIRMS_HELD:
            return  # with the iteration's other confirms: one journal write, one of ACKs
        elif time.monotonic() - self._out_since > COALESCE_SECONDS:
            self._flush_out()

    def _flush_out(self) -> None:
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        if self._wire is not None and self._wire.transport is not None:
            self._wire.transport.write(data)

    async def send(self, message: Message) -> None:
        """Send one message; see :meth:`Transport.send`."""
        self._write(message)
        if self._wire is not None and not self._wire.writable.is_set():
            # Written: a link lost while we wait here is reported through on_lost, not here.
            await self._wire.writable.wait()

    def write_now(self, frames: bytes) -> bool:
        """See :meth:`Transport.write_now`: not while the socket's buffer is full."""
        link = self._wire
        if link is None or link.transport is None or self._closed or not link.writable.is_set():
            return False
        self._queue(frames)
        return True

    async def send_event(self, raw: bytes) -> None:
        """Send an encoded event as it is; see :meth:`Transport.send_event`."""
        self._put(raw)
        if self.on_written is not None:
            self.on_written(raw)
        if self._wire is not None and not self._wire.writable.is_set():
            await self._wire.writable.wait()  # as send()

    async def call(self, cmd: str, args: Mapping[str, Any], timeout: float) -> Message:
        """A ``manage.*`` command answered by the broker; see :meth:`Transport.call`."""
        message = control_message(cmd, args)
        assert message.mid is not None
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._calls[message.mid] = future
        try:
            self._write(message)
            async with asyncio.timeout(timeout):
                reply = await future
        except TimeoutError as exc:
            raise RequestTimeout("central", timeout) from exc
        finally:
            self._calls.pop(message.mid, None)
        if reply.typ == MessageType.NAK.value:
            raise _nak_error(reply)
        return reply

    async def _keep_alive(self) -> None:
        while self._closed is None:
            await asyncio.sleep(until_tick(self._conn.ping_interval / 2))  # with other chores
            self._conn.tick(time.monotonic())
            self._drain()

    # -- closing -----------------------------------------------------------------------------

    def _lost(self, reason: CloseReason, detail: str) -> None:
        if self._closed is not None:
            return
        error = DisconnectedError(detail, reason)
        self._closed = error
        for future in self._calls.values():
            if not future.done():
                future.set_exception(error)
        self._calls.clear()
        accepted = self._accepted
        if accepted is not None and not accepted.done():
            # uvloop's TLS transport reports a refused client certificate as a loss, with no
            # end of stream first: the same silence as a closed socket, the same explanation.
            silent = not self._heard and self.tls is not None
            accepted.set_exception(
                self._closed_without_a_word() if silent else _early_loss(reason, detail)
            )
        elif self.info is not None:
            self._on_lost(error)
        if self._keepalive is not None and self._keepalive is not asyncio.current_task():
            self._keepalive.cancel()
        self._abort()

    def _give_up(self) -> None:
        """``open`` failed: close the socket. The handshake's future is nobody's any more: a
        cancellation inside ``create_connection`` leaves it pending, and the socket's loss
        would fail it with an error no one retrieves (asyncio logs those as errors)."""
        accepted = self._accepted
        if accepted is not None:
            if not accepted.done():
                accepted.cancel()
            elif not accepted.cancelled():
                accepted.exception()  # open() raises its own error
        self._abort()

    def _abort(self) -> None:
        if self._wire is not None and self._wire.transport is not None:
            self._wire.transport.close()

    async def close(self) -> None:
        """Send Disconnect(CLIENT_CLOSING) and close; see :meth:`Transport.close`.

        Returns once what was sent before has left (the socket closed after writing its
        buffer), or after :data:`CLOSE_GRACE` seconds: a program that publishes and then
        closes does not lose the tail of what it published.
        """
        if self._closed is None:
            self._conn.close(CloseReason.CLIENT_CLOSING, "closed by this client")
            self._drain()
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
        if self._wire is not None and not self._wire.gone.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._wire.gone), CLOSE_GRACE)
            except TimeoutError:  # a broker that reads nothing: give up on the rest
                if self._wire.transport is not None:
                    self._wire.transport.abort()


def _early_loss(reason: CloseReason, detail: str) -> Exception:
    """What ``open`` raises when the socket goes before the broker answered."""
    if reason is CloseReason.CONNECTION_REFUSED:
        return ConnectError(
            "the broker refused the connection (it is full, or this address is refused for a "
            "while: too many failed logins or sockets not logged in)"
        )
    return AuthError(f"the broker closed the link during the handshake: {detail}")


def _nak_error(reply: Message) -> NakError | RefusedError:
    text = reply.msg or ""
    if reply.rcd in (413, 429):
        details = reply.payload
        value, maximum = details.get("value"), details.get("maximum")
        return LimitError(
            str(details.get("limit", text)),
            value if isinstance(value, int) else None,
            maximum if isinstance(maximum, int) else None,
        )
    if reply.rcd == 403:
        return RefusedError(text)
    return NakError(text, reply.rcd, reply)


def _ignore(*_: object) -> None:
    return None
