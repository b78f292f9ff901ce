"""One MOP post office's link to our central post office, sans-I/O (docs/PROTOCOL.md section 11).

:class:`MopConnection` is the link's state machine: bytes and the time go in, events and bytes
come out; no socket, no clock. The driver (:mod:`bus.mop.listener`) feeds it, answers its
:class:`ConnectRequested` with :meth:`~MopConnection.accept` or :meth:`~MopConnection.refuse`
after asking :class:`Admission`, and hands every :class:`Received` message to the bridge.

What the connection does itself, as MOP's ``CentralPostOffice`` does:

- the first message must be ``manage.connect`` or ``manage.reconnect`` to ``central.po``;
- the accept is a ``manage.connect`` (the first accept of that post office since we started)
  or ``manage.reconnect`` message carrying ``maxMessageSize`` and ``pingIntervalMS``;
- every ``pingIntervalMS`` it sends ``manage.ping``; the post office answers ``manage.pong``;
  a link silent for 1.5 intervals is closed (MOP's rule; any frame counts as a sign of life),
  once a ping has gone unanswered for half an interval: a driver that ticks late (a busy
  host) pings first and never closes a post office it has not asked;
- bytes that are no usable frame are skipped and reported (:class:`Skipped`), as MOP resyncs;
  more of them in a row than ``max_message_size`` (at least 64 KiB) close the link.

:class:`Admission` is shared by every link: the post offices' secrets (MOP's authenticator,
``B64(SHA-256(secret || poName || id))``) and the replay rule. MOP post offices restart their
id counter at ``AB.<po>`` and their authenticator covers only the id, so a recorded connect can be
replayed; the rule keeps both promises it can keep: while a post office has a live link, a new
connect is accepted only with an id counter above every id seen on that link (a replayed, older
connect is refused and the live link stays); with no live link any valid connect is accepted, so
a restarted post office is never locked out.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Final

from bus.errors import DecodeError, ProtocolError
from bus.link import auth
from bus.mop.codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    NEED_DATA,
    FrameReceived,
    FrameSkipped,
    MopDeframer,
    MopMessage,
    decode_message,
    encode_frame,
)

__all__ = [
    "CENTRAL",
    "TRANSITIONS",
    "Admission",
    "Closed",
    "ConnectRequested",
    "MopConnection",
    "MopEvent",
    "Received",
    "Skipped",
    "State",
    "id_counter",
]

#: The central post office's own address.
CENTRAL: Final = "central.po"
#: Skipped bytes tolerated between two usable frames (at least; else ``max_message_size``).
_MIN_GARBAGE: Final = 65536
_CONNECTS: Final = ("manage.connect", "manage.reconnect")


class State(Enum):
    """Where a link is."""

    AWAIT_CONNECT = auto()
    AUTHENTICATING = auto()
    READY = auto()
    CLOSED = auto()


class _Step(Enum):
    CONNECT = auto()
    ACCEPT = auto()
    CLOSE = auto()


#: The link's state machine, in one table: (state, step) -> next state.
TRANSITIONS: Final[Mapping[tuple[State, _Step], State]] = {
    (State.AWAIT_CONNECT, _Step.CONNECT): State.AUTHENTICATING,
    (State.AUTHENTICATING, _Step.ACCEPT): State.READY,
    **{(state, _Step.CLOSE): State.CLOSED for state in State if state is not State.CLOSED},
}


@dataclass(frozen=True)
class ConnectRequested:
    """A post office asks to connect; answer with ``accept`` or ``refuse``."""

    message: MopMessage
    reconnect: bool

    @property
    def post_office(self) -> str:
        """The post office's name (``test1`` of ``test1.po``)."""
        return self.message.post_office


@dataclass(frozen=True)
class Received:
    """A message from the ready post office, for the bridge."""

    message: MopMessage


@dataclass(frozen=True)
class Skipped:
    """Bytes that were no usable message were skipped (logged by the driver)."""

    reason: str
    size: int


@dataclass(frozen=True)
class Closed:
    """The link is closed (once); the driver closes the socket."""

    reason: str


MopEvent = ConnectRequested | Received | Skipped | Closed


def id_counter(message_id: str, post_office: str) -> int:
    """The counter of a MOP id ``B64(counter).<post office>``.

    Raises:
        DecodeError: not of that form, or of another post office.
    """
    counter, _, owner = message_id.partition(".")
    if owner != post_office or not counter:
        raise DecodeError(f"message id {message_id!r} is not <counter>.{post_office}")
    return auth.b64_decode_int(counter)


