"""The codec's pure-Python fallback, as a machine without a C compiler runs it.

Kept apart from ``test_codec.py``, whose tests run once per implementation: these run once.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bus.frame import codec
from bus.frame.frame import PURE_PYTHON_ENV
from tests.conftest import LOOPS_ENV

# What a machine without a C compiler runs: no bus.native._speedups at all, not just its fast path
# turned off (bus.frame.frame.find_name, the module-level encode/decode are the reference). Split in
# groups, each a second pytest run with its own deadline: one run of them all took 150-280 s on a
# loaded 2-core machine and outgrew a single deadline (CI, 2026-11-29).
PURE_GROUPS = {
    "codec": [
        "tests/bus/frame/test_codec.py",
        "tests/bus/frame/test_codec_fuzz.py",
        "tests/bus/frame/test_frame.py",
        "tests/bus/message/test_message.py",
        "tests/bus/frame/test_jsonmap.py",
        "tests/bus/test_cli_frame.py",
        "tests/bus/link/test_wire.py",
    ],
    # ... and the data path above it: without bus.native._hotpath every message is decoded (and
    # without bus.native._journalscan the journal reader scans in Python: test_journal_seq).
    "client": [
        "tests/bus/test_journal_seq.py",
        "tests/bus/asyncio/test_client.py",
        "tests/bus/asyncio/test_service.py",
        "tests/bus/asyncio/test_service_waiting.py",
        "tests/bus/message/test_jsonwire_ack.py",
    ],
    "broker": [
        "tests/bus/test_broker_server.py",
        "tests/bus/test_broker_link.py",
        "tests/bus/test_objects_tcp.py",  # without the Object System's content lane
        "tests/gateway/routes/test_request.py",
        "tests/gateway/routes/test_request_direct.py",  # every request read by uvicorn's parser
    ],
}


@pytest.mark.skipif(not codec.accelerator_available(), reason="the accelerator is not in use")
@pytest.mark.timeout(620)  # a second pytest run: about 20-90 s, far more on a loaded machine
@pytest.mark.parametrize("group", sorted(PURE_GROUPS))
def test_the_codec_and_data_path_tests_pass_on_pure_python_alone(group: str) -> None:
    # On uvloop alone, what the programs run on: this run tests the pure-Python data path, and
    # the loops behave the same on it as on the accelerated one, which make test runs on both.
    env = {**os.environ, PURE_PYTHON_ENV: "1", LOOPS_ENV: "uvloop"}
    # without the schemathesis plugin, which none of these files use: its import alone (with
    # Hypothesis's) took 2 s of CPU per run
    plugins = ["-p", "no:cacheprovider", "-p", "no:schemathesis"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugins, "-x", *PURE_GROUPS[group]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_the_pure_python_switch_leaves_out_the_accelerator() -> None:
    code = (
        "import bus.frame.codec as c, bus.frame.frame as f; "
        "print(c.accelerator_available(), c.accelerated(), f.find_name is f._find_name_reference)"
    )
    env = {**os.environ, PURE_PYTHON_ENV: "1"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.split() == ["False", "False", "True"]
