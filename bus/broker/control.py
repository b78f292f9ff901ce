"""The broker's control commands (``docs/PROTOCOL.md`` 5.5, 5.6), mixed into its driver.

A READY link's ``manage.*`` command is answered here rather than routed: subscriptions (and
their resumption from the journal), consumer groups, receipts, flush, and the management
commands of :mod:`bus.broker.management` for the post offices in ``BrokerConfig.managers``.
This mixin of :class:`bus.broker.server.Broker` also gives those commands what they read and
change of the broker (:class:`bus.broker.management.Broker`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bus.broker import management
from bus.broker.config import BrokerConfig
from bus.broker.handshake import Authority
from bus.broker.link import Link
from bus.broker.receipting import receipts_reply
from bus.broker.routing import INBOX_PREFIX, Router
from bus.errors import ConfigError, LimitError, RefusedError
from bus.frame.enums import CloseReason
from bus.message.message import Message, MessageType, encode_message

__all__ = [
    "RCD_BAD_REQUEST",
    "RCD_FORBIDDEN",
    "RCD_NO_SUCH_OFFICE",
    "RCD_TOO_MANY",
    "ControlCommands",
]

RCD_NO_SUCH_OFFICE: Final = 404
RCD_BAD_REQUEST: Final = 400
RCD_FORBIDDEN: Final = 403
RCD_TOO_MANY: Final = 429


class ControlCommands:
    """The ``manage.*`` commands of :class:`bus.broker.server.Broker`'s links, and what the
    management commands read and change of it.

    Last of the broker's bases: its stand-ins below give way to the methods they name.
    """

    config: BrokerConfig
    authority: Authority
    router: Router
    journal: Any
    stats: dict[str, int]
    started: float
    _links: dict[int, Link]

    def _resume(self, link: Link, message: Message, pattern: str, args: Any) -> Message:
        raise NotImplementedError  # the broker's (DurableSubscriptions)

    def _last(self, link: Link, message: Message, pattern: str) -> Message | None:
        raise NotImplementedError  # the broker's (HistoryCommands)

    def _history(self, link: Link, message: Message, args: Any) -> Message | None:
        raise NotImplementedError  # the broker's (HistoryCommands)

    def _presence_changed(self, link: Link, pattern: str, relay: bool) -> None:
        raise NotImplementedError  # the broker's (PresenceLinks)

    def _presence_snapshot(self, message: Message) -> Message:
        raise NotImplementedError  # the broker's (PresenceLinks)

    def _deliver(self, numbers: list[int], raw: bytes) -> None:
        raise NotImplementedError  # the broker's

    def _flush_dirty(self) -> None:
        raise NotImplementedError  # the broker's

    def _control(self, link: Link, message: Message, cmd: str) -> None:
        conn = link.conn
        assert conn is not None
        try:
            reply = self._control_reply(link, message, cmd)
            if reply is None:  # answered later (read off the loop: manage.history)
                return
        except LimitError as exc:
            details = {"limit": exc.limit, "value": exc.value, "maximum": exc.maximum}
            reply = message.nak(str(exc), RCD_TOO_MANY, payload=details)
        except RefusedError as exc:
            reply = message.nak(exc.reason, RCD_FORBIDDEN)
        except ConfigError as exc:
            reply = message.nak(str(exc), RCD_BAD_REQUEST)
        reply.frame["CMD"] = cmd
        conn.send_message(reply)

    def _control_reply(self, link: Link, message: Message, cmd: str) -> Message | None:
        args = message.payload
        if cmd in ("manage.subscribe", "manage.unsubscribe"):
            pattern = _text_arg(args, "pattern", "type")
            reply = self._subscription(link, message, cmd, pattern, args)
            self._presence_changed(link, pattern, args.get("relay") is True)  # 5.16
            return reply
        if cmd == "manage.presence":  # every bus client, for a gateway that connects (5.16)
            return self._presence_snapshot(message)
        if cmd == "manage.history":  # a page of the journal's events (5.15)
            return self._history(link, message, args)
        if cmd == "manage.receipts":  # receipts from now on, and what a resend may skip (5.12)
            link.receipts = True
            return receipts_reply(self.journal, message)
        if cmd == "manage.flush":  # everything this link sent before is routed (5.12)
            journal = self.journal
            return message.ack({"seq": journal.last_seq if journal is not None else 0})
        if cmd in ("manage.consume", "manage.leave"):
            group = _text_arg(args, "group")
            if cmd == "manage.consume":
                self.router.consume(link.number, group)
            else:
                self.router.leave(link.number, group)
            return message.ack({"group": group})
        if cmd in management.COMMANDS:
            office = self.router.office_of(link.number)
            if office not in self.config.managers:
                return message.nak(f"{office!r} is not a manager", RCD_FORBIDDEN)
            return management.handle(self, message, cmd)
        return message.nak(f"unknown command {cmd!r}", RCD_NO_SUCH_OFFICE)

    def _subscription(
        self, link: Link, message: Message, cmd: str, pattern: str, args: Any
    ) -> Message | None:
        if cmd == "manage.subscribe" and args.get("last") is True:  # last values (5.15)
            return self._last(link, message, pattern)
        if cmd == "manage.subscribe" and ("since" in args or "sinceTime" in args):
            return self._resume(link, message, pattern, args)
        if cmd == "manage.subscribe":
            self.router.subscribe(link.number, pattern)
        else:
            self.router.unsubscribe(link.number, pattern)
        return message.ack({"pattern": pattern})

    # -- management helpers (used by bus.broker.management) -----------------------------------

    def replace_config(self, config: BrokerConfig) -> None:
        """Swap in a new configuration (post offices and managers; limits stay as started)."""
        self.config = config
        self.authority.offices = dict(config.offices)
        self.authority.gateways = config.gateways

    def links_of(self, office: str) -> list[int]:
        """Link numbers connected as a post office."""
        return [
            number
            for number, link in self._links.items()
            if link.conn is not None and link.conn.office == office and link.registered
        ]

    def close_link(self, number: int, reason: CloseReason, detail: str) -> None:
        """Close one link from the broker's side."""
        link = self._links.get(number)
        if link is not None and link.conn is not None:
            link.conn.close(reason, detail)
            link.drain_events()

    def notify(self, number: int, cmd: str, payload: dict[str, Any]) -> None:
        """Tell one link something (an OAM notice on its inbox, from ``central``)."""
        held = self.router.holdings(number)
        inbox = next((g for g in held[2] if g.startswith(INBOX_PREFIX)), None) if held else None
        if inbox is None:
            return
        notice = Message.event(inbox, payload)
        notice.frame["TYP"] = MessageType.OAM.value
        notice.frame["CMD"] = cmd
        notice.src = management.CENTRAL
        self._deliver([number], encode_message(notice))
        self._flush_dirty()

    @property
    def links(self) -> Mapping[int, Link]:
        """The open links by number (read-only view for the management commands)."""
        return self._links

    @property
    def link_count(self) -> int:
        """Open links (authenticated or not)."""
        return len(self._links)

    def queued_bytes(self) -> int:
        """Bytes waiting in user-space queues over all links."""
        return sum(link.queued for link in self._links.values())


def _text_arg(args: Any, *names: str) -> str:
    for name in names:
        value = args.get(name)
        if isinstance(value, str) and value:
            return value
    raise ConfigError(f"missing argument {names[0]!r}")
