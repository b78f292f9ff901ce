"""What the bus commands read and print: payloads from the command line, messages as JSON.

A payload is given as ``key=value`` pairs, as one JSON object (``'{"x": 1}'``), or as ``-``: a
JSON object read from standard input (they may be mixed; later keys win). In a pair, a value
that is valid JSON is taken as JSON (``n=3`` is a number, ``ok=true`` a boolean, ``tags=[1,2]``
a list), anything else as text (``name=Ann``); quote it as JSON to force text: ``code='"007"'``.

Messages are printed in the gateway's shapes: an event as the data of an SSE event of
``GET /v1/subscribe`` (``{"type", "header", "payload"}``), one JSON object per line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bus.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from bus.message.message import Message

__all__ = ["event_json", "message_json", "parse_pairs", "read_payload"]


def parse_pairs(pairs: Sequence[str]) -> dict[str, Any]:
    """Turn ``key=value`` words into a dict (JSON values where they parse, else text).

    Raises:
        ConfigError: a word has no ``=`` or an empty key.
    """
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {pair!r}")
        try:
            result[key] = json.loads(text)
        except ValueError:
            result[key] = text
    return result


def read_payload(words: Sequence[str], stdin: Any = None) -> dict[str, Any]:
    """The payload the words give: ``key=value`` pairs, JSON objects and ``-`` (stdin), merged.

    Args:
        words: the command line's arguments after the names.
        stdin: where ``-`` reads from (default ``sys.stdin``).

    Raises:
        ConfigError: a word is none of these, or a JSON text is not an object.
    """
    result: dict[str, Any] = {}
    for word in words:
        if word == "-":
            text = (stdin or sys.stdin).read()
            result.update(_json_object(text, "standard input"))
        elif word.lstrip().startswith("{"):
            result.update(_json_object(word, "the argument"))
        else:
            result.update(parse_pairs([word]))
    return result


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f'{where} must be a JSON object, e.g. {{"x": 1}}')
    return value


def event_json(message: Message) -> str:
    """An event as the data of an SSE event of ``GET /v1/subscribe``: type, header, payload."""
    from bus.frame.jsonmap import to_json

    header = message.frame.copy()
    header.remove("PLD")
    return (
        f'{{"type":{json.dumps(message.grp or "")},"header":{_one_line(to_json(header))},'
        f'"payload":{_one_line(to_json(message.payload))}}}'
    )


def message_json(message: Message, *, full: bool = True) -> str:
    """One message (or only its payload) as a single line of JSON."""
    from bus.frame.jsonmap import to_json

    if full:
        return _one_line(to_json(message.frame))
    return _one_line(to_json(message.payload))


def _one_line(text: str) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
