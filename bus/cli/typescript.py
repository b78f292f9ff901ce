"""``busgate typescript``: TypeScript declarations of the live services (PROTOCOL.md 9.15).

Listens to the services' heartbeats as ``busgate services`` does, then writes what
:func:`bus.typescript.declarations` makes of their command schemas: with the ``busgate`` npm
package (``clients/js``), ``await bus.service("demo")`` is then typed in an editor. The gateway
answers the same at ``GET /v1/typescript``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bus.cli.command import sync
from bus.cli.connect import connect_from_args, connection_args

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "typescript",
        help="write TypeScript declarations (.d.ts) of the live services' typed commands, "
        "for the busgate JavaScript client",
    )
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only the groups matching this fnmatch pattern (repeatable; default all)",
    )
    parser.add_argument(
        "--out",
        "-o",
        metavar="FILE",
        help="write to FILE (e.g. src/busgate-services.d.ts) instead of standard output",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=1.0,
        help="seconds to collect heartbeats after probing (default 1)",
    )
    connection_args(parser)
    parser.set_defaults(func=sync(_typescript))


async def _typescript(args: argparse.Namespace) -> int:
    from bus.asyncio.directory import ServiceDirectory
    from bus.discovery.directory_json import service_entries
    from bus.typescript import declarations

    client = await connect_from_args(args)
    try:
        directory = ServiceDirectory(client)
        await directory.start()
        await asyncio.sleep(args.wait)
        entries = service_entries(directory.services(), directory.instances(), time.time())
        await directory.stop()
    finally:
        await client.close()
    text = declarations(entries, groups=args.group, source=_without_secret(args.bus))
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


def _without_secret(url: str) -> str:
    """The bus URL as the file may show it: no ``name:secret@``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
