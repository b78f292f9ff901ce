"""``busgate request | publish | listen | services | status | demo``: the bus from a shell.

Every command connects to ``--bus URL`` (default ``$BUSGATE_BUS`` or ``bus://127.0.0.1:4000``)
as ``--name``/``--secret`` (default ``$BUSGATE_NAME``/``$BUSGATE_SECRET``).

A payload is given as ``key=value`` pairs, as one JSON object (``'{"x": 1}'``), or as ``-``: a
JSON object read from standard input (they may be mixed; later keys win). In a pair, a value
that is valid JSON is taken as JSON (``n=3`` is a number, ``ok=true`` a boolean, ``tags=[1,2]``
a list), anything else as text (``name=Ann``); quote it as JSON to force text: ``code='"007"'``.
Group and type names follow the HTTP API's rules (:mod:`bus.discovery.names`). The connection
options
live in :mod:`bus.cli.connect`, the payload words and JSON lines in :mod:`bus.cli.payloads`,
the exit codes in :mod:`bus.cli.command`.

What is printed has the gateway's shapes: ``listen`` prints each event as the data of an SSE
event of ``GET /v1/subscribe`` (``{"type", "header", "payload"}``), ``services --json`` the body
of ``GET /v1/services``.

Exit codes: 0 success; 1 the bus said no (NAK, no responders, timeout, cannot connect), with one
line on stderr; 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from bus.asyncio.loop import settle_heap
from bus.cli.command import stop_event, sync, until
from bus.cli.connect import connect_from_args, connect_waiting, connection_args
from bus.cli.payloads import event_json, message_json, parse_pairs, read_payload
from bus.errors import ConfigError, NakError, RefusedError
from bus.journal.times import SINCE_HINT, parse_since
from bus.masking import mask_url

__all__ = ["event_json", "message_json", "parse_pairs", "read_payload", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the client subcommands to the ``busgate`` parser."""
    _add_request(subparsers)
    _add_publish(subparsers)
    _add_listen(subparsers)
    _add_services(subparsers)
    _add_status(subparsers)
    _add_demo(subparsers)


# -- parsers -----------------------------------------------------------------------------------


def _add_request(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "request",
        help="send a request to a service group and print the response as JSON",
        description="Send CMD with arguments to GROUP; print each response's payload as one "
        "JSON line. Arguments: key=value pairs, a JSON object ('{\"x\": 1}') or - (a JSON "
        "object on stdin). A NAK, no responders or a timeout: one line on stderr, exit 1.",
    )
    parser.add_argument("group")
    parser.add_argument("cmd")
    parser.add_argument("args", nargs="*", metavar="key=value|JSON|-")
    parser.add_argument(
        "--timeout", type=_seconds, default=5.0, help="seconds, more than 0 (default 5)"
    )
    parser.add_argument("--json", action="store_true", help="send the request as JSON (ENC=JSON)")
    parser.add_argument("--full", action="store_true", help="print whole messages, not payloads")
    connection_args(parser)
    parser.set_defaults(func=sync(_request), rest="args")


def _add_publish(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="publish an event on a type",
        description="Publish an event on TYPE (major.minor): key=value pairs, a JSON object or "
        "- (a JSON object on stdin). Says what it published on stderr.",
    )
    parser.add_argument("type", help="major.minor type, e.g. sensor.temp")
    parser.add_argument("args", nargs="*", metavar="key=value|JSON|-")
    connection_args(parser)
    parser.set_defaults(func=sync(_publish), rest="args")


def _add_listen(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "listen",
        help="print messages on a type pattern as JSON lines as they arrive",
        description="Subscribe to PATTERN (sensor.temp, sensor.*, >) and print each message as a "
        'JSON line, {"type", "header", "payload"} as in the SSE stream of GET /v1/subscribe, '
        "until interrupted or --count messages arrived.",
    )
    parser.add_argument("pattern")
    parser.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    parser.add_argument(
        "--since",
        metavar="SEQ|TIME",
        help="first the journaled events after sequence number SEQ (digits; the SEQ of the "
        "last event you saw), or from TIME (ISO 8601 or a duration ago: 15m, 2h); then live. "
        "The listener then resumes from the journal after any reconnection (PROTOCOL.md 5.14)",
    )
    connection_args(parser)
    parser.set_defaults(func=sync(_listen))


def _add_services(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "services",
        help="list the live services and their instance counts (from OAM.SERVICE heartbeats)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=1.0,
        help="seconds to collect heartbeats after probing (default 1; services that do not "
        "answer probes need a whole heartbeat interval)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the JSON of GET /v1/services, not a table"
    )
    connection_args(parser)
    parser.set_defaults(func=sync(_services))


def _add_status(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status", help="the broker's status (a management request; needs a manager's rights)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    connection_args(parser)
    parser.set_defaults(func=sync(_status))


def _add_demo(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the demo service (group demo: echo, time, sleep, fail, count)"
    )
    parser.add_argument("--group", default="demo", help="group to serve (default demo)")
    parser.add_argument("--instances", type=int, default=1, help="instances to run (default 1)")
    parser.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for the bus when it is not up yet (default 30)",
    )
    connection_args(parser)
    parser.set_defaults(func=sync(_demo))


