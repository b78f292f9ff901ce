"""A MOP post office that routes publications as MOP's real ``PostOffice`` does (issue 32 item 1).

Written from the behaviour of SlightlyLoony/MOP's ``PostOffice`` (not its code), over the link of
:class:`tests.bus.mopclient.MopClient` (framing, connect, pings):

- a publication of mailbox M with type T is delivered to the subscribers in the buckets
  ``<po>.M.T`` and ``<po>.M.<T without its last token>``, in that order, one delivery per bucket
  (so a subscriber in both gets it twice, the same message with the same id); the central post
  office is a subscriber like a local mailbox, and gets it only when a ``manage.subscribe`` put it
  in a bucket: nothing is forwarded otherwise;
- ``manage.subscribe`` / ``manage.unsubscribe`` to ``<po>.po`` without ``reply`` add or remove the
  central post office in the bucket ``source.type`` (one entry, whoever asked), and are answered
  when they ``expect`` it; with ``reply`` they are answers to its own and change nothing;
- publications from central go to the local mailboxes subscribed to their ``from`` and type;
  direct mail to a local mailbox is queued there.

``forwarded`` records every publication the post office sent to central, ``table`` the buckets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any

from tests.bus.mopclient import MopClient, content, env

__all__ = ["CENTRAL_BOX", "MopPostOffice"]

#: How a bucket names the central post office's mailbox (the original's ``[({CPO})]``).
CENTRAL_BOX = "[({CPO})]"


class MopPostOffice:
    """One post office with its mailboxes, linked to a central post office on ``port``."""

    def __init__(self, link: MopClient) -> None:
        self.link = link
        self.name = link.name
        self.table: dict[str, set[str]] = defaultdict(set)  # bucket -> subscriber mailbox ids
        self.mailboxes: dict[str, asyncio.Queue[dict[str, Any]]] = defaultdict(asyncio.Queue)
        self.forwarded: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # subscription requests, as they came
        self.changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, port: int, name: str, secret: str, **kwargs: Any) -> MopPostOffice:
        return cls(await MopClient.open(port, name, secret, **kwargs))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await self._reader
        await self.link.close()

    # -- what its program does ----------------------------------------------------------------

    def publish(self, mailbox: str, type_: str, **fields: Any) -> str:
        """``Mailbox.send(createPublishMessage(type))``: local routing, central only if asked."""
        message_id = self.link.ids.next()
        message = {
            "-={([env])}=-": {"from": f"{self.name}.{mailbox}", "type": type_, "id": message_id},
            **fields,
        }
        key = f"{self.name}.{mailbox}.{type_}"
        for bucket in (key, key.rpartition(".")[0]):
            for subscriber in sorted(self.table.get(bucket, ())):
                self._deliver(subscriber, message)
        return message_id

    def subscribe(self, mailbox: str, source: str, type_: str) -> str:
        """``Mailbox.subscribe(source, type)``: the local mailbox goes in the bucket; a foreign
        source's post office is sent ``manage.subscribe`` (expecting a reply). Returns its id."""
        self.table[f"{source}.{type_}"].add(f"{self.name}.{mailbox}")
        fields = {"source": source, "type": type_, "requestor": f"{self.name}.{mailbox}"}
        office = source.partition(".")[0]
        return self.link.mail("po", f"{office}.po", "manage.subscribe", expect=True, **fields)

    def subscribers(self, source: str, type_: str) -> set[str]:
        return set(self.table.get(f"{source}.{type_}", ()))

    def central_buckets(self) -> set[str]:
        """The buckets the central post office is in."""
        return {bucket for bucket, subs in self.table.items() if CENTRAL_BOX in subs}

    async def expect_reply(self, message_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """The answer to one of its own messages (its ``po`` mailbox gets them)."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.mailboxes["po"].get()
                if env(message).get("reply") == message_id:
                    return message

    async def wait_for(self, condition: Any, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                self.changed.clear()
                await self.changed.wait()

    # -- routing -------------------------------------------------------------------------------

    def _deliver(self, subscriber: str, message: dict[str, Any]) -> None:
        if subscriber == CENTRAL_BOX:
            self.forwarded.append(message)
            self.link.send(dict(message["-={([env])}=-"]), **content(message))
        else:
            self.mailboxes[subscriber.partition(".")[2]].put_nowait(message)

    async def _read(self) -> None:
        while True:
            message = await self.link.recv(timeout=3600)
            if message is None:
                return
            envelope = env(message)
            if envelope.get("to") == f"{self.name}.po":
                self._manage(message, envelope)
            elif envelope.get("to") is None:  # a publication from elsewhere: local subscribers
                key = f"{envelope['from']}.{envelope.get('type')}"
                for bucket in (key, key.rpartition(".")[0]):
                    for subscriber in sorted(self.table.get(bucket, ())):
                        if subscriber != CENTRAL_BOX:
                            self._deliver(subscriber, message)
            else:
                self.mailboxes[str(envelope["to"]).partition(".")[2]].put_nowait(message)
            self.changed.set()

    def _manage(self, message: dict[str, Any], envelope: dict[str, Any]) -> None:
        kind = envelope.get("type")
        if kind not in ("manage.subscribe", "manage.unsubscribe"):
            self.mailboxes["po"].put_nowait(message)
            return
        if envelope.get("reply") is not None:
            self.mailboxes["po"].put_nowait(message)  # an answer to one of its own
            return
        self.requests.append(message)
        fields = content(message)
        source, type_ = fields.get("source"), fields.get("type")
        if source and type_:
            source = source if "." in source else f"{self.name}.{source}"
            bucket = self.table[f"{source}.{type_}"]
            if kind == "manage.subscribe":
                bucket.add(CENTRAL_BOX)
            else:
                bucket.discard(CENTRAL_BOX)
        if envelope.get("expect"):
            self.link.send(
                {
                    "from": f"{self.name}.po",
                    "to": envelope["from"],
                    "type": kind,
                    "reply": envelope["id"],
                }
            )
