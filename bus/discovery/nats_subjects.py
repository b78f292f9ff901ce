"""The bus on NATS subjects (``docs/PROTOCOL.md`` section 10): pure functions, no I/O.

The NATS transport (:mod:`bus.asyncio.nats`) only publishes and subscribes; which subject a
message goes to, what a subscription pattern or a group subscribes to, and how NATS's "no
responders" status becomes the broker's NAK are decided here (``prefix`` defaults to ``bus``):

- an event or heartbeat (``TYP=EVT``/``HBT``) of type ``sensor.temp`` -> ``bus.evt.sensor.temp``;
  a pattern keeps its ``*``/``>`` wildcards, and a MOP major type ``sensor`` is two subjects,
  ``bus.evt.sensor`` and ``bus.evt.sensor.>``;
- a message to group ``demo`` -> ``bus.grp.demo``, consumed with a *queue subscription* (queue
  ``demo``: competing consumers); with ``Flag.ALL`` -> ``bus.all.demo``, a plain subscription
  that every consumer holds;
- a response to an inbox ``_INBOX.<id>`` -> ``bus._INBOX.<id>`` (under the prefix, so a journal
  recorder of one bus never sees another bus's responses);
- direct mail to ``office.box`` -> ``bus.po.office`` (queue ``po``);
- a request with our inbox in ``RPY`` is published with the NATS reply subject
  ``bus._INBOX.<id>.<kind>.<ENC>.<MID>``: when nobody subscribes, the NATS server answers there
  with status 503 ("no responders") and the transport turns it into the broker's answer, a NAK
  503 ``no responders`` from ``central`` (a NAK 404 ``no post office`` for mail).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from bus.discovery.topics import INBOX_PREFIX, check_pattern
from bus.errors import ConfigError
from bus.link.bus_url import parse_bus_url
from bus.message.message import Message, MessageType

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_REPLICAS",
    "NO_RESPONDERS_STATUS",
    "Route",
    "event_subjects",
    "group_subjects",
    "inbox_subject",
    "journal_subjects",
    "no_responders",
    "office_subject",
    "route",
    "split_url",
    "url_prefix",
    "url_replicas",
    "url_stream",
]

#: First token of every subject the bus uses (besides inboxes).
DEFAULT_PREFIX: Final = "bus"
#: The most replicas a JetStream stream may have.
MAX_REPLICAS: Final = 5
#: What the NATS server puts in the Status header when nobody subscribes to a request.
NO_RESPONDERS_STATUS: Final = "503"
_EVENTS: Final = frozenset({MessageType.EVT.value, MessageType.HBT.value})
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]+")
_BAD_SUBJECT: Final = re.compile(r"[\s*>]|^\.|\.$|\.\.")
# The kind token of a reply subject: mail, a request to a group (answers to our inbox), one
# for another inbox (a leaving consumer's), a request and mail whose answers go to a group (RPY
# a group name).
_MAIL, _GROUP, _FORWARD, _TO_GROUP, _MAIL_TO_GROUP = "m", "r", "f", "g", "n"


@dataclass(frozen=True)
class Route:
    """Where one message goes on NATS.

    Attributes:
        subject: the subject to publish on.
        reply: the NATS reply subject (for the no-responders status), or None.
    """

    subject: str
    reply: str | None = None


def _valid(subject: str) -> bool:
    return bool(subject) and _BAD_SUBJECT.search(subject) is None


def event_subjects(pattern: str, prefix: str = DEFAULT_PREFIX) -> tuple[str, ...]:
    """The subjects one subscription pattern (``docs/PROTOCOL.md`` 5.3) subscribes to.

    Args:
        pattern: ``sensor`` (major type), ``sensor.temp``, ``sensor.*``, ``*.temp``, ``>``.
        prefix: the subject prefix.

    Returns:
        One subject, or two for a major type (the type itself and everything under it).

    Raises:
        ConfigError: a malformed pattern.
    """
    tokens = check_pattern(pattern)
    if any(not _valid(token) for token in tokens if token not in ("*", ">")):
        raise ConfigError(f"bad pattern {pattern!r}: not usable as a NATS subject")
    if len(tokens) == 1 and tokens[0] not in ("*", ">"):
        return (f"{prefix}.evt.{pattern}", f"{prefix}.evt.{pattern}.>")
    return (f"{prefix}.evt.{pattern}",)


def group_subjects(group: str, prefix: str = DEFAULT_PREFIX) -> tuple[str, str]:
    """The two subjects a consumer of ``group`` subscribes to.

    Returns:
        ``(queue subject, all subject)``: the first with a queue subscription (one consumer
        gets each message), the second plain (``Flag.ALL``: every consumer gets it).

    Raises:
        ConfigError: a malformed group name.
    """
    check_pattern(group)
    queue, everyone = f"{prefix}.grp.{group}", f"{prefix}.all.{group}"
    if not _valid(queue.replace("*", "x").replace(">", "x")):
        raise ConfigError(f"bad group {group!r}: not usable as a NATS subject")
    return queue, everyone


def inbox_subject(inbox: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The subject of an inbox's responses (``_INBOX.abc`` goes to ``bus._INBOX.abc``)."""
    return f"{prefix}.{inbox}"


