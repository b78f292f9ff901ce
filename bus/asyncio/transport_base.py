"""The link the client talks through: the :class:`Transport` interface.

:class:`bus.asyncio.client.Client` does correlation, reconnection, buffering and subscriptions;
a transport only carries messages and the few operations a bus needs from the other side
(subscribe, consume, management calls). The NATS transport (:mod:`bus.asyncio.nats`)
implements the same interface; tests can swap in their own. The client builds one per
(re)connection.

What a transport must do for the client:

- ``open``: connect, authenticate, and from then on hand every incoming message to
  ``on_message`` (except the answers to its own ``call``), and call ``on_lost`` once when the
  link is lost;
- ``call`` with ``manage.subscribe {pattern}``, ``manage.unsubscribe {pattern}``,
  ``manage.consume {group}`` (competing consumer: one of the group's consumers gets each
  message), ``manage.leave {group}``; the inbox group given to the constructor is consumed
  from ``open`` on; other ``manage.*`` commands may be refused with a NAK;
- ``send``: route a message by PROTOCOL.md 5.1 (events to subscribers by pattern, TGT to a
  post office, GRP to one consumer or all with Flag.ALL), and answer a request to a group with
  no consumer with the broker's "no responders" NAK (RCD 503, SRC ``central``) if it can.

The broker's TCP transport (:class:`bus.asyncio.transport.BrokerTransport`) is one; this module
holds only the interface and the handlers it calls, so an implementation can import it alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from bus.errors import DisconnectedError
from bus.link.connection import SessionInfo
from bus.message.message import Message, read_message

__all__ = [
    "LostHandler",
    "MessageHandler",
    "ReceiptHandler",
    "SessionInfo",
    "Transport",
    "WrittenHandler",
]

#: Called with every message the link receives (not the replies to its own control calls).
MessageHandler = Callable[[Message], None]
#: Called once when an open link is lost, with the error pending operations should raise.
LostHandler = Callable[[DisconnectedError], None]
#: Called for every event (TYP=EVT) written on the link: its bytes as written, or None for a
#: confirmed publish (5.12).
WrittenHandler = Callable[[bytes | None], None]
#: Called with each publish receipt: (events taken on this link, the journal's seq) (5.12).
ReceiptHandler = Callable[[int, int], None]


class Transport(ABC):
    """One link to the bus. Opened once; a new transport is made for each reconnection."""

    #: Whether the other end confirms a publish once journaled (PROTOCOL.md 5.12).
    confirms: bool = False
    #: Whether durable subscriptions are fed by the transport's own stream consumer: every
    #: event they get carries ``RPL`` and ``SEQ``, and live copies without them are for the
    #: plain subscriptions only (NATS with JetStream, PROTOCOL.md 10.1).
    streams: bool = False
    #: Whether the other end can send publish receipts (``manage.receipts``, 5.12).
    receipts: bool = False
    #: Whether a new link may go to another server than this one (a NATS cluster, 10.4): after
    #: losing a link that was up a while, the client tries again at once, not after a backoff.
    alternatives: bool = False
    #: Whether :meth:`send_event` writes an encoded event as it is, so the client encodes an
    #: event straight to bytes (:func:`bus.message.message.encode_event`) instead of building it.
    writes_bodies: bool = False
    #: Whether :meth:`write_now` writes a message's frames as they are (the broker's link).
    writes_frames: bool = False
    #: Set by the client before ``open`` when it keeps unreceipted events (5.12).
    on_written: WrittenHandler | None = None
    on_receipt: ReceiptHandler | None = None

    @abstractmethod
    async def open(self, on_message: MessageHandler, on_lost: LostHandler) -> SessionInfo:
        """Connect and authenticate.

        Raises:
            ConnectError: cannot connect within the deadline, or refused (the broker is full,
                or refuses this address for a while).
            AuthError: authentication refused.
        """

    @abstractmethod
    async def send(self, message: Message) -> None:
        """Send one message (waits only while the OS buffer is full).

        Raises:
            DisconnectedError: the link is down; nothing was written.
            LimitError: the message is larger than the broker's ``max_message_size``.
        """

    def write_now(self, frames: bytes) -> bool:
        """Write the frames of one message (:meth:`bus.message.message.Message.ack_frame`) at
        once when the link takes them without waiting; False: nothing was written (a transport
        whose :attr:`writes_frames` is False never does), send the message with :meth:`send`."""
        return False

    async def send_event(self, raw: bytes) -> None:
        """Send an unconfirmed event given as its encoded body (the publish path); by default
        it is read back and sent as :meth:`send` sends a message.

        Raises:
            DisconnectedError, LimitError: as :meth:`send`.
        """
        await self.send(read_message(raw))

    @abstractmethod
    async def call(self, cmd: str, args: Mapping[str, Any], timeout: float) -> Message:
        """A control command to the other side (``manage.subscribe``, ``manage.status``, ...).

        Returns:
            The ACK.

        Raises:
            NakError: answered with a NAK (LimitError for 413/429, RefusedError for 403).
            RequestTimeout: no answer within ``timeout``.
            DisconnectedError: the link went down.
        """

    @abstractmethod
    async def close(self) -> None:
        """Close the link politely (Disconnect CLIENT_CLOSING); idempotent."""
