"""HTTP bodies into payload frames: a JSON object, with errors that say what and where.

:func:`parse_body` is what ``POST /v1/request/{group}`` and ``POST /v1/publish/{type}`` read
their body with (docs/PROTOCOL.md 9.3). On top of Kestrel's JSON mapping
(:func:`bus.frame.jsonmap.from_json`) it:

- accepts a UTF-8 byte order mark before the JSON (RFC 8259 section 8.1 lets a parser ignore
  one; Windows tools write it);
- refuses an empty body, and anything but an object, naming what came instead;
- refuses a member named ``""``: an unnamed field is how Kestrel's mapping writes array
  elements, so ``{"CMD":"echo","":1}`` would come back as ``[1]``;
- gives every error's position as a byte offset into the body as sent (the BOM counted).
"""

from __future__ import annotations

from typing import Final

from bus.errors import DecodeError
from bus.frame.codec import DEFAULT_LIMITS, Limits
from bus.frame.frame import DataFrame
from bus.frame.jsonmap import from_json, locate

__all__ = ["UTF8_BOM", "parse_body"]

UTF8_BOM: Final = b"\xef\xbb\xbf"
#: A payload is one level inside its message (PLD), so it may nest one level less than a
#: message: deeper, every receiver would refuse the message the gateway sent.
PAYLOAD_LIMITS: Final = Limits(max_depth=DEFAULT_LIMITS.max_depth - 1)
_WHAT: Final = {"[": "an array", '"': "a string", "t": "true", "f": "false", "n": "null"}


def parse_body(body: bytes, *, need_cmd: bool) -> DataFrame:
    """Parse a JSON object body into a payload frame.

    Args:
        body: the body as received.
        need_cmd: require a non-empty text ``CMD`` member (requests).

    Returns:
        The payload frame (Kestrel's JSON mapping).

    Raises:
        DecodeError: not UTF-8, empty, not an object, a member named ``""``, not JSON, a limit
            of the mapping (its text names the limit), or (with ``need_cmd``) no text CMD. The
            offset is in bytes of ``body``.
    """
    skip = len(UTF8_BOM) if body.startswith(UTF8_BOM) else 0
    try:
        text = body[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("body is not UTF-8", exc.start + skip) from exc
    first = len(text) - len(text.lstrip(" \t\r\n"))
    if first == len(text):
        raise DecodeError('body is empty: send a JSON object, e.g. {"CMD": "echo"}')
    if text[first] != "{":
        what = _WHAT.get(text[first], "a number" if text[first] in "-0123456789" else "not JSON")
        raise DecodeError(f"body must be a JSON object, not {what}", _bytes(text, first, skip))
    if '""' in text:
        where = locate(text, "empty-name")
        if where is not None:
            raise DecodeError(
                'a member named "" is not allowed: every argument needs a name',
                _bytes(text, where, skip),
            )
    try:
        payload = from_json(text, PAYLOAD_LIMITS, finite=True)
    except DecodeError as exc:
        offset = None if exc.offset is None else _bytes(text, exc.offset, skip)
        reason = exc.reason
        if reason.startswith("JSON nested deeper"):
            reason = (
                f"JSON nested deeper than max_depth ({DEFAULT_LIMITS.max_depth} levels, the "
                f"message that carries the body being one: {PAYLOAD_LIMITS.max_depth} in it)"
            )
        raise DecodeError(reason, offset) from exc
    if need_cmd:
        cmd = payload.get("CMD")
        if not isinstance(cmd, str) or not cmd:
            raise DecodeError('body must have a "CMD" text field naming the command')
    return payload


def _bytes(text: str, index: int, skip: int) -> int:
    """The byte offset in the body of character ``index`` of its decoded text."""
    head = text[:index]
    return skip + (len(head) if head.isascii() else len(head.encode("utf-8")))
