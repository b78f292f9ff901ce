"""``busgate journal ship DIR URL``: copy closed segments to HDFS (or any Hadoop file system).

::

    busgate journal ship ./journal hdfs://namenode:8020/busgate/journal [--follow [--interval S]]
                                   [--conf fs.defaultFS=... ...]

Prints one line per closed segment (shipped, or already there); exit 0 when every closed
segment is at the target, 1 when one could not be shipped (or the target holds another file of
its name), 2 on bad input. Needs the ``pipeline`` extra (Hadoop's client comes with PySpark's
jars) and Java. What counts as closed, and how files are put in place: :mod:`pipeline.ship`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

__all__ = ["register_ship"]


def _conf(items: list[str] | None) -> dict[str, str]:
    conf = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf takes KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


def _cmd_ship(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bus.errors import JournalError

    if not Path(args.directory).is_dir():
        print(f"busgate journal: no such journal directory: {args.directory}", file=sys.stderr)
        return 2
    try:
        conf = _conf(args.conf)
    except ValueError as exc:
        print(f"busgate journal: bad input: {exc}", file=sys.stderr)
        return 2
    try:
        from pipeline.ship import HadoopTarget, follow, ship
    except ModuleNotFoundError as exc:
        print(
            f"busgate journal: ship needs the pipeline extra ({exc.name} is missing): "
            "pip install 'busgate[pipeline]'",
            file=sys.stderr,
        )
        return 1
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    shipped = already = 0
    try:
        with HadoopTarget(args.url, conf) as target:
            if args.follow:
                signal.signal(signal.SIGTERM, stop)
                signal.signal(signal.SIGINT, stop)
                done = follow(args.directory, target, args.interval, lambda: stopping)
            else:
                done = ship(args.directory, target)
            for one in done:
                state = "shipped" if one.written else "already there"
                print(f"{one.segment.name}: {one.size} bytes -> {one.url} ({state})", flush=True)
                shipped += one.written
                already += not one.written
    except JournalError as exc:
        print(f"busgate journal: {exc}", file=sys.stderr)
        return 1
    print(f"busgate journal: {shipped} segments shipped, {already} already there", file=sys.stderr)
    return 0


def register_ship(sub: Any) -> None:
    """Add ``busgate journal ship`` to the journal subcommands.

    Args:
        sub: ``busgate journal``'s ``add_subparsers()`` object.
    """
    parser = sub.add_parser(
        "ship", help="copy closed segments to HDFS or any Hadoop file system (idempotent)"
    )
    parser.add_argument("directory", help="the local journal directory")
    parser.add_argument("url", help="the target directory: hdfs://, webhdfs://, s3a://, file://")
    parser.add_argument(
        "--follow", action="store_true", help="keep shipping segments as they close"
    )
    parser.add_argument(
        "--interval", type=float, default=30.0, help="with --follow: seconds between looks"
    )
    parser.add_argument(
        "--conf", action="append", metavar="KEY=VALUE", help="a Hadoop setting (repeatable)"
    )
    parser.set_defaults(func=_cmd_ship)
