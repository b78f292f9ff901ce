"""Idempotency keys: a message id made from a key, and what a repeat is compared by
(PROTOCOL.md 5.17). Pure functions, no I/O.

An HTTP caller that sends ``Idempotency-Key: K`` gets the same message id every time it sends
the same key to the same route: :func:`derive_mid` is a name-based UUID (version 5, RFC 9562)
of the caller, the route and the key. So the de-duplication already on the bus applies to a
retry through any gateway: the broker's (and JetStream's ``Nats-Msg-Id``) for a confirmed
publish, and a busgate service's for a request (:func:`is_derived`: it keeps the answers of
requests whose MID is a version-5 UUID for :data:`WINDOW` seconds and sends them again for a
repeat). A repeat whose body differs (:func:`digest`) is refused: 409.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Final

import orjson

from bus.errors import DecodeError

__all__ = [
    "CONFLICT",
    "MAX_KEY",
    "NAMESPACE",
    "WINDOW",
    "check_key",
    "derive_mid",
    "digest",
    "is_derived",
]

#: The namespace of the derived ids (a UUID of its own: ids made here never equal another's).
NAMESPACE: Final = uuid.UUID("6b2f5d1e-5c1a-5f7e-9a43-0b7e2f1c9d20")
#: Seconds a key's first outcome is kept: JetStream's duplicate window, the broker's.
WINDOW: Final = 120.0
#: The longest key accepted (Stripe's limit).
MAX_KEY: Final = 255
#: The text of the NAK a service answers a repeat with a different body (the gateway's 409).
CONFLICT: Final = "idempotency key reused with a different request"


def check_key(key: str) -> str:
    """The key, checked: 1..255 visible ASCII characters.

    Raises:
        DecodeError: anything else (a 400).
    """
    if not 0 < len(key) <= MAX_KEY or not all(" " < char <= "~" for char in key):
        raise DecodeError(f"Idempotency-Key must be 1..{MAX_KEY} visible ASCII characters")
    return key


def derive_mid(caller: str, route: str, key: str) -> str:
    """The message id of every message sent for ``key`` by ``caller`` on ``route``."""
    return str(uuid.uuid5(NAMESPACE, f"{caller}\n{route}\n{key}"))


def is_derived(mid: str | None) -> bool:
    """Whether a message id is one :func:`derive_mid` (or any name-based v5 UUID) made: the
    version nibble of the text form (a random id's is 4)."""
    return mid is not None and len(mid) == 36 and mid[14] == "5"


def digest(data: Any) -> str:
    """What a repeat is compared by: the SHA-256 of the payload's data, keys sorted (so two
    gateways, or the same JSON spaced otherwise, give the same)."""
    try:
        text = orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except TypeError:  # bytes and the like: their repr is still the same for the same data
        text = repr(data).encode()
    return hashlib.sha256(text).hexdigest()
