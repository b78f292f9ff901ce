"""``busgate run --spark``'s port (bus/cli/run_spark.py, run_options.py): refused in one line
naming ``--spark-port`` before anything starts. The server itself: tests/pipeline/test_run_spark.py.
"""

from __future__ import annotations

import contextlib

import pytest

from bus.cli.run_options import Running, RunOptions, bind_port, check_ports
from bus.cli.run_spark import start_spark
from bus.errors import ConfigError


def test_a_bad_or_shared_spark_port_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="--spark-port 70000 is not a TCP port"):
        check_ports(RunOptions(spark=True, spark_port=70000))
    with pytest.raises(ConfigError, match="--port and --spark-port are both 8080"):
        check_ports(RunOptions(spark=True, spark_port=8080))
    check_ports(RunOptions(spark=False, spark_port=8080))  # not started: not checked


async def test_a_taken_spark_port_is_refused_before_spark_starts() -> None:
    with contextlib.closing(bind_port("127.0.0.1", 0, "--x")) as taken:
        port = taken.getsockname()[1]
        running = Running(bus_url="")
        with pytest.raises(ConfigError, match=f"port {port} .* in use.*--spark-port"):
            await start_spark("127.0.0.1", port, running)
    assert not running.stoppers  # nothing was started
