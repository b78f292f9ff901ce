"""``bus/link/bus_url.py``: bus URLs, one broker or a list of NATS servers, read the same
everywhere.

The table checks what each URL means; bad ones are a ``ConfigError`` naming the part at fault
and never the password. Then the ``busgate`` commands the README shows with a list of servers
(``demo``, ``request``, ``reply``) run against a real nats-server listed behind a dead one.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from bus.asyncio.links import parse_url
from bus.discovery.nats_subjects import split_url, url_prefix, url_replicas, url_stream
from bus.errors import ConfigError
from bus.link.bus_url import BusUrl, parse_bus_url
from tests.conftest import NatsServer, free_tcp_port

BUSGATE = str(Path(sys.executable).with_name("busgate"))
WAIT = 20.0

CASES: list[tuple[str, BusUrl]] = [
    ("bus://127.0.0.1:4000", BusUrl("bus", (("127.0.0.1", 4000),))),
    ("localhost", BusUrl("bus", (("localhost", 4000),))),
    ("bus://gw:s%40cret@h:4001", BusUrl("bus", (("h", 4001),), "gw", "s@cret")),
    ("bus+tls://h", BusUrl("bus+tls", (("h", 4000),))),
    ("nats://a", BusUrl("nats", (("a", 4222),))),
    ("nats://a:4222,b:4223,c", BusUrl("nats", (("a", 4222), ("b", 4223), ("c", 4222)))),
    ("nats://a:1, b:2", BusUrl("nats", (("a", 1), ("b", 2)))),
    ("nats://u:p@a,nats://b:5", BusUrl("nats", (("a", 4222), ("b", 5)), "u", "p")),
    (
        "nats://a,b,c?replicas=3&prefix=prod",
        BusUrl(
            "nats",
            (("a", 4222), ("b", 4222), ("c", 4222)),
            None,
            None,
            {"replicas": "3", "prefix": "prod"},
        ),
    ),
    ("nats://[::1]:4222,[::1]:4223", BusUrl("nats", (("::1", 4222), ("::1", 4223)))),
]


@pytest.mark.parametrize(("url", "expected"), CASES, ids=[url for url, _ in CASES])
def test_a_url_means_its_servers_credentials_and_options(url: str, expected: BusUrl) -> None:
    assert parse_bus_url(url) == expected
    scheme, host, port, user, password = parse_url(url)  # what the client's factory reads
    assert (scheme, (host, port), user, password) == (
        expected.scheme,
        expected.servers[0],
        expected.user,
        expected.password,
    )


def test_the_nats_transport_reads_every_server_and_the_options() -> None:
    url = "nats://u:p@a:1,b:2?prefix=prod&stream=S&replicas=3"
    assert split_url(url) == (["nats://a:1", "nats://b:2"], "u", "p")
    assert (url_prefix(url), url_stream(url), url_replicas(url)) == ("prod", "S", 3)
    assert split_url("nats://[::1]:1,h") == (["nats://[::1]:1", "nats://h:4222"], None, None)
    assert url_replicas("nats://a,b") is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nats://a:4222,b:x", "bad port in bus URL: 'b:x'"),
        ("nats://u:secret@a:99999", "bad port in bus URL: 'a:99999'"),
        ("bus://a:4000,b:4000", "is for a NATS cluster (nats://)"),
        ("nats://a,,b", "an empty server"),
        ("nats://a,bus://b", "mixes nats:// and bus://"),
        ("http://a:8080", "unknown bus URL scheme 'http'"),
        ("nats://a?replicas=0", "bad stream replicas '0'"),
        ("nats://a?replicas=three", "bad stream replicas"),
        ("nats://a?replicas=6", "a number from 1 to 5"),
    ],
)
def test_a_bad_url_says_which_part_and_not_the_password(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_bus_url(url)
        url_replicas(url)
    assert says in str(caught.value)
    assert "secret" not in str(caught.value)


async def _busgate(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        BUSGATE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.nats
async def test_the_commands_take_a_list_of_servers(nats_server: NatsServer) -> None:
    dead = f"127.0.0.1:{free_tcp_port()}"  # nobody listens: the list goes on to the next
    url = f"nats://{dead},127.0.0.1:{nats_server.port}"
    demo = await asyncio.create_subprocess_exec(
        BUSGATE, "demo", "--bus", url, "--group", "urls",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    reply = await asyncio.create_subprocess_exec(
        BUSGATE, "reply", "urls2", '{"ok": true}', "--bus", f"nats://127.0.0.1:{nats_server.port},{dead}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert demo.stdout is not None and reply.stderr is not None
        assert b"demo service" in await asyncio.wait_for(demo.stdout.readline(), WAIT)
        assert b"busgate reply" in await asyncio.wait_for(reply.stderr.readline(), WAIT)
        code, out, err = await _busgate("request", "urls", "echo", "x=1", "--bus", url)
        assert (code, out.strip()) == (0, '{"x":1}'), err
        code, out, err = await _busgate("request", "urls2", "anything", "--bus", url)
        assert (code, out.strip()) == (0, '{"ok":true}'), err
    finally:
        for proc in (demo, reply):
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), WAIT)


async def test_a_bad_list_is_one_line_and_exit_2() -> None:
    code, out, err = await _busgate("request", "demo", "echo", "--bus", "nats://a:1,b:x")
    assert code == 2
    assert err.strip() == "busgate: error: bad port in bus URL: 'b:x' (host:port, port 1-65535)"


async def test_bad_replicas_are_one_line_and_exit_2_before_connecting() -> None:
    dead = f"127.0.0.1:{free_tcp_port()}"  # never reached: the URL is refused first
    code, _, err = await _busgate("request", "demo", "echo", "--bus", f"nats://{dead}?replicas=9")
    assert code == 2
    assert err.strip() == "busgate: error: bad stream replicas '9': a number from 1 to 5"
