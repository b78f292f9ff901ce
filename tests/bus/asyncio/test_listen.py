"""The listening socket ``busgate run`` and ``--workers`` bind (bus/asyncio/listen.py): accepted
connections must get TCP_NODELAY, or every keep-alive answer waits for the client's delayed
ACK (about 40 ms a request, measured before the fix)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bus.asyncio.listen import listen_socket


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_accepted_connections_have_nodelay(loop_name: str) -> None:
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop

    async def main() -> int:
        sock = listen_socket("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                raw = transport.get_extra_info("socket")
                accepted.set_result(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(accepted, 10)
        finally:
            writer.close()
            server.close()

    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(main()) != 0
