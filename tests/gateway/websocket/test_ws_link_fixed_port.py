"""The test gateways' Object System link (PROTOCOL.md's ``/ws`` section): never a fixed port.

A gateway with no link configured links its ``/ws`` to the bus host on port 7890. On a shared
machine that port may belong to someone else, so the session's ``closed_objects_port``
(tests/conftest.py) points ``BUSGATE_OBJECTS_LINK`` at a port it holds closed: these tests
check that every gateway the tests start, in process or as a child process, links there.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from bus.objects.tcp import DEFAULT_PORT
from gateway.process.settings import GatewaySettings
from gateway.websocket.ws import check_link, link_targets

pytestmark = pytest.mark.loops  # the gateway runs on uvloop: each test on both loops

# The settings the gateway tests' stacks use: a bus URL and no objects_links of their own.
SETTINGS = GatewaySettings(bus_url="bus://127.0.0.1:1")


def test_a_test_gateway_links_to_the_port_the_session_holds(closed_objects_port: int) -> None:
    ports = [target.port for target in link_targets(SETTINGS)]
    assert ports == [closed_objects_port]
    assert DEFAULT_PORT not in ports


async def test_its_start_check_warns_about_that_port_alone(
    closed_objects_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="busgate.gateway.ws")
    assert not await check_link(SETTINGS)  # refused: nobody listens on a port held closed
    warnings = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
    assert len(warnings) == 1
    assert f"127.0.0.1:{closed_objects_port}" in warnings[0]
    assert f":{DEFAULT_PORT} " not in warnings[0]


def test_a_gateway_in_a_child_process_inherits_it(closed_objects_port: int) -> None:
    code = (
        "from gateway.process.settings import GatewaySettings\n"
        "from gateway.websocket.ws import link_targets\n"
        "print([t.port for t in link_targets(GatewaySettings(bus_url='bus://127.0.0.1:1'))])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.strip() == f"[{closed_objects_port}]"
