"""A slow link to nats-server for tests that drive a protocol race step by step.

:class:`HoldingRelay` sits between one NATS client and a real nats-server on loopback. Once
:meth:`~HoldingRelay.hold_after_ping` is called it lets the client's commands through up to
and including its next ``PING``, then holds back everything the client writes after it until
:meth:`~HoldingRelay.release`: the server answers that PING while what the client wrote next
is still on its way, as on a busy machine or a slow network. The server's side is relayed as
it comes, and the relay tells when a ``MSG`` on a given subject passed to the client.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["HoldingRelay"]


def _command_end(buffer: bytearray) -> int | None:
    """Where the first whole client command in ``buffer`` ends (None: not all there yet)."""
    eol = buffer.find(b"\r\n")
    if eol < 0:
        return None
    line = bytes(buffer[:eol]).split()
    verb = line[0].upper() if line else b""
    if verb not in (b"PUB", b"HPUB"):
        return eol + 2
    end = eol + 2 + int(line[-1]) + 2  # the payload (headers included) and its CRLF
    return end if len(buffer) >= end else None


class HoldingRelay:
    """A TCP relay from a free loopback port to nats-server at ``127.0.0.1:upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        #: PINGs the client wrote since :meth:`hold_after_ping` (the first one got through).
        self.pings = 0
        self._arming = False
        self._held: list[bytes] | None = None
        self._to_server: asyncio.StreamWriter | None = None
        self._watched = b""
        self._seen: asyncio.Event = asyncio.Event()
        self._pinged: asyncio.Event = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> HoldingRelay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    def hold_after_ping(self) -> None:
        """Let the client's next PING through, then hold what it writes after it."""
        self._arming, self.pings = True, 0
        self._pinged.clear()

    def release(self) -> None:
        """Send the server what was held, and relay as it comes from now on."""
        held, self._held, self._arming = self._held or [], None, False
        if self._to_server is not None:
            self._to_server.write(b"".join(held))

    async def wait_pings(self, count: int) -> None:
        """Until the client wrote ``count`` PINGs since :meth:`hold_after_ping`."""
        while self.pings < count:
            self._pinged.clear()
            await self._pinged.wait()

    def watch(self, subject: str) -> asyncio.Event:
        """An event set when a ``MSG`` on ``subject`` is relayed to the client."""
        self._watched, self._seen = f"MSG {subject} ".encode(), asyncio.Event()
        return self._seen

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._to_server = server_w
        self._writers += [client_w, server_w]
        self._tasks += [
            asyncio.create_task(self._from_client(client_r, server_w)),
            asyncio.create_task(self._from_server(server_r, client_w)),
        ]

    async def _from_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        buffer = bytearray()
        while data := await reader.read(65536):
            buffer += data
            while (end := _command_end(buffer)) is not None:
                command = bytes(buffer[:end])
                del buffer[:end]
                is_ping = command.upper().startswith(b"PING")
                if self._arming and is_ping:
                    self.pings += 1
                    self._pinged.set()
                if self._held is not None:
                    self._held.append(command)
                    continue
                writer.write(command)
                if self._arming and is_ping:
                    self._held = []
            await writer.drain()

    async def _from_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        tail = b""
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
            if self._watched and self._watched in tail + data:
                self._seen.set()
            tail = data[-len(self._watched) :] if self._watched else b""
