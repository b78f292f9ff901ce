"""A MOP message's content and a bus message's payload, one into the other
(docs/PROTOCOL.md section 11.3, *Content*): Kestrel's JSON mapping (1.7) both ways."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from bus.frame.frame import DataFrame
from bus.frame.jsonmap import to_json

__all__ = ["fields_of", "frame_of"]


def fields_of(payload: DataFrame | None) -> dict[str, Any]:
    """A PLD as MOP content fields (Kestrel JSON; a list payload is ``{"values": [...]}``)."""
    if payload is None or not len(payload):
        return {}
    value = orjson.loads(to_json(payload))
    return value if isinstance(value, dict) else {"values": value}


def frame_of(fields: Mapping[str, Any]) -> DataFrame:
    """MOP content fields as a PLD.

    Raises:
        EncodeError: a value the bus cannot carry (text outside Latin-1, a number beyond 64 bits).
    """
    return DataFrame(dict(fields))