# -- argument helpers --------------------------------------------------------------------------


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


# -- commands ----------------------------------------------------------------------------------


async def _request(args: argparse.Namespace) -> int:
    from bus.discovery.names import check_group
    from bus.frame.enums import Encoding

    check_group(args.group)
    if not args.cmd:
        raise ConfigError("CMD must not be empty")
    payload = read_payload(args.args)
    enc = Encoding.JSON if args.json else Encoding.FRAM
    client = await connect_from_args(args)
    try:
        stream = client.request_stream(args.group, args.cmd, payload, timeout=args.timeout, enc=enc)
        async for response in stream:
            if response.typ == "NAK":
                raise NakError(response.msg or "", response.rcd, response)
            if response.end and "PLD" not in response.frame and not args.full:
                continue  # the end-of-stream marker carries no data (PROTOCOL.md 2.3)
            print(message_json(response, full=args.full), flush=True)
    finally:
        await client.close()
    return 0


async def _publish(args: argparse.Namespace) -> int:
    from bus.discovery.names import check_type
    from bus.message.message import Message

    check_type(args.type)
    payload = read_payload(args.args)
    message = Message.event(args.type, payload)
    client = await connect_from_args(args)
    try:
        await client.send(message)
    finally:
        await client.close()
    size = len(json.dumps(payload, separators=(",", ":")))
    print(f"published on {args.type}: {size} bytes of JSON, MID {message.mid}", file=sys.stderr)
    return 0


async def _listen(args: argparse.Namespace) -> int:
    from bus.discovery.topics import check_pattern

    check_pattern(args.pattern)  # a bad pattern is bad input, whether a broker runs or not
    since, since_time = _since(args.since)
    client = await connect_from_args(args)
    stop = stop_event()
    seen = 0
    try:
        if since is None and since_time is None:
            sub = await client.subscribe(args.pattern)
        else:
            sub = await client.subscribe(args.pattern, since=since, since_time=since_time)
        gaps = 0
        async for message in until(sub, stop):
            if sub.gaps != gaps:  # the link was lost meanwhile: say so, beside the JSON lines
                gaps = sub.gaps
                print(f"busgate listen: gap: {sub.last_gap}; events may be missing",
                      file=sys.stderr, flush=True)  # fmt: skip
            print(event_json(message), flush=True)
            seen += 1
            if args.count and seen >= args.count:
                break
    finally:
        await client.close()
    return 0


def _since(text: str | None) -> tuple[int | None, float | None]:
    """``--since``: a sequence number (digits) or a time (:func:`bus.journal.times.parse_since`).

    Raises:
        ConfigError: neither.
    """
    if text is None:
        return None, None
    try:
        return parse_since(text, time.time())
    except ValueError as exc:
        raise ConfigError(f"--since {text!r}: {SINCE_HINT}") from exc


async def _services(args: argparse.Namespace) -> int:
    from bus.asyncio.directory import ServiceDirectory
    from bus.discovery.directory_json import listing, service_entries

    client = await connect_from_args(args)
    try:
        directory = ServiceDirectory(client)
        await directory.start()
        await asyncio.sleep(args.wait)
        services = directory.services()
        instances = directory.instances()
        await directory.stop()
    finally:
        await client.close()
    if args.json:
        document = listing(service_entries(services, instances, time.time()))
        print(json.dumps(document, indent=2))
    else:
        print(_service_table(services))
    return 0


def _service_table(services: Sequence[Any]) -> str:
    if not services:
        return "no live services (no heartbeats on OAM.SERVICE)"
    now = time.time()
    rows = [("GROUP", "INSTANCES", "STATUS", "LAST SEEN", "HANDLED", "FAILED", "COMMANDS")]
    for s in services:
        ago = f"{max(0.0, now - s.last_seen):.1f}s ago"
        commands = ",".join(s.commands)
        load = s.load
        rows.append(
            (
                s.group,
                str(s.instances),
                s.status,
                ago,
                str(load.handled),
                str(load.failed),
                commands,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


async def _status(args: argparse.Namespace) -> int:
    client = await connect_from_args(args)
    try:
        try:
            response = await client.manage("status", timeout=args.timeout)
        except RefusedError as exc:
            who = f"post office {args.name!r}" if args.name else "an anonymous connection"
            raise RefusedError(
                f"not authorized: {who} may not read the broker status ({exc.reason}); "
                "connect as a manager with --name/--secret"
            ) from exc
        print(json.dumps(json.loads(message_json(response, full=False)), indent=2))
    finally:
        await client.close()
    return 0


async def _demo(args: argparse.Namespace) -> int:
    from bus.demo import create_demo_service

    if args.instances < 1:
        raise ConfigError("--instances must be at least 1")
    client = await connect_waiting(args, args.wait)
    stop = stop_event()
    services = [create_demo_service(client, group=args.group) for _ in range(args.instances)]
    try:
        for svc in services:
            await svc.start()
        where = mask_url(args.bus)
        print(f"demo service: group {args.group!r} on {where}, Ctrl-C to stop", flush=True)
        settle_heap()
        await stop.wait()
    finally:
        for svc in services:
            await svc.stop()
        await client.close()
    return 0