class MopConnection:
    """The central post office's side of one MOP link.

    Args:
        now: the time the socket was accepted (seconds, any clock).
        ping_interval: seconds between our ``manage.ping`` (default 5, MOP's).
        connect_timeout: seconds allowed until the connect message arrives (default 5).
        max_message_size: largest JSON body accepted and announced (default 1 MiB).
        ids: makes the ids of our own messages (default ``B64(n).cpo``, as MOP's central).
    """

    def __init__(
        self,
        now: float,
        *,
        ping_interval: float = 5.0,
        connect_timeout: float = 5.0,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        ids: auth.IdGenerator | None = None,
    ) -> None:
        self.state = State.AWAIT_CONNECT
        self.ping_interval = ping_interval
        self.connect_timeout = connect_timeout
        self.max_message_size = max_message_size
        self.ids = ids or auth.IdGenerator("cpo")
        self.post_office = ""
        self._deframer = MopDeframer(max_message_size)
        self._out: list[bytes] = []
        self._opened = now
        self._last_received = now
        self._last_ping = now
        self._ping_unanswered = False  # a ping was sent and nothing came since
        self._connect: MopMessage | None = None
        self._closed: Closed | None = None
        self._garbage = 0  # bytes skipped since the last usable frame

    def _step(self, step: _Step) -> None:
        target = TRANSITIONS.get((self.state, step))
        if target is None:
            raise ProtocolError(f"{step.name} not allowed in state {self.state.name}")
        self.state = target

    # -- input -------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Buffer bytes read from the socket (empty: the post office closed it)."""
        if self.state is State.CLOSED:
            return
        self._last_received = now
        self._ping_unanswered = False
        if not data:
            self._close("the post office closed the connection")
            return
        self._deframer.receive_data(data)

    def next_event(self) -> MopEvent | object:
        """The next event, or :data:`bus.mop.codec.NEED_DATA`."""
        while True:
            if self._closed is not None:
                closed, self._closed = self._closed, None
                return closed
            if self.state in (State.CLOSED, State.AUTHENTICATING):
                return NEED_DATA  # AUTHENTICATING: read on once the connect is answered
            frame = self._deframer.next_event()
            if isinstance(frame, FrameSkipped):
                self._garbage += frame.size
                if self._garbage > max(self.max_message_size, _MIN_GARBAGE):
                    self._close(f"{self._garbage} bytes without a usable frame")
                return Skipped(frame.reason, frame.size)
            if not isinstance(frame, FrameReceived):
                return NEED_DATA
            self._garbage = 0
            try:
                message = decode_message(frame.data)
            except DecodeError as exc:
                return Skipped(f"not a MOP message: {exc}", len(frame.data))
            event = self._message(message)
            if event is not None:
                return event

    def _message(self, message: MopMessage) -> MopEvent | None:
        if self.state is State.AWAIT_CONNECT:
            if message.to != CENTRAL or message.type not in _CONNECTS:
                self._close(f"first message was {message.type!r}, not manage.connect")
                return None
            self._step(_Step.CONNECT)
            self._connect = message
            self.post_office = message.post_office
            return ConnectRequested(message, message.type == "manage.reconnect")
        if message.to == CENTRAL and message.type == "manage.pong":
            return None  # its arrival already counted as life
        return Received(message)

    # -- answers -----------------------------------------------------------------------------

    def accept(self, first: bool) -> None:
        """Accept the connect: ``manage.connect`` (``first``) or ``manage.reconnect``."""
        if self.state is State.CLOSED:
            return
        self._step(_Step.ACCEPT)
        assert self._connect is not None
        fields: dict[str, Any] = {
            "maxMessageSize": self.max_message_size,
            "pingIntervalMS": round(self.ping_interval * 1000),
        }
        kind = "manage.connect" if first else "manage.reconnect"
        self.send(
            MopMessage(
                CENTRAL,
                self.ids.next(),
                to=self._connect.sender,
                type=kind,
                reply=self._connect.id,
                fields=fields,
            )
        )

    def refuse(self, reason: str) -> None:
        """Refuse the connect (MOP has no refusal message: the link is closed)."""
        self._close(f"connect refused: {reason}")

    def send(self, message: MopMessage) -> None:
        """Queue a message for the post office (ignored once closed)."""
        if self.state is not State.CLOSED:
            self._out.append(encode_frame(message))

    def data_to_send(self) -> bytes:
        """The bytes to write now (empties the queue)."""
        data = b"".join(self._out)
        self._out.clear()
        return data

    # -- time and closing --------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Advance time: ping every interval; close a silent link or a connect that never came."""
        if self.state is State.CLOSED:
            return
        if self.state is not State.READY:
            if self.state is State.AWAIT_CONNECT and now - self._opened > self.connect_timeout:
                self._close("no manage.connect within the connect timeout")
            return
        if (
            self._ping_unanswered
            and now - self._last_received > 1.5 * self.ping_interval
            and now - self._last_ping >= 0.5 * self.ping_interval
        ):
            self._close("no manage.pong for 1.5 ping intervals")
            return
        if now - self._last_ping >= self.ping_interval:
            self._last_ping = now
            self._ping_unanswered = True
            ping = MopMessage(
                CENTRAL, self.ids.next(), to=f"{self.post_office}.po", type="manage.ping"
            )
            self.send(ping)

    def close(self, reason: str) -> None:
        """Close from our side (shutdown, a newer link of the same post office)."""
        self._close(reason)

    def _close(self, reason: str) -> None:
        if self.state is State.CLOSED:
            return
        self._step(_Step.CLOSE)
        self._closed = Closed(reason)


