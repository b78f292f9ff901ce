"""Push subscriptions: events POSTed to an HTTP endpoint, at least once (PROTOCOL.md 9.14).

Sans-I/O: what a push subscription is (:class:`PushSpec`), how its requests are signed
(:func:`signature`), how long it waits before a retry (:func:`retry_delay`), where it may
resume after a restart (:class:`Ledger`) and what goes to the dead-letter type
(:func:`dead_letter`). The driver that reads the bus and speaks HTTP is
:mod:`gateway.events.push`.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import random
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from bus.discovery.names import TYPE_NAME, reserved
from bus.discovery.topics import check_pattern
from bus.errors import ConfigError

__all__ = [
    "NAME",
    "Ledger",
    "PushSpec",
    "dead_letter",
    "retry_delay",
    "signature",
    "verify",
]

#: What a push subscription may be called.
NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
#: The header that carries :func:`signature`.
SIGNATURE_HEADER: Final = "Busgate-Signature"


@dataclass(frozen=True)
class PushSpec:
    """One push subscription, as an operator declares it.

    Attributes:
        name: its name (``[A-Za-z0-9][A-Za-z0-9_-]{0,63}``): metrics, files, dead letters.
        pattern: the events it pushes (``orders.*``).
        url: where they are POSTed (``http://`` or ``https://``).
        secret: the key of the HMAC-SHA256 signature header (``""``: not signed).
        max_attempts: deliveries tried before an event goes to the dead-letter type (8).
        dead_letter: that type (default ``deadletter.<name>``).
        timeout: seconds one delivery may take (10).
        backoff_initial, backoff_max: the retry delays' first and largest ceilings, seconds.
        concurrency: types delivered at once (each type in order; 16).
    """

    name: str
    pattern: str
    url: str
    secret: str = field(default="", repr=False)
    max_attempts: int = 8
    dead_letter: str = ""
    timeout: float = 10.0
    backoff_initial: float = 0.5
    backoff_max: float = 60.0
    concurrency: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ConfigError(f"push name {self.name!r}: letters, digits, _ and -, 1..64")
        check_pattern(self.pattern)
        parts = urlsplit(self.url)
        spaced = any(char.isspace() or ord(char) < 32 for char in self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or spaced:
            raise ConfigError(f"push {self.name}: url must be http(s)://host..., not {self.url!r}")
        if not self.dead_letter:
            object.__setattr__(self, "dead_letter", f"deadletter.{self.name}")
        if not TYPE_NAME.fullmatch(self.dead_letter) or reserved(self.dead_letter):
            raise ConfigError(f"push {self.name}: dead_letter {self.dead_letter!r} is no type")
        if self.max_attempts < 1 or self.concurrency < 1:
            raise ConfigError(f"push {self.name}: max_attempts and concurrency must be >= 1")
        numbers = (self.timeout, self.backoff_initial, self.backoff_max)
        if not all(math.isfinite(n) and n > 0 for n in numbers):
            raise ConfigError(f"push {self.name}: timeout and backoff must be > 0")
        if self.backoff_max < self.backoff_initial:
            raise ConfigError(f"push {self.name}: backoff_max must be >= backoff_initial")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str | None = None) -> PushSpec:
        """From a config table or an admin API body (``name`` from the URL wins).

        Raises:
            ConfigError: a missing or bad field, an unknown one.
        """
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"push: unknown field {unknown[0]!r}")
        values = dict(data)
        if name is not None:
            values["name"] = name
        for required in ("name", "pattern", "url"):
            if not isinstance(values.get(required), str):
                raise ConfigError(f"push: {required!r} is required (text)")
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"push: {exc}") from exc

    def to_json(self, *, secret: bool = False) -> dict[str, Any]:
        """As the admin API lists it (the secret only when asked: to write it to a file)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if not secret:
            data["secret"] = "********" if self.secret else ""
        return data


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Busgate-Signature`` value: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of
    "<t>." + body>`` (as Stripe's webhooks: the time is signed too, against replays)."""
    mac = hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance: float = 300.0) -> bool:
    """What a receiver checks: the signature matches and is at most ``tolerance`` s old."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    wanted = signature(secret, timestamp, body).split(",v1=", 1)[1]
    return hmac.compare_digest(wanted, parts.get("v1", ""))


def retry_delay(
    attempt: int,
    initial: float,
    maximum: float,
    draw: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds before delivery attempt ``attempt + 1`` (``attempt`` >= 1 failed): exponential
    with jitter, drawn from the upper half of ``min(maximum, initial * 2**(attempt - 1))``."""
    ceiling = min(maximum, initial * 2.0 ** min(attempt - 1, 1000))
    return draw(ceiling / 2, ceiling)


class Ledger:
    """Events taken but not yet delivered, by sequence number: where a restart must resume.

    Events of different types finish out of order; :attr:`position` is the highest sequence
    number below which every event taken is delivered (or dead-lettered), so resuming after it
    skips none (and may deliver some again: at least once).
    """

    def __init__(self, position: int = 0) -> None:
        self.position = position
        self._taken: deque[int] = deque()  # in the order taken: increasing
        self._done: set[int] = set()  # delivered, not yet at the head

    def take(self, seq: int) -> None:
        """An event to deliver (sequence numbers come in increasing order)."""
        self._taken.append(seq)

    def done(self, seq: int) -> None:
        """An event delivered (or dead-lettered)."""
        taken, finished = self._taken, self._done
        finished.add(seq)
        while taken and taken[0] in finished:  # each one leaves once: O(1) amortised
            self.position = taken.popleft()
            finished.discard(self.position)

    @property
    def pending(self) -> int:
        """Events taken, not yet delivered."""
        return len(self._taken) - len(self._done)


def dead_letter(
    spec: PushSpec, event: Mapping[str, Any], attempts: int, error: str
) -> dict[str, Any]:
    """The payload of an event's dead letter: which push, how often tried, why, the event."""
    return {"push": spec.name, "url": spec.url, "attempts": attempts, "error": error[:1000],
            "event": dict(event)}  # fmt: skip
