"""What a group or an event type may be called where people type them (URLs, the command line).

The gateway's routes and the ``busgate`` commands check names with the same rules, so a name the
HTTP API refuses is refused by the CLI too (docs/PROTOCOL.md 9.1):

- a **group** (``POST /v1/request/{group}``, ``busgate request GROUP``): 1 to 128 characters of
  ``A-Z a-z 0-9 _ . : -``, the first alphanumeric (so no ``_INBOX.`` reply groups);
- an **event type** (``POST /v1/publish/{type}``, ``busgate publish TYPE``): ``major.minor``, two
  to eight dot-separated tokens of 1 to 64 characters of ``A-Z a-z 0-9 _ -`` (no wildcards: those
  are for subscription patterns, :func:`bus.discovery.topics.check_pattern`).
"""

from __future__ import annotations

import re
from typing import Final

from bus.errors import ConfigError

__all__ = ["GROUP_NAME", "RESERVED_PREFIXES", "TYPE_NAME", "check_group", "check_type", "reserved"]

GROUP_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
TYPE_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){1,7}")
#: Event types that are the system's (PROTOCOL.md 5.3): ``OAM.*`` (heartbeats, probes) and
#: ``_INBOX.*`` (replies). Not published over HTTP or by ``busgate publish``.
RESERVED_PREFIXES: Final = ("OAM.", "_INBOX.")


def reserved(type_: str) -> bool:
    """Whether ``type_`` is one of the system's (:data:`RESERVED_PREFIXES`)."""
    return type_.startswith(RESERVED_PREFIXES)


def check_group(group: str) -> str:
    """Return ``group`` if a request may be sent to it.

    Raises:
        ConfigError: it is not a group name (the text says which rule it breaks).
    """
    if GROUP_NAME.fullmatch(group):
        return group
    raise ConfigError(
        f"bad group name {group[:64]!r}: 1-128 characters of letters, digits, _ . : -, "
        "starting with a letter or digit"
    )


def check_type(type_: str) -> str:
    """Return ``type_`` if an event may be published on it.

    Raises:
        ConfigError: it is not a ``major.minor`` type.
    """
    if TYPE_NAME.fullmatch(type_) and not reserved(type_):
        return type_
    if reserved(type_):
        why = "OAM.* and _INBOX.* are reserved for the system (heartbeats, probes, replies)"
    elif any(mark in type_ for mark in "*>"):
        why = "wildcards are for listening (busgate listen), not for publishing"
    elif "." not in type_:
        why = "expected major.minor, e.g. sensor.temp"
    else:
        why = "expected major.minor: dot-separated words of letters, digits, _ or -"
    raise ConfigError(f"bad event type {type_[:64]!r}: {why}")
