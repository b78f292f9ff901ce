"""How a bus command reaches the bus: ``--bus URL``, ``--name``, ``--secret`` and connecting.

Every command connects to ``--bus URL`` (default ``$BUSGATE_BUS`` or ``bus://127.0.0.1:4000``)
as ``--name``/``--secret`` (default ``$BUSGATE_NAME``/``$BUSGATE_SECRET``), or with the secret
read from ``--secret-file`` (``$BUSGATE_SECRET_FILE``), which keeps it off the command line and
out of the shell's history. What it prints of the URL is masked (:func:`bus.masking.mask_url`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from typing import TYPE_CHECKING

from bus.errors import ConfigError, ConnectError, LinkError
from bus.masking import mask_url

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client

__all__ = [
    "DEFAULT_BUS",
    "connect_from_args",
    "connect_waiting",
    "connection_args",
    "read_secret_file",
]

DEFAULT_BUS = "bus://127.0.0.1:4000"


def connection_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--bus``, ``--name`` and ``--secret`` (defaults from the environment) to a parser."""
    env = os.environ
    parser.add_argument(
        "--bus",
        default=env.get("BUSGATE_BUS", DEFAULT_BUS),
        help="broker URL (default $BUSGATE_BUS or %(default)s)",
    )
    parser.add_argument("--name", default=env.get("BUSGATE_NAME"), help="post office name")
    parser.add_argument("--secret", default=env.get("BUSGATE_SECRET"), help="its secret")
    parser.add_argument(
        "--secret-file",
        default=env.get("BUSGATE_SECRET_FILE"),
        metavar="PATH",
        help="read the secret from this file (its first line; default $BUSGATE_SECRET_FILE)",
    )


def read_secret_file(path: str) -> str:
    """The secret in the file at ``path``: its first line, without the line end.

    Raises:
        ConfigError: the file cannot be read, or its first line is empty.
    """
    try:
        with open(path, encoding="utf-8") as file:
            secret = file.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read --secret-file {path}: {exc}") from exc
    if not secret:
        raise ConfigError(f"--secret-file {path} holds no secret (its first line is empty)")
    return secret


async def connect_from_args(args: argparse.Namespace) -> Client:
    """Connect to ``args.bus`` as ``args.name``/``args.secret``.

    Raises:
        ConnectError: the bus is unreachable, or the URL is a web server's (said in one line).
    """
    from bus.asyncio.client import connect

    secret = args.secret
    if secret is None and getattr(args, "secret_file", None):
        secret = read_secret_file(args.secret_file)
    try:
        return await connect(args.bus, name=args.name, secret=secret)
    except LinkError as exc:
        if "speaks HTTP" not in str(exc):
            raise
        # A gateway's (or any web server's) port given as --bus: say so, not "bad frame type".
        answer = re.search(r"answered '([^']*)'", str(exc))
        said = f" (it answered {answer.group(1)!r})" if answer else ""
        raise ConnectError(
            f"{mask_url(args.bus)} looks like HTTP, not a broker{said}: --bus takes the broker's "
            "port (bus://host:4000 by default); the gateway's http:// URL is for curl"
        ) from exc


async def connect_waiting(args: argparse.Namespace, wait: float) -> Client:
    """Connect, retrying for up to ``wait`` seconds: a service may start before its bus.

    Raises:
        ConnectError: the bus was still unreachable after ``wait`` seconds.
    """
    deadline = time.monotonic() + wait
    delay = 0.2
    told = False
    while True:
        try:
            return await connect_from_args(args)
        except ConnectError:
            if time.monotonic() + delay > deadline:
                raise
            if not told:
                print(f"busgate: waiting for the bus at {mask_url(args.bus)} ...", file=sys.stderr)
                told = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
