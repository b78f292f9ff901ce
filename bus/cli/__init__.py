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
    "bus.cli.typescript",
    "bus.cli.reply",
    "bus.cli.frame",
    "bus.cli.journal",
    "pipeline.cli",
    "gateway.cli",
)
#: Commands that take a program to run after ``--`` (``busgate reply GROUP -- PROGRAM``).
PROGRAM_COMMANDS: frozenset[str] = frozenset({"reply"})


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
    words = list(sys.argv[1:] if argv is None else argv)
    program: list[str] | None = None
    if words and words[0] in PROGRAM_COMMANDS and "--" in words:
        # `busgate reply GROUP -- PROGRAM ARGS...`: what follows -- is a command line of its own.
        cut = words.index("--")
        words, program = words[:cut], words[cut + 1 :]
    args, extra = parser.parse_known_args(words)
    rest = getattr(args, "rest", None)
    if extra and rest and not any(word.startswith("-") and word != "-" for word in extra):
        # Payload words after an option (`request demo echo --timeout 3 x=1`): argparse leaves
        # them over; they belong to the command's list of words.
        getattr(args, rest).extend(extra)
    elif extra:
        parser.parse_args(words)  # the usual one-line error for what is really unknown
    if program is not None:
        args.program = program
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
