"""The ``busgate`` command line.

Each subcommand lives in its own module that exposes ``register(subparsers)``; the module adds
its parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning
the exit code). Exit codes: 0 success, 1 runtime failure, 2 bad input (one-line error on stderr).

A run imports only the module of the subcommand it runs: the others appear in ``--help`` through
their one-line summaries in ``COMMANDS`` (kept equal to what the modules register by a test), so
``busgate report`` or ``busgate --help`` do not load the gateway, uvicorn or the broker.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["main"]

#: Each subcommand, in --help order: the module that registers it and its one-line summary.
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("bus.cli.broker", "run the central post office (the bus broker)"),
    "run": (
        "bus.cli.run",
        "start the broker, the demo service and the gateway with its console",
    ),
    "request": (
        "bus.cli.client",
        "send a request to a service group and print the response as JSON",
    ),
    "publish": ("bus.cli.client", "publish an event on a type"),
    "listen": (
        "bus.cli.client",
        "print messages on a type pattern as JSON lines as they arrive",
    ),
    "services": (
        "bus.cli.client",
        "list the live services and their instance counts (from OAM.SERVICE heartbeats)",
    ),
    "status": (
        "bus.cli.client",
        "the broker's status (a management request; needs a manager's rights)",
    ),
    "demo": ("bus.cli.client", "run the demo service (group demo: echo, time, sleep, fail, count)"),
    "typescript": (
        "bus.cli.typescript",
        "write TypeScript declarations (.d.ts) of the live services' typed commands, "
        "for the busgate JavaScript client",
    ),
    "reply": (
        "bus.cli.reply",
        "answer a group's requests from the shell (a fixed answer, --echo or a program)",
    ),
    "frame": ("bus.cli.frame", "decode or encode a data frame (hex <-> JSON)"),
    "journal": ("bus.cli.journal", "read, tail and replay the broker's journal"),
    "report": ("pipeline.cli", "Spark report over the journal (Parquet + HTML)"),
    "spark": ("pipeline.cli", "a resident Spark for fast reports"),
    "gateway": ("gateway.process.cli", "run the HTTP gateway"),
}
# Modules that contribute subcommands, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))
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


def build_parser_for(command: str | None) -> argparse.ArgumentParser:
    """Build the top-level parser importing only ``command``'s module.

    Every other subcommand is listed by its summary (so ``--help`` and the error for an unknown
    command read as with :func:`build_parser`), without importing its module.
    """
    parser = argparse.ArgumentParser(
        prog="busgate", description="busgate: a binary message bus and its web gateway"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    entry = COMMANDS.get(command) if command is not None else None
    registered: set[str] = set()
    for name, (module, summary) in COMMANDS.items():
        if name in registered:
            continue
        if entry is not None and module == entry[0]:
            before = set(subparsers.choices)
            importlib.import_module(module).register(subparsers)
            registered |= set(subparsers.choices) - before
        else:
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser_for(words[0] if words else None)
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


_exit_at_once = False


def exit_at_once() -> None:
    """Ask :func:`run` to end the process without the interpreter's teardown: for a command
    that closed everything it opened and whose imports take long to tear down (a Spark Connect
    client: the interpreter's shutdown took 0.6 s at load 3 and 3-5 s at load 13 after a
    ``busgate report --remote``, against 0.1 s without it)."""
    global _exit_at_once
    _exit_at_once = True


def run() -> NoReturn:
    """The ``busgate`` program: :func:`main`, then exit with its code."""
    code = main()
    if _exit_at_once:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
