"""The HTTP client of push subscriptions: POSTs over one kept-alive connection.

One :class:`Poster` per push subscription and type being delivered: HTTP/1.1 on a connection
it keeps between requests (opened again when the server closes it or says ``Connection:
close``), ``https://`` with the system's CAs. The request is written from a template (every
value in it is checked to be header-safe: the URL by :class:`bus.push.PushSpec`, the rest
made here); the response is read by httptools' parser (the C parser uvicorn uses, so no new
dependency): its body is read and dropped (at most :data:`MAX_BODY` bytes), only its status
matters. Any failure (refused, reset, timeout, not HTTP) is :class:`PushFailed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Final
from urllib.parse import urlsplit

import httptools

__all__ = ["MAX_BODY", "Poster", "PushFailed"]

#: Bytes of a response body read at most (beyond: the connection is closed after it).
MAX_BODY: Final = 64 * 1024
_READ: Final = 65536


class PushFailed(Exception):
    """A delivery that got no HTTP answer (refused, reset, timed out, not HTTP)."""


class _Answer:
    """What the response parser found (httptools calls these methods)."""

    def __init__(self) -> None:
        self.done = False
        self.body = 0

    def on_body(self, body: bytes) -> None:
        self.body += len(body)

    def on_message_complete(self) -> None:
        self.done = True


class Poster:
    """POST to one URL over a kept-alive connection.

    Args:
        url: ``http://`` or ``https://`` URL.
        timeout: seconds one POST (connect, send, answer) may take.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        if any(char in target + authority for char in "\r\n "):
            raise ValueError(f"not a URL to put in a request line: {url!r}")
        self._head = f"POST {target} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: busgate-push\r\n"
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes, headers: list[tuple[str, str]]) -> int:
        """POST ``body`` with ``headers`` (names and values without line breaks).

        Returns:
            The response's status.

        Raises:
            PushFailed: no answer.
        """
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(body, headers)
        except (OSError, TimeoutError, httptools.HttpParserError, ssl.SSLError) as exc:
            await self.close()
            raise PushFailed(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)) from exc

    async def _exchange(self, body: bytes, headers: list[tuple[str, str]]) -> int:
        if self._writer is None:
            await self._open()
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers)
        head = f"{self._head}{lines}Content-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode("latin-1") + body)
        answer = _Answer()
        parser = httptools.HttpResponseParser(answer)
        while not answer.done:
            data = await reader.read(_READ)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            parser.feed_data(data)
            if answer.body > MAX_BODY:
                break
        status = int(parser.get_status_code())
        if not answer.done or not parser.should_keep_alive():
            await self.close()
        return status

    async def _open(self) -> None:
        await self.close()
        context = ssl.create_default_context() if self.tls else None
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=context, server_hostname=self.host if self.tls else None
        )

    async def close(self) -> None:
        """Close the connection (the next POST opens a new one)."""
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await writer.wait_closed()
