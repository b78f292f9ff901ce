"""The command line imports only the module of the subcommand it runs (bus/cli/__init__.py)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from bus.cli import COMMANDS, build_parser

HEAVY = ("uvicorn", "starlette", "pyspark", "gateway.app", "bus.broker", "nats", "websockets")

PROBE = """
import json, sys
from bus.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)), file=sys.stderr)
"""


def loaded_after(*words: str) -> tuple[list[str], str]:
    """Run the CLI with ``words`` in a fresh interpreter; the heavy modules loaded, stdout."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *words],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


@pytest.mark.parametrize(
    "words", [("--help",), ("report", "--help"), ("spark", "--help"), ("frame", "--help")]
)
def test_help_loads_no_heavy_module(words: tuple[str, ...]) -> None:
    loaded, out = loaded_after(*words)
    assert loaded == []
    assert "usage: busgate" in out


def test_help_lists_every_command_with_its_summary() -> None:
    _, out = loaded_after("--help")
    for name in COMMANDS:
        assert name in out


def test_gateway_help_loads_its_module() -> None:
    loaded, out = loaded_after("gateway", "--help")
    assert "gateway.app" in loaded or "uvicorn" in loaded
    assert "usage: busgate gateway" in out


def test_summaries_match_what_the_modules_register() -> None:
    """COMMANDS is the whole list: the same names, order and summaries the modules register."""
    full = build_parser()
    action = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    registered = [(c.dest, c.help) for c in action._choices_actions]
    assert registered == [(name, summary) for name, (_, summary) in COMMANDS.items()]
    for name, (module, _) in COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        assert name in sub.choices