@dataclass
class _Live:
    conn: Hashable
    counter: int


class Admission:
    """Who may connect: post office secrets, open mode and the replay rule (module docstring).

    Args:
        secret_of: the post office's secret bytes, or ``None`` when it has none (the broker's
            post office table: UTF-8 of the ``--office NAME:SECRET`` text).
        open_mode: whether a post office without a secret may connect unauthenticated.
    """

    def __init__(
        self, secret_of: Callable[[str], bytes | None], open_mode: Callable[[], bool]
    ) -> None:
        self.secret_of = secret_of
        self._open_mode = open_mode
        self._live: dict[str, _Live] = {}
        self._seen: set[str] = set()  # post offices accepted since we started

    def check(self, message: MopMessage, conn: Hashable) -> str | None:
        """Why this connect is refused, or ``None`` when it may be accepted."""
        post_office = message.post_office
        secret = self.secret_of(post_office)
        if secret is None:
            return None if self._open_mode() else auth.LOGIN_REFUSED
        authenticator = message.fields.get("authenticator")
        if not isinstance(authenticator, str) or not auth.verify_mop_authenticator(
            secret, post_office, message.id, authenticator
        ):
            return auth.LOGIN_REFUSED
        try:
            counter = id_counter(message.id, post_office)
        except DecodeError as exc:
            return str(exc)
        live = self._live.get(post_office)
        if live is not None and live.conn != conn and counter <= live.counter:
            return (
                f"message id {message.id!r} is not newer than the live link's ids: "
                "a replayed connect"
            )
        return None

    def accepted(self, message: MopMessage, conn: Hashable) -> tuple[bool, Hashable | None]:
        """Record an accepted connect.

        Returns:
            (first accept of this post office since we started, the link it displaces or None).
        """
        post_office = message.post_office
        first = post_office not in self._seen
        self._seen.add(post_office)
        try:
            counter = id_counter(message.id, post_office)
        except DecodeError:  # open mode: any id
            counter = 0
        previous = self._live.get(post_office)
        self._live[post_office] = _Live(conn, counter)
        displaced = previous.conn if previous is not None and previous.conn != conn else None
        return first, displaced

    def observe(self, post_office: str, conn: Hashable, message_id: str) -> None:
        """A message of the live link: its id raises the bar for a new connect."""
        live = self._live.get(post_office)
        if live is None or live.conn != conn:
            return
        try:
            live.counter = max(live.counter, id_counter(message_id, post_office))
        except DecodeError:
            pass

    def gone(self, post_office: str, conn: Hashable) -> None:
        """The link closed; the post office has no live link unless a newer one took over."""
        live = self._live.get(post_office)
        if live is not None and live.conn == conn:
            del self._live[post_office]

    def live(self, post_office: str) -> bool:
        """Whether the post office has a live link."""
        return post_office in self._live

    def connected(self) -> list[str]:
        """Post offices with a live link, sorted."""
        return sorted(self._live)
