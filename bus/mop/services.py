"""MOP mail to a service group: a request on the bus, its answer back as mail
(docs/PROTOCOL.md section 11.5).

A MOP post office can only mail a mailbox. The central post office's mailboxes other than ``po``
name the bus's service groups: mail to ``central.<group>`` becomes a request (TYP=RQS) to
``<group>``, its ``type`` the command (else the content's ``CMD``), its content the arguments.
When the mail expects a reply, each response comes back as a reply message from
``central.<group>`` (``reply`` = the mail's id, ``type`` = the command): an ACK's payload as its
content; a NAK, no responders or no answer in time as ``error`` (text) and ``rcd`` (the NAK's RCD,
503, 504), as the listener answers every failure a post office waits on (11.3). A stream sends
one reply per response, all but the last with ``"more": true``; a stream closed by an empty end
marker (``Flag.END``, 2.3) ends with a reply ``{"end": true}`` (as the Object System bridge
does, 7.1).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from bus.asyncio.client import Client
from bus.discovery.names import check_group
from bus.errors import BusError, ConfigError, NoRespondersError, RequestTimeout
from bus.frame.frame import DataFrame
from bus.message.message import Message, MessageType
from bus.mop.codec import MopMessage
from bus.mop.content import fields_of

__all__ = ["SERVICE_OFFICE", "service_group", "serve_mail"]

log = logging.getLogger(__name__)

#: The post office whose mailboxes (but ``po``) are the bus's service groups.
SERVICE_OFFICE: Final = "central"

#: ``(content, type)``: sends the post office a reply to the mail being served.
Reply = Callable[[Mapping[str, Any], "str | None"], None]


def service_group(address: str) -> str | None:
    """The group a mail address names (``central.orders`` -> ``orders``), or None when the address
    is not a service group's (another post office, or central's own ``po``)."""
    office, _, mailbox = address.partition(".")
    if office != SERVICE_OFFICE or not mailbox or mailbox == "po":
        return None
    return mailbox


async def serve_mail(
    client: Client,
    message: MopMessage,
    group: str,
    frame: DataFrame,
    reply: Reply,
    timeout: float,
) -> None:
    """Send the mail as a request to ``group`` and reply with what comes back.

    Args:
        client: the post office's bus client.
        message: the mail (``to`` = ``central.<group>``).
        group: the group it names.
        frame: its content as a frame (the arguments; a ``CMD`` field is the command when the
            mail has no ``type``).
        reply: sends a reply to the mail (called only when the mail expects one).
        timeout: seconds for the whole answer.
    """
    cmd = message.type or frame.get("CMD")
    failure = _refusal(group, cmd)
    if failure is not None:
        if message.expect:
            reply({"error": failure, "rcd": 400}, message.type)
        else:
            log.warning("MOP mail %s from %s refused: %s", message.id, message.sender, failure)
        return
    assert isinstance(cmd, str)
    if not message.expect:
        try:
            await client.send(Message.request(group, cmd, frame))
        except BusError as exc:
            log.warning("MOP mail %s to %s not sent: %s", message.id, group, exc)
        return
    try:
        async for response in client.request_stream(group, cmd, frame, timeout=timeout):
            reply(_content(response), cmd)
    except NoRespondersError:
        reply({"error": f"no service consumes group {group!r}", "rcd": 503}, cmd)
    except RequestTimeout:
        reply({"error": f"no answer from {group!r} within {timeout:g} s", "rcd": 504}, cmd)
    except BusError as exc:
        reply({"error": str(exc), "rcd": exc.status_hint}, cmd)


def _refusal(group: str, cmd: object) -> str | None:
    try:
        check_group(group)
    except ConfigError as exc:
        return f"mail to central.{group}: {exc}"
    if not isinstance(cmd, str) or not cmd:
        return f"mail to service group {group!r} needs a command: its type (or a CMD field)"
    return None


def _content(response: Message) -> dict[str, Any]:
    """A response as the content of its reply."""
    if response.typ == MessageType.NAK.value:
        return {"error": response.msg or "refused", "rcd": response.rcd or 500}
    if response.end and not len(response.payload):
        return {"end": True}
    content = fields_of(response.payload)
    if response.more:
        content["more"] = True
    return content
