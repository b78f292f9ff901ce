"""A real stack for the gateway tests: broker, demo service and gateway under uvicorn.

The stack runs on its own event loop in a background thread, so that sync code (schemathesis)
and async tests (httpx.AsyncClient on the test's loop) both reach it over real loopback sockets,
and a test can stop and restart the broker while the gateway runs (:meth:`Stack.restart_broker`).
The shared ``stack`` follows ``bus_transport`` (``tests/conftest.py``): in a module marked
``pytest.mark.transports`` it runs once on the broker and once on NATS (``bus_url`` given). In a
module marked ``pytest.mark.stack_loops`` it runs once on the standard loop and once on uvloop
(``stack_loop``), what ``busgate gateway`` and ``busgate run`` run on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypeVar

import pytest
import uvicorn

from bus.asyncio.client import Client, connect
from bus.asyncio.service import Service
from bus.broker import Broker, BrokerConfig
from bus.broker.config import JournalSetting
from bus.demo import create_demo_service
from gateway.app import create_app
from gateway.process.http_protocol import HEADER_TIMEOUT_S, protocol_class
from gateway.process.settings import GatewaySettings
from gateway.state import Gateway
from tests.conftest import LOOPS

T = TypeVar("T")
START_TIMEOUT = 15.0


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def raw_socket(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A plain socket to ``127.0.0.1:port``, closed on the way out whatever happened: a test
    that failed with its socket open left it to the garbage collector, whose ResourceWarning
    then failed whichever later test of the process it ran in."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        await close_writer(writer)


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close ``writer`` and wait (5 s at most) until its socket is closed."""
    writer.close()
    try:
        async with asyncio.timeout(5):
            await writer.wait_closed()
    except TimeoutError:  # a peer that reads nothing: what is still unsent goes
        writer.transport.abort()
    except OSError:  # reset by the peer: closed all the same
        pass


class Stack:
    """Broker + demo service + gateway, on a loop in a background thread.

    Args:
        settings: gateway settings; ``bus_url`` and ``port`` are filled in.
        demo: start the demo service (group ``demo``).
        bus_url: another bus to use (``nats://...``) instead of the stack's broker.
        loop: the name of the loop it runs on (:data:`tests.conftest.LOOPS`).
        http: uvicorn's ``http`` setting (the gateway's own protocol, as ``busgate gateway``
            runs it: ``gateway.process.http_protocol.protocol_class(...)``).
    """

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        demo: bool = True,
        bus_url: str | None = None,
        loop: str = "asyncio",
        http: Any = "auto",
    ) -> None:
        self.http = http
        self.loop = LOOPS[loop]()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gateway-stack")
        self.broker_port = free_port()
        self.settings = replace(
            settings,
            bus_url=bus_url or f"bus://127.0.0.1:{self.broker_port}",
            port=free_port(),
            web_dir="",
        )
        self.url = f"http://127.0.0.1:{self.settings.port}"
        self.with_demo = demo
        self.broker: Broker | None = None
        self.service_client: Client | None = None
        self.demo: Service | None = None
        self.server: uvicorn.Server | None = None
        self.serve_task: asyncio.Task[None] | None = None
        self.gateway: Gateway | None = None
        self.graceful_shutdown = 2  # seconds uvicorn waits for open responses when stopping
        self.journal: str | None = None  # the broker's journal directory (None: no journal)
        self.journal_fsync = "always"  # its fsync policy
        self.offices: dict[str, str] = {}  # the broker's post offices (name -> secret)
        self.journal_filter = ">"  # what it journals (--journal-filter)

    # Running coroutines on the stack's loop ---------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = START_TIMEOUT) -> T:
        """Run ``coro`` on the stack's loop and wait for it (from sync code)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    async def run(self, coro: Coroutine[Any, Any, T], timeout: float = START_TIMEOUT) -> T:
        """Run ``coro`` on the stack's loop and await it (from an async test)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)

    # Life -------------------------------------------------------------------------------

    def start(self) -> Stack:
        """Start everything and wait until the gateway is ready."""
        self.thread.start()
        self.call(self._start())
        return self

    async def _start(self) -> None:
        await self.start_broker()
        if self.with_demo:
            await self.start_demo()
        await self._start_gateway_only()
        await self.wait_ready()

    async def _start_gateway_only(self) -> None:
        """Start the gateway under uvicorn (whether or not the bus is there)."""
        app = create_app(self.settings)
        self.gateway = app.state.gateway
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.settings.port,
            log_level="warning",
            lifespan="on",
            http=self.http,
            ws="websockets-sansio",
            timeout_graceful_shutdown=self.graceful_shutdown,
            proxy_headers=False,  # as busgate gateway runs (gateway.process.server)
        )
        self.server = uvicorn.Server(config)
        self.serve_task = asyncio.create_task(self.server.serve())
        async with asyncio.timeout(START_TIMEOUT):
            while not self.server.started:
                await asyncio.sleep(0.01)

    async def wait_ready(self) -> None:
        """Wait until the gateway is connected to the bus."""
        assert self.gateway is not None
        await self.gateway.bridge.wait_connected(START_TIMEOUT)

    async def start_broker(self) -> None:
        """Start the broker (again) on the stack's broker port."""
        journal = (
            None
            if self.journal is None
            else JournalSetting(self.journal, fsync=self.journal_fsync, filter=self.journal_filter)
        )
        config = BrokerConfig(
            host="127.0.0.1",
            port=self.broker_port,
            open=True,
            journal=journal,
            offices=self.offices,
        )
        self.broker = Broker(config)
        await self.broker.start()

    async def stop_broker(self) -> None:
        """Stop the broker: every link drops."""
        assert self.broker is not None
        await self.broker.stop()
        self.broker = None

    async def start_demo(self) -> None:
        """Start the demo service on its own client."""
        self.service_client = await connect(self.settings.bus_url)
        self.demo = create_demo_service(self.service_client, max_sleep=10.0, heartbeat_interval=1.0)
        await self.demo.start()

    async def stop_demo(self) -> None:
        """Stop the demo service and close its client."""
        if self.demo is not None:
            await self.demo.stop()
            self.demo = None
        if self.service_client is not None:
            await self.service_client.close()
            self.service_client = None

    async def bus_client(self) -> Client:
        """A new client of the stack's broker (close it yourself)."""
        return await connect(self.settings.bus_url)

    def stop(self) -> None:
        """Stop everything and the thread.

        Raises:
            AssertionError: a task was left running on the stack's loop, such as the
                reconnection of a bus client a test never closed (closing the loop under it
                printed "Task was destroyed but it is pending!" long after the test).
        """
        with contextlib.suppress(Exception):
            self.call(self._stop(), timeout=30.0)
        left = self.call(self._left_running())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10.0)
        self.loop.close()
        assert not left, f"left running on the stack's loop: {left}"

    async def _left_running(self) -> list[str]:
        """The tasks still running on the stack's loop, besides this one."""
        await asyncio.sleep(0)  # what was cancelled last ends
        this = asyncio.current_task()
        return sorted(repr(task) for task in asyncio.all_tasks() if task is not this)

    async def _stop(self) -> None:
        if self.server is not None and self.serve_task is not None:
            self.server.should_exit = True
            await asyncio.wait_for(self.serve_task, 20.0)
        await self.stop_demo()
        if self.broker is not None:
            await self.stop_broker()


