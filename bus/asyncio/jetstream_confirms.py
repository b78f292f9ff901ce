"""Confirmed publishes on JetStream: each sent with its ``MID`` as ``Nats-Msg-Id`` and sent
again until the stream answers (``docs/PROTOCOL.md`` 10.1, "Confirmed publish").

A publish whose PubAck does not come within :data:`RESEND_AFTER` seconds is published again,
the same bytes with the same ``Nats-Msg-Id``: the stream stores it once (its duplicate window),
and the answer to any copy answers the publish. This is what carries a confirmed publish across
the death of the stream's leader while the link itself stays up: the publish sent to the dead
leader is never answered, the one sent after the election is. NATS's "no responders" (no stream
takes the subject now, as while a stream's only node is gone) and JetStream's 503 answers are
retried the same way for :data:`UNAVAILABLE_PATIENCE` seconds before they become the broker's
``NAK`` 503. Nothing is sent again after :data:`GIVE_UP_AFTER` seconds, well inside the stream's
120 s duplicate window, so a copy is never stored twice; the client has long reported a
timeout by then (and sends the same message again after a reconnection: ``bus.asyncio``'s
own retry).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from bus.message.message import Message

__all__ = ["GIVE_UP_AFTER", "RESEND_AFTER", "UNAVAILABLE_PATIENCE", "Confirms"]

log = logging.getLogger("bus.asyncio.nats")

#: Seconds without an answer after which a confirmed publish is published again.
RESEND_AFTER: Final = 2.0
#: Seconds a publish that "no stream takes" (or JetStream answers 503) is tried again.
UNAVAILABLE_PATIENCE: Final = 20.0
#: Seconds after its first send when a publish is no longer sent again (and forgotten).
GIVE_UP_AFTER: Final = 60.0
#: Seconds between two looks at what waits.
_TICK: Final = 0.25


@dataclass
class _Waiting:
    """One confirmed publish waiting for its answer."""

    answer: Message  # MID, RPY, ENC: what the broker's answer is built from
    subject: str
    data: bytes
    mid: str
    first: float
    due: float  # when it is sent again without an answer
    unavailable: bool = False  # "no stream takes it" answered to the last copy


class Confirms:
    """The confirmed publishes of one link (see the module doc).

    Args:
        nc: the link's NATS connection.
        acks: the subject prefix of the answers (``<prefix>._INBOX.<id>.js``).
        prefix: the bus's subject prefix (for the NAK's text).
        deliver: hands the answer that :meth:`acked` cannot return (a publish given up) to
            the client.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        nc: NatsClient,
        acks: str,
        prefix: str,
        deliver: Callable[[Message], None],
        clock: Callable[[], float],
    ) -> None:
        self.nc = nc
        self.acks = acks
        self.prefix = prefix
        self._deliver = deliver
        self._clock = clock
        self._waiting: dict[str, _Waiting] = {}  # the reply subject's last token -> publish
        self._numbers = itertools.count(1)
        self._resender: asyncio.Task[None] | None = None
        self.resent = 0  # copies sent again (manage.status, tests)

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
        now = self._clock()
        answer = Message({"MID": mid, "RPY": message.rpy, "ENC": message.enc.value})
        self._waiting[token] = _Waiting(answer, subject, data, mid, now, now + RESEND_AFTER)
        try:
            await self._send(token, self._waiting[token])
        except BaseException:
            self._waiting.pop(token, None)
            raise
        if self._resender is None or self._resender.done():
            self._resender = asyncio.get_running_loop().create_task(self._resend())

    async def _send(self, token: str, waiting: _Waiting) -> None:
        await self.nc.publish(
            waiting.subject,
            waiting.data,
            reply=f"{self.acks}.{token}",
            headers={"Nats-Msg-Id": waiting.mid},
        )

    def acked(self, msg: Msg) -> Message | None:
        """The broker's answer to a confirmed publish from the stream's PubAck, or None (not
        one of ours, or an answer that says "try again": it is sent again)."""
        token = msg.subject[len(self.acks) + 1 :]
        waiting = self._waiting.get(token)
        if waiting is None:
            return None
        if (msg.headers or {}).get("Status") == "503":  # no responders: no stream takes it now
            text = f"published but not stored: no JetStream stream holds {self.prefix}.evt.>"
            return self._unavailable(token, waiting, text)
        try:
            answer = json.loads(msg.data)
            if "error" in answer:
                error = answer["error"]
                text = error.get("description", "error") if isinstance(error, dict) else error
                code = error.get("code") if isinstance(error, dict) else None
                text = f"JetStream did not store it: {text}"
                if code == 503:
                    return self._unavailable(token, waiting, text)
                del self._waiting[token]
                return waiting.answer.nak(text, 503, src="central")
            args: dict[str, Any] = {"seq": int(answer["seq"]), "stream": str(answer["stream"])}
        except (ValueError, KeyError, TypeError) as exc:
            del self._waiting[token]
            return waiting.answer.nak(f"unreadable JetStream ack: {exc}", 502, src="central")
        del self._waiting[token]
        if answer.get("duplicate"):
            args["duplicate"] = True
        return waiting.answer.ack(args, src="central")

    def _unavailable(self, token: str, waiting: _Waiting, text: str) -> Message | None:
        now = self._clock()
        if now - waiting.first >= UNAVAILABLE_PATIENCE:
            del self._waiting[token]
            return waiting.answer.nak(text, 503, src="central")
        waiting.unavailable = True
        waiting.due = min(waiting.due, now + _TICK)  # soon: a leader may be elected meanwhile
        return None

    async def _resend(self) -> None:
        """Send again what waited too long, until nothing waits."""
        while self._waiting:
            await asyncio.sleep(_TICK)
            now = self._clock()
            for token, waiting in list(self._waiting.items()):
                if now - waiting.first >= GIVE_UP_AFTER:
                    del self._waiting[token]  # its caller has long timed out; never twice
                    if waiting.unavailable:
                        text = "published but not stored: JetStream did not take it"
                        self._deliver(waiting.answer.nak(text, 503, src="central"))
                    continue
                if now < waiting.due:
                    continue
                waiting.due = now + RESEND_AFTER
                self.resent += 1
                log.debug("confirmed publish %s unanswered: sent again", waiting.mid)
                try:
                    await self._send(token, waiting)
                except nats.errors.Error:
                    return  # the link is gone: the client sends it again on the next one

    def close(self) -> None:
        """The link is gone: the client sends what waits again on its next link."""
        self._waiting.clear()
        if self._resender is not None:
            self._resender.cancel()
