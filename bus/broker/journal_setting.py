"""The broker's journal setting: where and how routed messages are journaled (PROTOCOL.md 8).

The ``journal`` object of the broker's JSON config file, its ``BUSGATE_JOURNAL*`` variables and
flags all become one :class:`JournalSetting` (:mod:`bus.broker.config` reads the sources).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from bus.errors import ConfigError

__all__ = [
    "JOURNAL_FSYNC_POLICIES",
    "JournalSetting",
    "journal_from_env",
    "merge_journal",
    "read_journal",
]

#: The journal's fsync policies (``bus.journal.FsyncPolicy``).
JOURNAL_FSYNC_POLICIES: Final = ("none", "interval", "always")
_JOURNAL_TYPES: Final = ("RQS", "ACK", "NAK", "OAM", "HBT", "EVT")
_SMALLEST_SEGMENT: Final = 56  # a segment header and one empty record (bus.journal, v2)


@dataclass(frozen=True)
class JournalSetting:
    """Where and how the broker journals routed messages (PROTOCOL.md section 8).

    Attributes:
        directory: the journal directory.
        filter: comma-separated patterns over GRP (``*``/``>`` alone: every group).
        types: comma-separated TYP values to record (``RQS,ACK,NAK``; empty: every type).
        max_segment_bytes: start a new segment before one grows past this (default 64 MiB).
        max_segment_age_ms: start a new segment at the first append this long after the
            segment was created (default 1 hour).
        fsync: ``none``, ``interval`` (default) or ``always`` (see ``bus.journal.FsyncPolicy``).
        fsync_interval_ms: least time between fsyncs under ``interval`` (default 1000).
        max_bytes: delete the oldest segments once all of them hold more than this (0, the
            default: keep everything; ``bus.journal.retention``).
        max_age_ms: delete a segment once the one after it is older than this (0: keep).

    Raises:
        ConfigError: a value out of range, an unknown type or fsync policy.
    """

    directory: str
    filter: str = ">"
    types: str = ""
    max_segment_bytes: int = 64 * 1024 * 1024
    max_segment_age_ms: int = 3_600_000
    fsync: str = "interval"
    fsync_interval_ms: int = 1000
    max_bytes: int = 0
    max_age_ms: int = 0

    def __post_init__(self) -> None:
        for name in sorted(_JOURNAL_INTS):
            value = getattr(self, name)
            if type(value) is not int or value < (0 if name in _MAY_BE_ZERO else 1):
                raise ConfigError(f"journal {name} must be a positive integer, got {value!r}")
        if self.max_segment_bytes < _SMALLEST_SEGMENT:
            raise ConfigError(
                f"journal max_segment_bytes must be >= {_SMALLEST_SEGMENT}, "
                f"got {self.max_segment_bytes}"
            )
        fsync = str(self.fsync).strip().lower()
        if fsync not in JOURNAL_FSYNC_POLICIES:
            raise ConfigError(f"journal fsync must be none, interval or always, got {fsync!r}")
        object.__setattr__(self, "fsync", fsync)
        unknown = [t for t in self.type_set or () if t not in _JOURNAL_TYPES]
        if unknown:
            raise ConfigError(f"journal types: unknown TYP {', '.join(unknown)}")

    @property
    def group_patterns(self) -> tuple[str, ...] | None:
        """The GRP patterns of :attr:`filter` (``None``: every group)."""
        text = self.filter.strip()
        if text in ("", "*", ">"):
            return None
        return tuple(p.strip() for p in text.split(",") if p.strip())

    @property
    def type_set(self) -> frozenset[str] | None:
        """The TYP values of :attr:`types` (``None``: every type)."""
        found = frozenset(t.strip().upper() for t in self.types.split(",") if t.strip())
        return found or None

    def to_json(self) -> dict[str, Any]:
        """The setting as the JSON file's ``journal`` object."""
        return {key: getattr(self, attr) for key, attr in _JOURNAL_KEYS.items()}

    def merged(self, changes: Mapping[str, Any]) -> JournalSetting:
        """A copy with some fields changed (a later source of settings over an earlier one)."""
        return replace(self, **changes)


# The journal object's JSON keys -> JournalSetting fields; its variables (after BUSGATE_).
_JOURNAL_KEYS: Final = {
    "directory": "directory",
    "filter": "filter",
    "types": "types",
    "maxSegmentBytes": "max_segment_bytes",
    "maxSegmentAgeMS": "max_segment_age_ms",
    "fsync": "fsync",
    "fsyncIntervalMS": "fsync_interval_ms",
    "maxBytes": "max_bytes",
    "maxAgeMS": "max_age_ms",
}
_JOURNAL_ENV: Final = {
    "JOURNAL": "directory",
    "JOURNAL_FILTER": "filter",
    "JOURNAL_TYPES": "types",
    "JOURNAL_MAX_SEGMENT_BYTES": "max_segment_bytes",
    "JOURNAL_MAX_SEGMENT_AGE_MS": "max_segment_age_ms",
    "JOURNAL_FSYNC": "fsync",
    "JOURNAL_FSYNC_INTERVAL_MS": "fsync_interval_ms",
    "JOURNAL_MAX_BYTES": "max_bytes",
    "JOURNAL_MAX_AGE_MS": "max_age_ms",
}
_JOURNAL_INTS: Final = frozenset(
    {"max_segment_bytes", "max_segment_age_ms", "fsync_interval_ms", "max_bytes", "max_age_ms"}
)
#: The integers for which 0 is a value (0 ms between fsyncs; 0: no retention limit).
_MAY_BE_ZERO: Final = frozenset({"fsync_interval_ms", "max_bytes", "max_age_ms"})


def merge_journal(base: JournalSetting | None, changes: Mapping[str, Any]) -> JournalSetting | None:
    """Apply journal fields from a later source (variables, flags) over an earlier setting.

    Args:
        base: the setting so far (None: no journal yet).
        changes: field name -> value; ``None`` values are ignored.

    Returns:
        The merged setting; None when there is still no directory (options alone enable nothing).

    Raises:
        ConfigError: a bad value.
    """
    given = {key: value for key, value in changes.items() if value is not None}
    if base is None:
        if not given.get("directory"):
            return None
        base = JournalSetting(str(given["directory"]))
    return base.merged(given) if given else base


def read_journal(path: Path, value: object) -> JournalSetting | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("directory"), str):
        raise ConfigError(f"broker config {path}: journal needs a directory")
    unknown = sorted(set(value) - set(_JOURNAL_KEYS))
    if unknown:
        raise ConfigError(f"broker config {path}: unknown journal key {unknown[0]!r}")
    fields_ = {_JOURNAL_KEYS[key]: item for key, item in value.items()}
    for name in _JOURNAL_INTS & fields_.keys():
        if type(fields_[name]) is not int:
            raise ConfigError(f"broker config {path}: journal {name} must be an integer")
    setting: dict[str, Any] = {
        name: item if name in _JOURNAL_INTS else str(item) for name, item in fields_.items()
    }
    return JournalSetting(**setting)


def journal_from_env(environ: Mapping[str, str], prefix: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for suffix, name in _JOURNAL_ENV.items():
        text = environ.get(prefix + suffix)
        if text is None or (name == "directory" and not text):
            continue
        if name in _JOURNAL_INTS:
            try:
                found[name] = int(text)
            except ValueError as exc:
                raise ConfigError(f"{prefix}{suffix} must be an integer, got {text!r}") from exc
        else:
            found[name] = text
    return found
