"""One MOP post office on the bus: its messages both ways (docs/PROTOCOL.md section 11.3).

A connected MOP post office ``test1`` gets a bus client of its own, named ``test1`` (so bus mail
to ``test1.<mailbox>`` reaches it), held by a :class:`PostOfficeSession`:

===============================================  ============================================
MOP post office sends                             on the bus
===============================================  ============================================
a published message (no ``to``), ``type`` T       an event (TYP=EVT), GRP = T, SRC = ``from``
direct mail to ``po.mailbox`` (``expect``)        mail: TGT, SRC, CMD = ``type``, RPY if expect
a reply (``reply`` = the id we gave a bus mail)   the ACK of that mail, to its RPY
``manage.subscribe``/``unsubscribe`` to ``X.po``  snooped (a bus subscription to T), then mail
``manage.status``/``write``/``add``/``delete``/   the broker's ``manage.*`` command; the answer
``monitor`` to ``central.po``                     comes back as a MOP message of that type
``manage.connected`` to ``central.po``            answered: ``postOffices``, the MOP links
mail to ``central.<group>``                       a request to the group; its answers come back
                                                  as replies (:mod:`bus.mop.services`)
===============================================  ============================================

The other way: an event of type T reaches the post office once for each MOP subscription
(source S, type T) that matches it, as a published message ``from`` S (MOP routes publications by
source): an event with ``SRC`` = S, or a bus-native event (no ``SRC``), which has no source of its
own. Bus mail to ``test1.<any mailbox>`` becomes direct mail, and the post office's reply (its
``reply`` = our id) becomes the mail's ACK. Content fields map with Kestrel's JSON rules (PLD to
JSON, JSON to PLD); text must fit Latin-1 (the bus's text, PROTOCOL.md 1.3): a message with
other characters is refused with a WARNING (and an ``error`` reply when a reply is expected).
Encrypted fields (``secure``) are not supported and refused the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bus.asyncio.client import Client, Subscription
from bus.discovery.topics import check_pattern, matches
from bus.errors import BusError, ConfigError, DecodeError, EncodeError, NakError, RequestTimeout
from bus.frame.frame import DataFrame
from bus.link import auth
from bus.message.message import Message, MessageType
from bus.mop.codec import MopMessage
from bus.mop.content import fields_of, frame_of
from bus.mop.protocol import CENTRAL
from bus.mop.services import serve_mail, service_group

__all__ = [
    "DEFAULT_MAIL_TIMEOUT",
    "MopSubscription",
    "PostOfficeSession",
    "fields_of",
    "frame_of",
]

log = logging.getLogger(__name__)

#: Seconds a MOP post office's direct mail waits for a bus reply (and a bus mail for the post
#: office's reply) before the sender gets an ``error`` answer.
DEFAULT_MAIL_TIMEOUT: Final = 60.0
#: Seconds a forwarded ``manage.subscribe`` waits before we answer it ourselves.
_SUBSCRIBE_TIMEOUT: Final = 5.0
_AWAITING_MAX: Final = 10_000
#: Publication ids remembered per link, to drop the copies a post office sends.
_PUBLISHED_MEMORY: Final = 1024
_MANAGE_COMMANDS: Final = frozenset(
    {"manage.status", "manage.write", "manage.add", "manage.delete", "manage.monitor"}
)
_SUBSCRIPTION_TYPES: Final = ("manage.subscribe", "manage.unsubscribe")


@dataclass(frozen=True, order=True)
class MopSubscription:
    """A MOP subscription the central post office snooped: ``requestor`` wants ``type`` from
    ``source`` (both ``po.mailbox``; ``type`` is ``major`` or ``major.minor``)."""

    source: str
    type: str
    requestor: str


class PostOfficeSession:
    """The bus side of one connected MOP post office.

    Args:
        post_office: the post office's name.
        client: its bus client (named ``post_office``), connected.
        send: queues a MOP message for the post office.
        subscriptions: the listener's MOP subscriptions of this post office (kept across its
            reconnections, as MOP's central post office keeps its snooped table).
        connected: the post offices with a live MOP link (for ``manage.connected``).
        ids: makes the ids of the messages we send it.
        mail_timeout: see :data:`DEFAULT_MAIL_TIMEOUT`.
        on_lost: called once when the bus client's link is lost (the MOP link is then closed,
            and the post office reconnects).
        held: whether a subscription (source, type) at this post office is still wanted by
            someone else (the listener's own, PROTOCOL.md 11.4, or another MOP subscriber's):
            a ``manage.unsubscribe`` of it is answered here, not passed on, since the post
            office would drop it for everyone.
    """

    def __init__(
        self,
        post_office: str,
        client: Client,
        send: Callable[[MopMessage], None],
        subscriptions: set[MopSubscription],
        connected: Callable[[], list[str]],
        ids: auth.IdGenerator,
        *,
        mail_timeout: float = DEFAULT_MAIL_TIMEOUT,
        on_lost: Callable[[], None] = lambda: None,
        held: Callable[[str, str], bool] = lambda source, type_: False,
    ) -> None:
        self.post_office = post_office
        self.client = client
        self._send = send
        self.subscriptions = subscriptions
        self._connected = connected
        self._ids = ids
        self.mail_timeout = mail_timeout
        self._on_lost = on_lost
        self._held = held
        self._published: OrderedDict[str, None] = OrderedDict()  # recent publication ids
        self._patterns: dict[str, Subscription] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._awaiting: OrderedDict[str, Message] = OrderedDict()  # our MOP id -> bus mail
        self._stopped = False

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the catch-all mailbox and the bus subscriptions of the known MOP subscriptions."""
        mailbox = await self.client.mailbox("*")
        self._spawn(self._mail_loop(mailbox))
        for pattern in sorted({sub.type for sub in self.subscriptions}):
            await self._follow(pattern)

    async def stop(self) -> None:
        """Stop the tasks and close the bus client (the MOP subscriptions are kept)."""
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.close()

    def _spawn(self, coro: Awaitable[object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- MOP -> bus --------------------------------------------------------------------------

    def handle(self, message: MopMessage) -> None:
        """A message from the post office (the connection already handled ``manage.pong``)."""
        if message.post_office != self.post_office:
            log.warning(
                "MOP post office %s sent a message from %r: refused",
                self.post_office,
                message.sender,
            )
            return
        if message.secure is not None:
            self._refuse(message, "encrypted MOP fields (secure) are not supported", 415)
            return
        if message.to is None:
            if self._seen(message.id):
                return  # a copy: the post office sends one per subscription bucket it matched
            self._spawn(self._publish(message))
        elif message.to == CENTRAL:
            self._spawn(self._manage(message))
        elif message.reply is None and (group := service_group(message.to)) is not None:
            self._spawn(self._serve(message, group))
        elif message.type in _SUBSCRIPTION_TYPES and message.reply is None:
            self._spawn(self._subscription(message))
        elif message.reply is not None and message.reply in self._awaiting:
            self._spawn(self._answer(message, self._awaiting.pop(message.reply)))
        else:
            self._spawn(self._mail(message))

    def _seen(self, message_id: str) -> bool:
        """Whether a publication with this id came already (on this link: a post office that
        started again counts its ids from 1 again, on a new link). MOP's post office delivers a
        publication of type ``a.b`` once to each of the buckets ``a.b`` and ``a`` it is in."""
        if message_id in self._published:
            return True
        self._published[message_id] = None
        if len(self._published) > _PUBLISHED_MEMORY:
            self._published.popitem(last=False)
        return False

    def _refuse(self, message: MopMessage, text: str, rcd: int) -> None:
        log.warning("MOP message %s from %s refused: %s", message.id, message.sender, text)
        if message.to is not None and message.expect:
            self._reply(message, {"error": text, "rcd": rcd})

    def _reply(
        self, message: MopMessage, fields: Mapping[str, Any], type_: str | None = None
    ) -> None:
        """Answer ``message`` as its addressee (``from`` = its ``to``)."""
        self._send(
            MopMessage(
                message.to or CENTRAL,
                self._ids.next(),
                to=message.sender,
                type=type_ or message.type,
                reply=message.id,
                fields=dict(fields),
            )
        )

    def _frame(self, message: MopMessage) -> DataFrame | None:
        try:
            return frame_of(message.fields)
        except EncodeError as exc:
            self._refuse(message, f"content the bus cannot carry: {exc}", 400)
            return None

    async def _publish(self, message: MopMessage) -> None:
        type_ = message.type or ""
        try:
            tokens = check_pattern(type_)
        except ConfigError as exc:
            self._refuse(message, f"a publication needs a major.minor type: {exc}", 400)
            return
        if any(token in ("*", ">") for token in tokens):
            self._refuse(message, f"a publication type has no wildcards: {type_!r}", 400)
            return
        frame = self._frame(message)
        if frame is None:
            return
        event = Message.event(type_, frame)
        event.frame.add("SRC", message.sender)
        try:
            await self.client.send(event)
        except BusError as exc:
            log.warning("publication %s of %s not sent: %s", message.id, message.sender, exc)

    async def _mail(
        self, message: MopMessage, timeout: float | None = None, answer_failures: bool = True
    ) -> bool:
        """Send ``message`` as bus mail; when a reply is expected, pass it back.

        Returns:
            True when the post office was answered (the reply, or a failure it is told of).
        """
        assert message.to is not None
        frame = self._frame(message)
        if frame is None:
            return message.expect
        mailbox = message.sender.partition(".")[2] or "po"
        try:
            reply = await self.client.mail(
                message.to,
                frame,
                expect=message.expect,
                cmd=message.type,
                mailbox=mailbox,
                timeout=self.mail_timeout if timeout is None else timeout,
            )
        except NakError as exc:
            failure: dict[str, Any] = {"error": exc.msg or "refused", "rcd": exc.rcd or 500}
        except RequestTimeout as exc:
            failure = {"error": f"no reply within {exc.timeout:g} s", "rcd": 504}
        except BusError as exc:
            failure = {"error": str(exc), "rcd": exc.status_hint}
        else:
            if reply is None:
                return False
            self._reply(message, fields_of(reply.payload), reply.cmd)
            return True
        if message.expect and answer_failures:
            self._reply(message, failure)
            return True
        return False

    async def _serve(self, message: MopMessage, group: str) -> None:
        """Mail to ``central.<group>``: a request to the group (PROTOCOL.md 11.5)."""
        frame = self._frame(message)
        if frame is None:
            return

        def reply(fields: Mapping[str, Any], type_: str | None) -> None:
            self._reply(message, fields, type_)

        await serve_mail(self.client, message, group, frame, reply, self.mail_timeout)

    async def _subscription(self, message: MopMessage) -> None:
        """Snoop a ``manage.subscribe``/``unsubscribe``, then pass it to its source post office."""
        source, type_ = message.fields.get("source"), message.fields.get("type")
        requestor = message.fields.get("requestor")
        if not (isinstance(source, str) and isinstance(type_, str) and isinstance(requestor, str)):
            self._refuse(message, "manage.subscribe needs source, type and requestor", 400)
            return
        sub = MopSubscription(source, type_, requestor)
        try:
            if message.type == "manage.subscribe":
                self.subscriptions.add(sub)
                await self._follow(type_)
            else:
                self.subscriptions.discard(sub)
                await self._unfollow(type_)
        except BusError as exc:
            log.warning("MOP subscription %s of %s: %s", sub, self.post_office, exc)
        # The source post office (a MOP one, on any listener) learns that it should send what it
        # publishes. When nobody answers (a bus-native source, no such post office), we do, so
        # the subscriber stops resending.
        forwarded = MopMessage(**{**message.__dict__, "expect": True})
        answered = await self._mail(forwarded, timeout=_SUBSCRIBE_TIMEOUT, answer_failures=False)
        if message.expect and not answered:
            self._reply(message, {})

    async def _answer(self, message: MopMessage, request: Message) -> None:
        """The post office replied to a bus mail we delivered: the mail's ACK."""
        frame = self._frame(message)
        if frame is None:
            return
        ack = request.ack(frame)
        ack.frame.add("SRC", message.sender)
        if message.type is not None:
            ack.frame.add("CMD", message.type)
        with contextlib.suppress(BusError):
            await self.client.send(ack)

    async def _manage(self, message: MopMessage) -> None:
        kind = message.type or ""
        if kind == "manage.connected":
            self._reply(message, {"postOffices": ",".join(self._connected())})
            return
        if kind in ("manage.connect", "manage.reconnect"):
            log.info("MOP post office %s connected again on its live link: ignored", message.sender)
            return
        if kind not in _MANAGE_COMMANDS:
            log.warning("MOP post office %s sent unknown %r to central.po", message.sender, kind)
            return
        try:
            args = _manage_args(kind, message.fields)
        except ValueError as exc:
            self._reply(message, {"error": str(exc), "rcd": 400})
            return
        try:
            ack = await self.client.manage(kind, args)
        except NakError as exc:
            self._reply(message, {"error": exc.msg or str(exc), "rcd": exc.rcd or 500})
        except BusError as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            self._reply(message, {"error": reason, "rcd": exc.status_hint})
        else:
            self._reply(message, fields_of(ack.payload))

    # -- bus -> MOP --------------------------------------------------------------------------

    async def _follow(self, pattern: str) -> None:
        if pattern in self._patterns:
            return
        try:
            check_pattern(pattern)
        except ConfigError as exc:
            log.warning("MOP subscription to %r cannot be followed on the bus: %s", pattern, exc)
            return
        sub = await self.client.subscribe(pattern)
        self._patterns[pattern] = sub
        self._spawn(self._event_loop(pattern, sub))

    async def _unfollow(self, pattern: str) -> None:
        if any(sub.type == pattern for sub in self.subscriptions):
            return
        sub = self._patterns.pop(pattern, None)
        if sub is not None:
            await sub.unsubscribe()

    async def _event_loop(self, pattern: str, sub: Subscription) -> None:
        with contextlib.suppress(BusError):
            async for event in sub:
                if event.typ != MessageType.EVT.value:
                    continue
                grp = event.grp or ""
                # Several followed patterns may match: the first of them (sorted) delivers.
                first = min((p for p in self._patterns if matches(p, grp)), default=pattern)
                if first == pattern:
                    self._deliver_event(event, grp)

    def _deliver_event(self, event: Message, grp: str) -> None:
        src = event.src
        if src is not None and src.partition(".")[0] == self.post_office:
            return  # its own publication: the post office delivered it locally
        sources = _sources(self.subscriptions, grp, src)
        if not sources:
            return
        fields = fields_of(event.payload)
        for source in sources:
            self._send(MopMessage(source, self._ids.next(), type=grp, fields=fields))

    async def _mail_loop(self, mailbox: Subscription) -> None:
        try:
            async for mail in mailbox:
                self._deliver_mail(mail)
        except BusError as exc:
            log.info("bus link of MOP post office %s lost: %s", self.post_office, exc)
        if not self._stopped:
            self._on_lost()

    def _deliver_mail(self, mail: Message) -> None:
        target = mail.tgt or f"{self.post_office}.po"
        expect = mail.typ == MessageType.RQS.value and bool(mail.rpy)
        fields = fields_of(mail.payload)
        cmd = mail.frame.get("CMD")
        if cmd == "manage.unsubscribe" and target == f"{self.post_office}.po":
            source, type_ = fields.get("source"), fields.get("type")
            if isinstance(source, str) and isinstance(type_, str) and self._held(source, type_):
                # The post office keeps one entry per (source, type) for all of central's
                # subscribers: passing this on would cut the others' too (PROTOCOL.md 11.4).
                if expect:
                    self._spawn(self._send_quietly(mail.ack({})))
                return
        if isinstance(cmd, str) and fields.get("CMD") == cmd:
            del fields["CMD"]  # Kestrel carries the command in the payload too
        mop_id = self._ids.next()
        if expect:
            self._awaiting[mop_id] = mail
            while len(self._awaiting) > _AWAITING_MAX:
                self._awaiting.popitem(last=False)
            self._spawn(self._expire(mop_id))
        self._send(
            MopMessage(
                mail.src or CENTRAL,
                mop_id,
                to=target,
                type=cmd if isinstance(cmd, str) else None,
                expect=expect,
                fields=fields,
            )
        )

    async def _send_quietly(self, message: Message) -> None:
        with contextlib.suppress(BusError):
            await self.client.send(message)

    async def _expire(self, mop_id: str) -> None:
        await asyncio.sleep(self.mail_timeout)
        request = self._awaiting.pop(mop_id, None)
        if request is not None:
            text = (
                f"MOP post office {self.post_office} did not reply within {self.mail_timeout:g} s"
            )
            with contextlib.suppress(BusError):
                await self.client.send(request.nak(text, 504))


def _sources(subscriptions: Iterable[MopSubscription], grp: str, src: str | None) -> list[str]:
    """The sources to deliver an event from: one per distinct matching subscription source."""
    found = {
        sub.source
        for sub in subscriptions
        if matches(sub.type, grp) and (src is None or src == sub.source)
    }
    return sorted(found)


def _manage_args(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The broker command's arguments from a MOP management message's fields.

    Raises:
        ValueError: a field is missing or malformed.
    """
    if kind == "manage.add":
        secret = fields.get("secret")
        name = fields.get("name")
        if not isinstance(name, str) or not isinstance(secret, str):
            raise ValueError("manage.add needs name and secret")
        try:  # MOP sends the secret in MOP Base64; our post offices hold its UTF-8 text
            text = auth.b64_decode(secret).decode("utf-8")
        except (DecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"the secret is not MOP Base64 of UTF-8 text: {exc}") from exc
        return {"name": name, "secret": text, "manager": bool(fields.get("manager", False))}
    if kind == "manage.delete":
        return {"name": fields.get("name")}
    return {}
