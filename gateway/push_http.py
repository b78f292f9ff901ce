"""The HTTP client of push subscriptions: POSTs over one kept-alive connection (h11).

One :class:`Poster` per push subscription and type being delivered: HTTP/1.1 on a connection
it keeps between requests (opened again when the server closes it), ``https://`` with the
system's CAs. A response's body is read and dropped (at most :data:`MAX_BODY` bytes); only its
status matters. Any failure (refused, reset, timeout, not HTTP) is :class:`PushFailed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Final
from urllib.parse import urlsplit

import h11

__all__ = ["MAX_BODY", "Poster", "PushFailed"]

#: Bytes of a response body read at most (the rest: the connection is closed).
MAX_BODY: Final = 64 * 1024
_READ: Final = 65536


class PushFailed(Exception):
    """A delivery that got no HTTP answer (refused, reset, timed out, not HTTP)."""


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
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.authority = parts.netloc.rpartition("@")[2]
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn: h11.Connection | None = None

    async def post(self, body: bytes, headers: list[tuple[str, str]]) -> int:
        """POST ``body``; returns the response's status.

        Raises:
            PushFailed: no answer.
        """
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(body, headers)
        except (OSError, TimeoutError, h11.ProtocolError, ssl.SSLError) as exc:
            await self.close()
            raise PushFailed(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)) from exc

    async def _exchange(self, body: bytes, headers: list[tuple[str, str]]) -> int:
        if self._conn is None or self._conn.our_state is not h11.IDLE:
            await self._open()
        conn, writer = self._conn, self._writer
        assert conn is not None and writer is not None
        request = h11.Request(
            method="POST",
            target=self.target,
            headers=[
                ("Host", self.authority),
                ("Content-Length", str(len(body))),
                ("User-Agent", "busgate-push"),
                *headers,
            ],
        )
        parts = (conn.send(e) for e in (request, h11.Data(data=body), h11.EndOfMessage()))
        writer.write(b"".join(part or b"" for part in parts))
        await writer.drain()
        status, read = 0, 0
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                read += len(event.data)
                if read > MAX_BODY:
                    await self.close()
                    return status
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionResetError("the server closed the connection")
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        else:
            await self.close()
        return status

    async def _next_event(self) -> object:
        conn, reader = self._conn, self._reader
        assert conn is not None and reader is not None
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await reader.read(_READ))

    async def _open(self) -> None:
        await self.close()
        context = ssl.create_default_context() if self.tls else None
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=context, server_hostname=self.host if self.tls else None
        )
        self._conn = h11.Connection(our_role=h11.CLIENT)

    async def close(self) -> None:
        """Close the connection (the next POST opens a new one)."""
        writer, self._writer, self._reader, self._conn = self._writer, None, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await writer.wait_closed()
