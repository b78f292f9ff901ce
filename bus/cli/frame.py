"""``busgate frame decode | encode``: look inside a data frame, or build one, from a shell.

``decode`` reads a frame as hex (the argument, or stdin) and prints typed JSON: every field's
name, type and value, nested (PROTOCOL.md 1.7). ``encode`` reads that JSON (the argument, or
stdin) and prints the frame as hex; a JSON object instead of a list is read as Kestrel JSON,
types inferred. ``--message`` decodes a whole message body in Kestrel's order instead (a body
that is not a frame becomes ``DATA`` with ENC=JSON/STR/UNKN).

Exit codes: 0 success; 2 bad input, with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bus.errors import DecodeError, EncodeError
from bus.frame.codec import decode, encode
from bus.frame.jsonmap import from_json, from_typed, to_json, to_typed
from bus.message.message import decode_message

__all__ = ["pretty", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``busgate frame`` and its two subcommands to the ``busgate`` parser."""
    frame = subparsers.add_parser(
        "frame",
        help="decode or encode a data frame (hex <-> JSON)",
        description="Decode a data frame from hex to typed JSON, or encode typed JSON to hex.",
    )
    actions = frame.add_subparsers(dest="frame_command", metavar="ACTION", required=True)

    dec = actions.add_parser("decode", help="hex -> typed JSON (argument or stdin)")
    dec.add_argument("hex", nargs="?", help="the frame as hex; spaces allowed (default: stdin)")
    dec.add_argument(
        "--kestrel", action="store_true", help="print Kestrel JSON (types dropped) instead"
    )
    dec.add_argument(
        "--message", action="store_true", help="decode a message body in Kestrel's order"
    )
    dec.set_defaults(func=_decode)

    enc = actions.add_parser("encode", help="typed JSON -> hex (argument or stdin)")
    enc.add_argument("json", nargs="?", help="typed JSON list, or a Kestrel JSON object")
    enc.set_defaults(func=_encode)


def _input(value: str | None) -> str:
    return value if value is not None else sys.stdin.read()


def _fail(text: str) -> int:
    print(f"busgate frame: error: {' '.join(text.split())}", file=sys.stderr)
    return 2


def _decode(args: argparse.Namespace) -> int:
    text = "".join(_input(args.hex).split())
    if text[:2].lower() == "0x":
        text = text[2:]
    try:
        raw = bytes.fromhex(text)
    except ValueError as exc:
        return _fail(f"not hex: {exc}")
    try:
        frame = decode_message(raw).frame if args.message else decode(raw)
    except DecodeError as exc:
        return _fail(f"not a data frame: {exc}")
    if args.kestrel:
        print(to_json(frame))
    else:
        print(pretty(to_typed(frame)))
    return 0


def pretty(fields: list[dict[str, Any]], indent: str = "") -> str:
    """Typed JSON with one field per line; a nested frame's fields indented below it."""
    if not fields:
        return "[]"
    inner = indent + "  "
    lines = []
    for spec in fields:
        if spec["type"] == "FRAME" and spec["value"]:
            head = json.dumps({"name": spec["name"], "type": "FRAME"}, ensure_ascii=False)
            lines.append(f'{inner}{head[:-1]}, "value": {pretty(spec["value"], inner)}}}')
        else:
            lines.append(inner + json.dumps(spec, ensure_ascii=False))
    return "[\n" + ",\n".join(lines) + "\n" + indent + "]"


def _encode(args: argparse.Namespace) -> int:
    try:
        data: Any = json.loads(_input(args.json))
    except ValueError as exc:
        return _fail(f"not JSON: {exc}")
    except RecursionError:
        return _fail("not JSON we can read: nested too deeply")
    try:
        frame = from_json(json.dumps(data)) if isinstance(data, dict) else from_typed(data)
        print(encode(frame).hex())
    except (DecodeError, EncodeError) as exc:
        return _fail(str(exc))
    except RecursionError:
        return _fail("nested too deeply")
    return 0