def office_subject(office: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The subject of a post office's mail (``office.mailbox`` goes to ``bus.po.office``)."""
    return f"{prefix}.po.{office}"


def route(message: Message, inbox: str, prefix: str = DEFAULT_PREFIX) -> Route | None:
    """Map a message to its subject by ``docs/PROTOCOL.md`` 5.1 (section 10 has the table).

    Args:
        message: the message to send.
        inbox: the sender's inbox: a request gets a reply subject under it (for NATS's
            no-responders status), kind ``r``/``m`` when ``RPY`` is this inbox, ``f`` when
            ``RPY`` is another inbox (a request sent back by a consumer leaving its group),
            ``g``/``n`` when ``RPY`` is a group.
        prefix: the subject prefix.

    Returns:
        The route, or None when the message cannot be routed (no GRP nor TGT, or a name that
        is not a valid subject).
    """
    typ = message.typ
    grp = message.grp
    if typ in _EVENTS:
        subject = f"{prefix}.evt.{grp}" if grp else ""
        return Route(subject) if _valid(subject) else None
    kind, subject, office = None, "", ""
    if message.tgt:
        office = message.tgt.partition(".")[0]
        kind, subject = _MAIL, office_subject(office, prefix)
    elif grp and grp.startswith(INBOX_PREFIX):
        subject = inbox_subject(grp, prefix)
    elif grp:
        kind = _GROUP
        subject = f"{prefix}.{'all' if message.to_all else 'grp'}.{grp}"
    if not _valid(subject):
        return None
    return Route(subject, _reply_subject(message, inbox, kind, office, prefix))


def _reply_subject(
    message: Message, inbox: str, kind: str | None, office: str, prefix: str
) -> str | None:
    """The NATS reply subject of a request: NATS answers "no responders" there, to the sender.

    A request for another inbox (one a leaving consumer sends back to the bus, PROTOCOL.md 5.2)
    is of kind ``f`` and names that inbox; a request or mail whose answers go to a group (a
    Kestrel client's reply group) is of kind ``g`` or ``n`` and names the group (and, for mail,
    the post office): the sender passes the NAK on to it, as the broker answers ``RPY``.
    """
    mid, rpy = message.mid, message.rpy or ""
    if kind is None or message.typ != MessageType.RQS.value or mid is None:
        return None
    if _TOKEN.fullmatch(mid) is None:
        return None
    ours, enc = inbox_subject(inbox, prefix), message.enc.value
    if rpy == inbox:
        reply = f"{ours}.{kind}.{enc}.{mid}"
        return f"{reply}.{office}" if kind == _MAIL and _TOKEN.fullmatch(office) else reply
    if not rpy or not all(_TOKEN.fullmatch(token) for token in rpy.split(".")):
        return None  # nobody to tell, or no subject tokens to name it with
    if kind == _MAIL:
        return (
            f"{ours}.{_MAIL_TO_GROUP}.{enc}.{mid}.{office}.{rpy}"
            if _TOKEN.fullmatch(office)
            else None
        )
    owner = rpy[len(INBOX_PREFIX) :]
    if rpy.startswith(INBOX_PREFIX) and _TOKEN.fullmatch(owner):
        return f"{ours}.{_FORWARD}.{enc}.{mid}.{owner}"
    return f"{ours}.{_TO_GROUP}.{enc}.{mid}.{rpy}"


def no_responders(subject: str, inbox: str, prefix: str) -> Message:
    """The broker's answer to a request nobody took, from the reply subject NATS answered.

    Returns:
        The NAK, to this link's inbox, or to the ``RPY`` of a request for another inbox or a
        group.

    Raises:
        ValueError: not one of our reply subjects.
    """
    kind, enc, mid, *office = subject[len(inbox_subject(inbox, prefix)) + 1 :].split(".")
    target = office[0] if office else ""
    if kind == _FORWARD:
        rpy = f"{INBOX_PREFIX}{target}"
    elif kind == _TO_GROUP:
        rpy = ".".join(office)
    elif kind == _MAIL_TO_GROUP:
        rpy = ".".join(office[1:])
    else:
        rpy = inbox
    request = Message({"MID": mid, "RPY": rpy, "ENC": enc})
    if kind in (_MAIL, _MAIL_TO_GROUP):
        nak = request.nak(f"no post office {target!r}", 404)
    else:
        nak = request.nak("no responders", 503)
    nak.src = "central"
    return nak


def journal_subjects(prefix: str = DEFAULT_PREFIX) -> tuple[str, ...]:
    """What a journal recorder subscribes to: every subject of the bus, responses included.

    Only the bus's own prefix: another bus sharing the server (another prefix) is not recorded.
    """
    return (f"{prefix}.>",)


def url_prefix(url: str) -> str:
    """The subject prefix a ``nats://`` URL names (``nats://host:4222?prefix=prod``).

    Returns:
        The prefix, :data:`DEFAULT_PREFIX` when the URL names none.

    Raises:
        ConfigError: a prefix that is not one subject token.
    """
    return _url_token(url, "prefix", "NATS subject prefix") or DEFAULT_PREFIX


def url_stream(url: str) -> str | None:
    """The JetStream stream a ``nats://`` URL names (``nats://host:4222?stream=PROD``), if any.

    Raises:
        ConfigError: a name that is not one token, [A-Za-z0-9_-].
    """
    return _url_token(url, "stream", "JetStream stream name")


def url_replicas(url: str) -> int | None:
    """The replicas of the JetStream stream a ``nats://`` URL asks for (``?replicas=3``), if any.

    Raises:
        ConfigError: not a whole number from 1 to 5 (JetStream's limits).
    """
    value = parse_bus_url(url).options.get("replicas")
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_REPLICAS:
        raise ConfigError(f"bad stream replicas {value!r}: a number from 1 to {MAX_REPLICAS}")
    return int(value)


def _url_token(url: str, key: str, what: str) -> str | None:
    value = parse_bus_url(url).options.get(key)
    if value is not None and _TOKEN.fullmatch(value) is None:
        raise ConfigError(f"bad {what} {value!r}: one token, [A-Za-z0-9_-]")
    return value


def split_url(url: str) -> tuple[list[str], str | None, str | None]:
    """Servers without credentials (``nats://host:port`` each), and the URL's user and password.

    Raises:
        ConfigError: a bad URL (:func:`bus.link.bus_url.parse_bus_url`).
    """
    parsed = parse_bus_url(url if "://" in url else f"nats://{url}")
    servers = [f"nats://{address}" for address in parsed.addresses()]
    return servers, parsed.user, parsed.password
