"""Shared fixtures: the real broker (in-process or as a subprocess) and connected clients.

Broker fixtures (owned by the broker engineer; add your own fixtures below, never rewrite these):

- ``make_broker(**config)``: start an in-process :class:`bus.broker.Broker` on a free loopback
  port with the test post offices (:data:`OFFICES`, manager ``admin``), open mode off unless
  ``open=True``; stopped at the end of the test.
- ``broker``: one such broker with open mode on too (so a client may connect without a secret).
- ``bus_url``: ``bus://127.0.0.1:<port>`` of ``broker``.
- ``client``: a client connected to ``broker`` as ``alice`` (HMAC challenge-response).
- ``make_client(url=None, name="alice", **kwargs)``: more clients, closed at the end.
- ``subprocess_broker``: a broker in a child process (``busgate broker``) that a test may
  ``kill()`` (SIGKILL) and ``restart()`` on the same port.

Both transports (the nats engineer's): a module marked ``pytestmark = pytest.mark.transports``
runs each of its tests on the embedded broker and on NATS (``bus_transport`` is ``"broker"`` or
``"nats"``; ``bus_url`` and ``make_client`` follow it); a test of such a module marked
``@pytest.mark.broker_only`` runs on the broker alone. ``nats_server`` is one real
``nats-server`` for the session; :class:`NatsServer` starts more (a test may ``kill()`` and
``restart()`` one on the same port). ``nats_cluster`` is a real 3-node nats-server cluster with
JetStream for a module (:class:`tests.nats_cluster.NatsCluster`: kill -9 a node, restart it).

No leaked nats-server: each module fails when it leaves one it started running
(``tests/leaks.py``). ``make test`` hands the longest files out first (``tests/slowest_first.py``).

No fixed port: ``closed_objects_port`` (session, automatic) points ``BUSGATE_OBJECTS_LINK`` at
a port the session holds closed, so no test gateway links to whatever holds 7890 on the host.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import pytest
import uvloop

from bus.asyncio.client import Client, connect
from bus.broker import Broker, BrokerConfig
from bus.frame import codec
from bus.link import wire
from bus.message import header
from tests.leaks import SESSION_WIDE, no_nats_server_left
from tests.nats_cluster import NATS_SERVER, NatsCluster, free_tcp_port, free_tcp_ports
from tests.slowest_first import slowest_first

#: Post offices every test broker knows: name -> secret.
OFFICES: dict[str, str] = {
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
    "admin": "admin-secret",
}
MANAGERS = frozenset({"admin"})

MakeBroker = Callable[..., Awaitable[Broker]]
MakeClient = Callable[..., Awaitable[Client]]


@pytest.fixture
async def make_broker() -> AsyncIterator[MakeBroker]:
    """Factory of in-process brokers on free loopback ports."""
    started: list[Broker] = []

    async def make(**overrides: Any) -> Broker:
        settings: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": 0,
            "offices": OFFICES,
            "managers": MANAGERS,
        }
        settings.update(overrides)
        broker = Broker(BrokerConfig(**settings))
        await broker.start()
        started.append(broker)
        return broker

    yield make
    for broker in reversed(started):
        await broker.stop(timeout=2.0)


@pytest.fixture
async def broker(make_broker: MakeBroker) -> Broker:
    """An in-process broker with the test post offices and open mode on."""
    return await make_broker(open=True)


@pytest.fixture
def bus_url(broker: Broker, bus_transport: str, request: pytest.FixtureRequest) -> str:
    """URL of the ``broker`` fixture (of the session's ``nats_server`` on NATS)."""
    if bus_transport == "nats":
        server: NatsServer = request.getfixturevalue("nats_server")
        return server.url
    return f"bus://127.0.0.1:{broker.port}"


@pytest.fixture
async def make_client(broker: Broker, bus_url: str) -> AsyncIterator[MakeClient]:
    """Factory of connected clients (default: ``alice`` on the ``broker`` fixture)."""
    clients: list[Client] = []

    async def make(url: str | None = None, name: str | None = "alice", **kwargs: Any) -> Client:
        if "secret" not in kwargs and name in OFFICES:
            kwargs["secret"] = OFFICES[name]
        client = await connect(url or bus_url, name, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    """A client connected to ``broker`` as ``alice``."""
    return await make_client()


class BrokerProcess:
    """A broker in a child process (``busgate broker``), for tests that kill it."""

    def __init__(self, *extra: str) -> None:
        self.extra = extra
        self.port = 0
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Start it (on ``self.port``; a free port the first time) and wait until it listens."""
        offices = [
            arg for name, secret in OFFICES.items() for arg in ("--office", f"{name}:{secret}")
        ]
        command = [
            sys.executable,
            "-c",
            "import sys; from bus.cli import main; sys.exit(main())",
            "broker",
            "--port",
            str(self.port),
            "--manager",
            "admin",
            "--log-level",
            "WARNING",
            *offices,
            *self.extra,
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("BUSGATE_CONFIG", None)
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "busgate broker listening on HOST:PORT"
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"the broker did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    @property
    def url(self) -> str:
        return f"bus://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL, as a crash: no Disconnect, no draining."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def restart(self) -> None:
        """Start again on the same port."""
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def subprocess_broker() -> Iterator[BrokerProcess]:
    """A started broker in a child process; killed or stopped at the end."""
    process = BrokerProcess()
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session", autouse=True)
def _journal_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``busgate run`` journals under ``$XDG_STATE_HOME`` by default (per bus port): the
    tests' runs, and the processes they start, journal under a directory of the session."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


#: The Object System link every gateway the tests start gets unless its test sets another.
OBJECTS_LINK_ENV = "BUSGATE_OBJECTS_LINK"


@pytest.fixture(scope="session", autouse=True)
def closed_objects_port() -> Iterator[int]:
    """A loopback port the session holds bound and never listens on; ``BUSGATE_OBJECTS_LINK``
    points at it for the whole session (the processes the tests start inherit it).

    Without it a test gateway's ``/ws`` linked to the bus host on the default port 7890: on
    a shared machine that port may be someone else's, and the gateway would link to a
    stranger. A connect to this port is refused, as to a hub that is down, and no one else
    can take it while it is bound. A test that links elsewhere sets the variable itself."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    port = int(holder.getsockname()[1])
    before = os.environ.get(OBJECTS_LINK_ENV)
    os.environ[OBJECTS_LINK_ENV] = f"127.0.0.1:{port}"
    yield port
    if before is None:
        os.environ.pop(OBJECTS_LINK_ENV, None)
    else:
        os.environ[OBJECTS_LINK_ENV] = before
    holder.close()


_ACCELERATORS: dict[str, tuple[Callable[[], bool], Callable[[bool], bool]]] = {
    "bus.frame.codec": (codec.accelerated, codec.use_accelerator),
    "bus.message.header": (header.accelerated, header.use_accelerator),
    "bus.link.wire": (wire.accelerated, wire.use_accelerator),
}


@pytest.fixture(scope="module", autouse=True)
def _accelerators_left_as_found() -> Iterator[None]:
    """A module that turns a C accelerator off (to test the reference) must turn it on again:
    the test files of one process run one after another (``make test``: ``--dist loadfile``),
    and a module left on the reference made the next one's lane tests fail there alone. The
    state is put back and the module's last test fails, naming what it left switched."""
    before = {name: is_on() for name, (is_on, _) in _ACCELERATORS.items()}
    yield
    left = []
    for name, (is_on, use) in _ACCELERATORS.items():
        if is_on() != before[name]:
            left.append(f"{name} {'on' if is_on() else 'off'}")
            use(before[name])
    if left:
        pytest.fail(f"this module left the C accelerators switched: {', '.join(left)}")


# --- both transports: the embedded broker and NATS ---------------------------------------------

TRANSPORTS = ("broker", "nats")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "transports: run each test on the broker and on NATS")
    config.addinivalue_line("markers", "broker_only: in a transports module, the broker alone")
    config.addinivalue_line("markers", "loops: run each test on the standard loop and on uvloop")
    config.addinivalue_line(
        "markers", "stack_loops: the gateway tests' shared stack on the standard loop and uvloop"
    )
    config.addinivalue_line(
        "markers",
        "logs_tracebacks: in a loops module, a test whose code logs tracebacks on purpose",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slowest_first(items)  # make test's workers start on the longest files (tests/slowest_first.py)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = metafunc.definition.get_closest_marker("transports") is not None
    alone = metafunc.definition.get_closest_marker("broker_only") is not None
    if marked and not alone and "bus_transport" in metafunc.fixturenames:
        metafunc.parametrize("bus_transport", TRANSPORTS, scope="module")


@pytest.fixture(scope="session")
def bus_transport() -> str:
    """The transport of a test not run on both: the embedded broker."""
    return "broker"


class NatsServer:
    """A real ``nats-server`` child process on a loopback port (``-a 127.0.0.1 -p PORT``)."""

    def __init__(self, port: int = 0, *extra: str) -> None:
        self.chosen = not port  # a port we chose may be taken by another process before it binds
        self.port = port or free_tcp_port()
        self.extra = extra  # more nats-server flags (--user alice --pass pw)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        """Start it and wait (at most 10 s) until it accepts connections; on a port it chose
        itself that another process took meanwhile, start again on a new one (3 tries)."""
        for _ in range(3):
            command = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), *self.extra]
            self.process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                        self.chosen = False  # a restart keeps this port: clients come back to it
                        return self
                if self.process.poll() is not None:
                    break
                time.sleep(0.02)
            self.stop()
            if self.process.poll() is None or not self.chosen:
                break  # not a lost port: it did not answer in time, or the port was given
            self.port = free_tcp_port()
        raise RuntimeError(f"nats-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        """Start again on the same port."""
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """One ``nats-server`` for the whole session (started by the first test that needs it)."""
    if not os.path.exists(NATS_SERVER):
        pytest.skip("nats-server is not installed")
    server = NatsServer().start()
    assert server.process is not None
    SESSION_WIDE.add(server.process.pid)  # tests.leaks: it outlives the module that started it
    yield server
    server.stop()


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A real 3-node nats-server cluster with JetStream for the module (``tests/nats_cluster.py``);
    a test that kills a node starts it again before it ends."""
    if not os.path.exists(NATS_SERVER):
        pytest.skip("nats-server is not installed")
    cluster = NatsCluster(tmp_path_factory.mktemp("nats-cluster")).start()
    yield cluster
    cluster.stop()


# --- both event loops: the standard one and uvloop ----------------------------------------------

LoopFactory = Callable[[], asyncio.AbstractEventLoop]
_BOTH: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
#: ``BUSGATE_TEST_LOOPS=uvloop`` (comma-separated names of both loops) keeps only the loops named:
#: tests/bus/frame/test_codec_pure.py's second run tests the pure-Python data path, not the loop.
LOOPS_ENV = "BUSGATE_TEST_LOOPS"
_chosen = os.environ.get(LOOPS_ENV, ",".join(_BOTH)).split(",")
if not set(_chosen) <= set(_BOTH):
    raise pytest.UsageError(f"{LOOPS_ENV}={os.environ[LOOPS_ENV]!r}: name loops of {list(_BOTH)}")
#: The loops a test marked ``loops`` runs on (both unless :data:`LOOPS_ENV` says). The programs
#: run on uvloop (bus/asyncio/loop.py), whose transports differ from the standard loop's where it
#: matters (a write to a transport the peer reset raises there): the Object System and data-path
#: suites run on both.
LOOPS: dict[str, LoopFactory] = {name: _BOTH[name] for name in _BOTH if name in _chosen}
_STANDARD: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """pytest-asyncio's hook: a test marked ``loops`` (a module: ``pytestmark =
    pytest.mark.loops``) runs once on each of :data:`LOOPS` (ids ``[asyncio]``, ``[uvloop]``);
    any other test on the standard loop alone, under its usual id."""
    return LOOPS if item.get_closest_marker("loops") is not None else _STANDARD


@pytest.fixture(autouse=True)
def _no_traceback_logged(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``loops`` (or ``stack_loops``) fails when anything logged a traceback
    while it ran: an exception in a loop callback or a task ("Exception in callback ...", "Task
    exception was never retrieved") is only logged, never raised, so a test that checks what
    its clients receive would pass over it. A test that makes a handler fail on purpose (a
    service logs its handlers' exceptions) is marked ``logs_tracebacks``: the loop's own still
    count."""
    marks = ("loops", "stack_loops")
    if all(request.node.get_closest_marker(mark) is None for mark in marks):
        yield
        return
    expected = request.node.get_closest_marker("logs_tracebacks") is not None
    caplog: pytest.LogCaptureFixture = request.getfixturevalue("caplog")
    yield
    tracebacks = [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.get_records("call") + caplog.get_records("teardown")
        if (record.exc_info is not None or record.exc_text)
        and not (expected and record.name != "asyncio")
    ]
    assert not tracebacks, f"tracebacks logged: {tracebacks}"


__all__ = [
    "LOOPS",
    "LOOPS_ENV",
    "MANAGERS",
    "NATS_SERVER",
    "OFFICES",
    "TRANSPORTS",
    "BrokerProcess",
    "MakeBroker",
    "MakeClient",
    "NatsCluster",
    "NatsServer",
    "free_tcp_port",
    "free_tcp_ports",
    "no_nats_server_left",
]