@contextlib.contextmanager
def running_stack(
    settings: GatewaySettings,
    *,
    demo: bool = True,
    bus_url: str | None = None,
    journal: str | None = None,
    journal_fsync: str = "always",
    journal_filter: str = ">",
    loop: str = "asyncio",
    http: Any = "auto",
) -> Iterator[Stack]:
    """A started :class:`Stack` (its broker journaling into ``journal`` with the fsync policy
    ``journal_fsync``, what ``journal_filter`` lets through), stopped on exit."""
    stack = Stack(settings, demo=demo, bus_url=bus_url, loop=loop, http=http)
    stack.journal = journal
    stack.journal_fsync = journal_fsync
    stack.journal_filter = journal_filter
    try:
        yield stack.start()
    finally:
        stack.stop()


#: uvicorn's ``http`` setting for the gateway's own protocol, as ``busgate gateway`` runs it (a
#: module's shared ``stack`` runs on it when the module sets ``STACK_HTTP`` to it).
GATEWAY_HTTP: Any = protocol_class(HEADER_TIMEOUT_S)


def base_settings(**changes: Any) -> GatewaySettings:
    """Settings for tests: short timeouts so no test waits long."""
    values: dict[str, Any] = {
        "default_timeout": 3.0,
        "max_timeout": 5.0,
        "sse_keepalive_interval": 0.5,
    }
    values.update(changes)
    return GatewaySettings(**values)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = metafunc.definition.get_closest_marker("stack_loops") is not None
    if marked and "stack_loop" in metafunc.fixturenames:
        metafunc.parametrize("stack_loop", list(LOOPS), scope="module")


@pytest.fixture(scope="module")
def stack_loop() -> str:
    """The loop of the shared stack in a module not marked ``stack_loops``: the standard one."""
    return "asyncio"


@pytest.fixture(scope="module")
def stack(bus_transport: str, stack_loop: str, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The shared stack of a test module (auth off, demo service running)."""
    url = request.getfixturevalue("nats_server").url if bus_transport == "nats" else None
    http = getattr(request.module, "STACK_HTTP", "auto")
    with running_stack(base_settings(), bus_url=url, loop=stack_loop, http=http) as running:
        yield running


Waiter = Callable[[], Awaitable[bool]]


async def eventually(check: Waiter, timeout: float = 10.0, every: float = 0.05) -> None:
    """Wait until ``check()`` is true (bounded)."""
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(every)
