"""``busgate reply``: a service mocked from a shell, against a real broker."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator

import pytest

from bus.asyncio.client import Client, connect
from bus.asyncio.directory import ServiceDirectory
from bus.broker import Broker, BrokerConfig
from bus.errors import NakError
from tests.bus.test_cli_client import BUSGATE, WAIT


@pytest.fixture
async def bus() -> AsyncIterator[tuple[str, Client]]:
    async with Broker(BrokerConfig(port=0, open=True)) as broker:
        url = f"bus://127.0.0.1:{broker.port}"
        client = await connect(url)
        yield url, client
        await client.close()


async def replying(url: str, client: Client, *args: str) -> asyncio.subprocess.Process:
    """Start ``busgate reply`` (its options first: `--` ends them) and wait until its heartbeat
    shows it in the directory."""
    proc = await asyncio.create_subprocess_exec(
        BUSGATE, "reply", "--bus", url, "--heartbeat", "0.5", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with ServiceDirectory(client) as directory:
        await directory.wait_for(lambda d: len(d.instances(args[0])) == 1, WAIT)
    return proc


async def stopped(proc: asyncio.subprocess.Process) -> str:
    """Ctrl-C it; it must exit 0. Returns what it said on stderr."""
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode == 0, err
    return err.decode()


async def test_a_fixed_answer_for_every_command(bus: tuple[str, Client]) -> None:
    url, client = bus
    proc = await replying(url, client, "orders", '{"ok": true, "id": 7}')
    try:
        for cmd in ("create", "cancel"):
            ack = await client.request("orders", cmd, {"qty": 1}, timeout=WAIT)
            assert ack.payload.to_dict() == {"ok": True, "id": 7}
    finally:
        err = await stopped(proc)
    assert "orders create: ACK" in err and "orders cancel: ACK" in err


async def test_only_the_named_commands_are_answered(bus: tuple[str, Client]) -> None:
    url, client = bus
    proc = await replying(url, client, "orders", "--command", "create", "ok=true")
    try:
        ack = await client.request("orders", "create", {}, timeout=WAIT)
        assert ack.payload.to_dict() == {"ok": True}
        with pytest.raises(NakError) as refused:
            await client.request("orders", "delete", {}, timeout=WAIT)
        assert refused.value.rcd == 404 and "create" in refused.value.msg
        async with ServiceDirectory(client) as directory:
            await directory.wait_for(lambda d: bool(d.services()), WAIT)
            assert directory.services()[0].commands == ("create",)
    finally:
        await stopped(proc)


async def test_echo_answers_with_the_arguments(bus: tuple[str, Client]) -> None:
    url, client = bus
    proc = await replying(url, client, "mirror", "--echo")
    try:
        ack = await client.request("mirror", "anything", {"x": [1, 2]}, timeout=WAIT)
        assert ack.payload.to_dict() == {"x": [1, 2]}
    finally:
        await stopped(proc)


async def test_a_program_answers_each_request_from_its_stdin(bus: tuple[str, Client]) -> None:
    url, client = bus
    script = (
        "import json, os, sys; d = json.load(sys.stdin); "
        "print(json.dumps({'total': d['qty'] * d['price'], 'cmd': os.environ['BUSGATE_CMD']}))"
    )
    proc = await replying(url, client, "prices", "--", sys.executable, "-c", script)
    try:
        ack = await client.request("prices", "quote", {"qty": 3, "price": 2.5}, timeout=WAIT)
        assert ack.payload.to_dict() == {"total": 7.5, "cmd": "quote"}
    finally:
        await stopped(proc)


async def test_a_failing_program_is_a_nak_with_its_last_error_line(bus: tuple[str, Client]) -> None:
    url, client = bus
    script = "import sys; print('warming up', file=sys.stderr); sys.exit('out of stock')"
    proc = await replying(url, client, "stock", "--", sys.executable, "-c", script)
    try:
        with pytest.raises(NakError) as failed:
            await client.request("stock", "take", {}, timeout=WAIT)
        assert failed.value.rcd == 500 and failed.value.msg == "out of stock"
    finally:
        await stopped(proc)


async def test_text_output_is_wrapped_and_shows_in_the_cli(bus: tuple[str, Client]) -> None:
    url, client = bus
    proc = await replying(url, client, "clock", "--", "echo", "tick")
    try:
        request = await asyncio.create_subprocess_exec(
            BUSGATE, "request", "clock", "now", "--bus", url, "--timeout", str(WAIT),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(request.communicate(), WAIT)
        assert request.returncode == 0
        assert json.loads(out) == {"output": "tick"}
    finally:
        await stopped(proc)


async def test_a_program_that_never_reads_its_input_answers_every_request(
    bus: tuple[str, Client],
) -> None:
    # `echo` exits before its stdin is written: under uvloop that write raised RuntimeError out of
    # communicate(), the request went unanswered (the caller waited out its timeout) and the
    # responder printed a traceback, about one request in six.
    url, client = bus
    proc = await replying(url, client, "clock", "--", "echo", "tick")
    try:
        for _ in range(30):
            ack = await client.request("clock", "now", {"pad": "x" * 4096}, timeout=WAIT)
            assert ack.payload.to_dict() == {"output": "tick"}
    finally:
        err = await stopped(proc)
    assert err.count("clock now: ACK") == 30 and "Traceback" not in err


async def test_two_answers_at_once_is_bad_input() -> None:
    proc = await asyncio.create_subprocess_exec(
        BUSGATE, "reply", "--bus", "bus://127.0.0.1:1", "g", "x=1", "--echo",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode == 2 and b"give one answer" in err


async def test_it_says_which_bus_it_answers_on_without_the_password() -> None:
    """Issue 30 item 8: its first line showed the URL as given, password and all."""
    secret = "s3cret-never-shown"
    config = BrokerConfig(port=0, offices={"orders": secret, "alice": "alice-secret"})
    async with Broker(config) as broker:
        client = await connect(f"bus://alice:alice-secret@127.0.0.1:{broker.port}")
        url = f"bus://orders:{secret}@127.0.0.1:{broker.port}"
        proc = await replying(url, client, "orders", '{"ok": true}')
        try:
            ack = await client.request("orders", "create", timeout=WAIT)
            assert ack.payload.to_dict() == {"ok": True}
        finally:
            err = await stopped(proc)
            await client.close()
    assert f"on bus://orders:***@127.0.0.1:{broker.port}" in err, err
    assert secret not in err
