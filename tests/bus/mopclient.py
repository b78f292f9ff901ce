"""A MOP post office for tests, written from seed 001 and PROTOCOL.md 11 (no Java needed).

It frames by hand (``[[[`` + MOP-Base64 length + ``]`` + UTF-8 JSON + ``]]``), computes MOP's
authenticator with :mod:`bus.link.auth` (checked against the Java original's vectors in
test_auth.py), numbers its ids ``B64(counter).<po>`` from 1 as a freshly started Java post office
does, and answers ``manage.ping`` with ``manage.pong`` unless told not to.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

from bus.link import auth

WAIT = 10.0
ENV = "-={([env])}=-"
SEED_ENV = "!@#$-env"


def frame(body: dict[str, Any]) -> bytes:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return b"[[[" + auth.b64_encode_int(len(data)).encode() + b"]" + data + b"]]"


class MopClient:
    """One post office's TCP link to a central post office."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        name: str,
        secret: bytes,
        *,
        counter: int = 0,
        envelope: str = ENV,
        answer_pings: bool = True,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.name = name
        self.secret = secret
        self.ids = auth.IdGenerator(name, counter)
        self.envelope = envelope
        self.answer_pings = answer_pings
        self.buffer = b""
        self.pings = 0
        self.accept: dict[str, Any] | None = None

    @classmethod
    async def open(
        cls,
        port: int,
        name: str,
        secret: bytes | str,
        *,
        reconnect: bool = False,
        counter: int = 0,
        envelope: str = ENV,
        answer_pings: bool = True,
        connect: bool = True,
        tls: ssl.SSLContext | None = None,
        source: str | None = None,
    ) -> MopClient:
        """Connect (over TLS with ``tls``, from the address ``source``: any of 127/8); send
        ``manage.connect`` (or ``reconnect``) and wait for the accept."""
        local = None if source is None else (source, 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls, local_addr=local)
        raw = secret.encode() if isinstance(secret, str) else secret
        client = cls(
            reader,
            writer,
            name,
            raw,
            counter=counter,
            envelope=envelope,
            answer_pings=answer_pings,
        )
        if connect:
            kind = "manage.reconnect" if reconnect else "manage.connect"
            connect_id = client.send_connect(kind)
            client.accept = await client.expect_reply(connect_id)
        return client

    def send_connect(self, kind: str = "manage.connect", message_id: str | None = None) -> str:
        message_id = message_id or self.ids.next()
        authenticator = auth.mop_authenticator(self.secret, self.name, message_id)
        self.send(
            {"from": f"{self.name}.po", "to": "central.po", "type": kind, "id": message_id},
            authenticator=authenticator,
        )
        return message_id

    def send(self, envelope: dict[str, Any], **fields: Any) -> str:
        """Send one message; ``id`` is numbered when the envelope has none. Returns the id."""
        envelope = {"id": self.ids.next(), **envelope} if "id" not in envelope else envelope
        self.writer.write(frame({self.envelope: envelope, **fields}))
        return str(envelope["id"])

    def publish(self, mailbox: str, type_: str, **fields: Any) -> str:
        return self.send({"from": f"{self.name}.{mailbox}", "type": type_}, **fields)

    def mail(
        self, mailbox: str, to: str, type_: str | None = None, expect: bool = False, **fields: Any
    ) -> str:
        envelope: dict[str, Any] = {"from": f"{self.name}.{mailbox}", "to": to}
        if type_ is not None:
            envelope["type"] = type_
        if expect:
            envelope["expect"] = True
        return self.send(envelope, **fields)

    async def recv(self, timeout: float = WAIT) -> dict[str, Any] | None:
        """The next message other than a ping (answered), or None at end of stream."""
        async with asyncio.timeout(timeout):
            while True:
                message = self._parse()
                if message is None:
                    data = await self.reader.read(65536)
                    if not data:
                        return None
                    self.buffer += data
                    continue
                env = message.get(ENV) or message.get(SEED_ENV)
                if env.get("type") == "manage.ping":
                    self.pings += 1
                    if self.answer_pings:
                        self.send(
                            {"from": f"{self.name}.po", "to": "central.po", "type": "manage.pong"}
                        )
                    continue
                return message

    def _parse(self) -> dict[str, Any] | None:
        start = self.buffer.find(b"[[[")
        if start < 0:
            return None
        close = self.buffer.find(b"]", start + 3)
        if close < 0:
            return None
        length = auth.b64_decode_int(self.buffer[start + 3 : close].decode())
        end = close + 1 + length
        if len(self.buffer) < end + 2:
            return None
        assert self.buffer[end : end + 2] == b"]]"
        body = json.loads(self.buffer[close + 1 : end].decode("utf-8"))
        self.buffer = self.buffer[end + 2 :]
        assert isinstance(body, dict)
        return body

    async def expect(self, timeout: float = WAIT, **envelope: Any) -> dict[str, Any]:
        """Skip messages until one whose envelope has these values."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.recv(timeout)
                if message is None:
                    raise ConnectionError(f"closed while waiting for {envelope}")
                env = message[ENV]
                if all(env.get(k) == v for k, v in envelope.items()):
                    return message

    async def expect_reply(self, message_id: str, timeout: float = WAIT) -> dict[str, Any]:
        return await self.expect(timeout, reply=message_id)

    async def closed(self, timeout: float = WAIT) -> bool:
        """True once the central post office closes the link (messages meanwhile are read; a
        link closed with bytes of ours unread is reset, which is closed too)."""
        async with asyncio.timeout(timeout):
            while True:
                try:
                    if await self.recv(timeout) is None:
                        return True
                except ConnectionResetError:
                    return True

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


def env(message: dict[str, Any]) -> dict[str, Any]:
    """The envelope of a received message."""
    value = message[ENV]
    assert isinstance(value, dict)
    return value


def content(message: dict[str, Any]) -> dict[str, Any]:
    """A received message without its envelope."""
    return {k: v for k, v in message.items() if k != ENV}
