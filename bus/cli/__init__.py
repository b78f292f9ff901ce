"""The ``busgate`` command line.

Each subcommand lives in its own module that exposes ``register(subparsers)``; the module adds
its parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning
the exit code). Exit codes: 0 success, 1 runtime failure, 2 bad input (one-line error on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Modules that contribute subcommands, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "bus.cli.broker",
    "bus.cli.run",
    "bus.cli.client",
    "bus.cli.frame",
    "bus.cli.journal",
    "pipeline.cli",
    "gateway.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="busgate", description="busgate: a binary message bus and its web gateway"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
