"""The JetStream stream of the bus's events: made with its replicas, checked, attached in the
background (``docs/PROTOCOL.md`` 10.1, "The stream" and "Replicas").

- :func:`stream_config` is the stream busgate makes: the bus's events only (``<prefix>.evt.>``),
  file storage, :data:`MAX_AGE`, :data:`MAX_BYTES` (the oldest go first), a
  :data:`DUPLICATE_WINDOW` of 120 s as the broker's, and its replicas.
- :class:`Replicas` decides how many: the URL's ``?replicas=N`` or ``BUSGATE_STREAM_REPLICAS``
  when given, else 3 on a cluster (1 when it has fewer than 3 JetStream servers to place them
  on) and 1 on a server alone.
- :func:`ensure_stream` makes the stream if it is missing, adds the bus's subject to one that
  lacks it, and never uses a stream with fewer replicas than asked for without a word: when
  replicas were asked for, it is updated to them; otherwise a stream of one copy on a cluster
  of three or more servers is reported (a WARNING, once per process and stream).
- :func:`attach` runs it until it succeeds, so that a link is usable at once for everything
  that does not need the stream (requests, plain events) while JetStream elects a leader or
  the stream's node is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

from bus.discovery.nats_subjects import MAX_REPLICAS, url_replicas
from bus.errors import ConfigError

__all__ = [
    "DEFAULT_STREAM",
    "DUPLICATE_WINDOW",
    "MAX_AGE",
    "MAX_BYTES",
    "REPLICAS_ENV",
    "Replicas",
    "attach",
    "ensure_stream",
    "stream_config",
    "transient",
]

log = logging.getLogger("bus.asyncio.nats")

#: The stream's name unless the URL names another (``nats://host:4222?stream=NAME``).
DEFAULT_STREAM: Final = "BUSGATE"
#: Seconds an event stays in a stream busgate makes (7 days).
MAX_AGE: Final = 7 * 24 * 3600.0
#: Bytes a stream busgate makes holds before the oldest events go (1 GiB).
MAX_BYTES: Final = 1 << 30
#: Seconds within which a confirmed publish sent again (same MID) is stored once, as the broker.
DUPLICATE_WINDOW: Final = 120.0
#: The variable that asks for replicas when the URL does not (``?replicas=N`` wins).
REPLICAS_ENV: Final = "BUSGATE_STREAM_REPLICAS"
#: Replicas of the stream made on a cluster when nobody asked for a number.
CLUSTER_REPLICAS: Final = 3
#: JetStream's error code for "no suitable peers for placement" (fewer servers than replicas).
_NO_PLACEMENT: Final = 10005
#: JetStream's error codes (503s) for "not enabled" (for the account, on the server): they stay.
_NOT_ENABLED: Final = frozenset({10039, 10076})
#: Seconds between attempts of :func:`attach`: the first, doubling up to the last.
RETRY_FIRST, RETRY_MAX = 0.5, 5.0

_reported: set[tuple[str, str]] = set()  # (stream, what) already logged by this process


@dataclass(frozen=True)
class Replicas:
    """How many copies of the stream to keep.

    Attributes:
        asked: the number asked for (URL or variable), None for the default.
        clustered: the server is part of a cluster (its INFO names one).
        servers: the cluster's servers its INFO lists (``connect_urls``; 1 alone).
    """

    asked: int | None
    clustered: bool
    servers: int

    @classmethod
    def of(
        cls, url: str, server_info: Mapping[str, object], environ: Mapping[str, str] | None = None
    ) -> Replicas:
        """The replicas for a link to ``url`` whose server sent ``server_info``.

        Raises:
            ConfigError: a bad ``?replicas=`` or ``BUSGATE_STREAM_REPLICAS``.
        """
        asked = url_replicas(url)
        env = os.environ if environ is None else environ
        text = env.get(REPLICAS_ENV, "").strip()
        if asked is None and text:
            if not text.isdigit() or not 1 <= int(text) <= MAX_REPLICAS:
                raise ConfigError(f"bad {REPLICAS_ENV} {text!r}: a number from 1 to {MAX_REPLICAS}")
            asked = int(text)
        urls = server_info.get("connect_urls")
        servers = len(urls) if isinstance(urls, list) else 1
        return cls(asked, bool(server_info.get("cluster")), max(servers, 1))

    @property
    def wanted(self) -> int:
        """What a new stream gets (before falling back to 1 for lack of servers)."""
        if self.asked is not None:
            return self.asked
        return CLUSTER_REPLICAS if self.clustered else 1


def stream_config(name: str, prefix: str, replicas: int = 1) -> StreamConfig:
    """The stream busgate makes: the bus's events only, with the limits above."""
    return StreamConfig(
        name=name,
        subjects=[f"{prefix}.evt.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=MAX_AGE,
        max_bytes=MAX_BYTES,
        duplicate_window=DUPLICATE_WINDOW,
        num_replicas=replicas,
        description="busgate events (docs/PROTOCOL.md 10.1)",
    )


async def ensure_stream(
    js: JetStreamContext, name: str, prefix: str, replicas: Replicas | None = None
) -> int:
    """Make the stream if it is missing, add the bus's subject to one that lacks it, and see to
    its replicas (see the module doc); idempotent.

    Returns:
        The stream's replicas.

    Raises:
        nats.js.errors.APIError: JetStream refused (no JetStream for this account, subjects
            that overlap another stream's, replicas it cannot place when asked for them).
        nats.errors.TimeoutError: no answer (no meta leader, or the stream has no leader).
    """
    replicas = replicas or Replicas(None, False, 1)
    try:
        info = await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        try:
            return await _add(js, name, prefix, replicas)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code == _NO_PLACEMENT:
                raise
            info = await js.stream_info(name)  # another link made it meanwhile
    config = info.config
    changed = False
    wanted = f"{prefix}.evt.>"
    subjects = list(config.subjects or [])
    if wanted not in subjects:
        config.subjects = [*subjects, wanted]
        changed = True
    have = config.num_replicas or 1
    if replicas.asked is not None and have < replicas.asked:
        log.warning(
            "JetStream stream %r has %d replica(s): updating it to the %d asked for",
            name, have, replicas.asked,
        )  # fmt: skip
        config.num_replicas = have = replicas.asked
        changed = True
    elif replicas.asked is None and replicas.clustered and have < CLUSTER_REPLICAS:
        _report_few(name, have, replicas.servers)
    if changed:
        info = await js.update_stream(config)
        have = info.config.num_replicas or have
    return have


async def _add(js: JetStreamContext, name: str, prefix: str, replicas: Replicas) -> int:
    count = replicas.wanted
    try:
        await js.add_stream(stream_config(name, prefix, count))
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code != _NO_PLACEMENT or replicas.asked is not None or count == 1:
            raise
        log.warning(
            "JetStream stream %r made with 1 replica: the cluster has fewer than %d JetStream "
            "servers to place %d on (%s); a node loss loses the events it holds",
            name, count, count, exc.description,
        )  # fmt: skip
        count = 1
        await js.add_stream(stream_config(name, prefix, count))
    log.info("JetStream stream %r made with %d replica(s)", name, count)
    return count


def _report_few(name: str, have: int, servers: int) -> None:
    if (name, "few") in _reported:
        return
    _reported.add((name, "few"))
    log.warning(
        "JetStream stream %r has %d replica(s) on a cluster of %d server(s): the events on a "
        "node that dies are lost with it; ask for 3 with ?replicas=3 in the bus URL (or %s=3), "
        "which updates it, or run `nats stream edit %s --replicas 3`",
        name, have, servers, REPLICAS_ENV, name,
    )  # fmt: skip


def transient(exc: BaseException) -> bool:
    """Whether JetStream may answer otherwise soon: no answer, no leader, a cluster electing
    one, too few servers placed yet; not a refusal that stays (no JetStream, overlaps)."""
    if isinstance(exc, nats.js.errors.APIError):
        if exc.err_code in _NOT_ENABLED:
            return False
        return exc.code == 503 or exc.err_code == _NO_PLACEMENT
    return isinstance(exc, nats.errors.Error | TimeoutError)


async def attach(
    ensure: Callable[[], Awaitable[int]],
    name: str,
    on_ready: Callable[[int], None],
    on_refused: Callable[[str], None],
) -> None:
    """Run ``ensure()`` (an :func:`ensure_stream` call) until it succeeds or is refused.

    While JetStream does not answer (a cluster electing a leader, the stream's node gone) it is
    tried again, :data:`RETRY_FIRST` doubling to :data:`RETRY_MAX` s apart; the first failure
    is a WARNING, the success after one an INFO line.

    Args:
        ensure: makes the awaitable of one attempt.
        name: the stream's name, for the log.
        on_ready: called with the stream's replicas once it is there.
        on_refused: called with JetStream's reason when it refuses for good.
    """
    delay, failures = RETRY_FIRST, 0
    while True:
        try:
            replicas = await ensure()
        except (nats.errors.Error, TimeoutError) as exc:
            why = _why(exc)
            if not transient(exc):
                on_refused(why)
                return
            failures += 1
            if failures == 1:
                log.warning(
                    "NATS JetStream does not answer for stream %r (%s): confirmed publishes and "
                    "durable subscriptions wait, everything else goes on; trying again",
                    name, why,
                )  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
            continue
        if failures:
            log.info("NATS JetStream stream %r is there after %d attempt(s)", name, failures + 1)
        on_ready(replicas)
        return


def _why(exc: BaseException) -> str:
    if isinstance(exc, nats.js.errors.APIError):
        return str(exc.description or exc)
    return str(exc) or type(exc).__name__
