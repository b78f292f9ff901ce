"""A lease in a JetStream key-value bucket: :class:`KvLease` (PROTOCOL.md 10.2).

Recorders of one journal name share a key, ``<prefix>.<name>``, in the bucket
:data:`BUCKET` (a JetStream stream ``KV_busgate-recorders`` whose ``max_age`` is the lease's
time to live, replicated as the bus's event stream is). The active recorder *creates* the key
(which succeeds only when nobody holds it) and writes it again every ``ttl / 5`` seconds, each
write conditional on the revision it wrote before; a recorder that dies stops writing, and
nats-server forgets the key ``ttl`` seconds after its last write, so a standby's next create
succeeds. A recorder that stops cleanly deletes the key: its standby takes over at once. The
arithmetic of when a holder must stop trusting its lease is :class:`bus.lease.LeaseTerm`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Final

import nats.errors
import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from bus.lease import LeaseTerm

__all__ = ["BUCKET", "KvLease"]

log = logging.getLogger("bus.asyncio.nats")

#: The key-value bucket that holds the recorders' leases.
BUCKET: Final = "busgate-recorders"

_REFUSED = (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.APIError)
_UNANSWERED = (nats.errors.Error, TimeoutError, OSError)


class KvLease:
    """One key of :data:`BUCKET` held as a lease (see the module doc).

    Use :meth:`open`, then :meth:`acquire` until it returns True, :meth:`renew` every
    ``term.every`` seconds while :meth:`valid`, and :meth:`release` when done.

    Args:
        kv: the bucket.
        key: the lease's key.
        holder: what the key says while this process holds it (JSON: host, pid, directory).
        term: the lease's arithmetic (its ``ttl`` is the bucket's ``max_age``).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        kv: KeyValue,
        key: str,
        holder: dict[str, object],
        term: LeaseTerm,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.key = key
        self.value = json.dumps(holder, sort_keys=True).encode()
        self.term = term
        self._clock = clock
        self._revision = 0

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        key: str,
        holder: dict[str, object],
        ttl: float,
        replicas: int = 1,
    ) -> KvLease:
        """The lease ``key`` in :data:`BUCKET`, made (with ``ttl`` and ``replicas``) if missing.

        A bucket that exists is used as it is: its ``max_age`` is the lease's ``ttl`` (every
        recorder of a cluster then agrees on it).

        Raises:
            ConfigError: ``ttl`` (or the bucket's) is under 1 s.
            nats.js.errors.APIError: JetStream refused the bucket.
            nats.errors.TimeoutError: no answer.
        """
        LeaseTerm(ttl)  # checks it before a bucket is made with it
        try:
            kv = await js.key_value(BUCKET)
        except nats.js.errors.BucketNotFoundError:
            config = KeyValueConfig(
                bucket=BUCKET,
                description="busgate journal recorders' leases (docs/PROTOCOL.md 10.2)",
                history=1,
                ttl=ttl,
                storage=StorageType.MEMORY,
                replicas=replicas,
            )
            try:
                kv = await js.create_key_value(config)
            except nats.js.errors.BadRequestError:  # another recorder made it meanwhile
                kv = await js.key_value(BUCKET)
        status = await kv.status()
        bucket_ttl = status.ttl or ttl
        if abs(bucket_ttl - ttl) > 1e-3:
            log.info(
                "lease: bucket %s forgets a lease after %.1f s; using that", BUCKET, bucket_ttl
            )
        return cls(kv, key, holder, LeaseTerm(bucket_ttl))

    def valid(self) -> bool:
        """Whether this process may act on the lease now."""
        return self.term.valid(self._clock())

    async def acquire(self) -> bool:
        """Create the key (nobody holds the lease): True when this process holds it now."""
        sent = self._clock()
        try:
            self._revision = await self.kv.create(self.key, self.value)
        except _REFUSED:
            return False
        except _UNANSWERED as exc:
            log.debug("lease %s: no answer to create: %s", self.key, exc)
            return False
        self.term.granted(sent)
        return True

    async def renew(self) -> bool:
        """Write the key again, if it is still ours: True when the lease is renewed.

        A key the server forgot meanwhile (a server restarted with the bucket in memory) is
        created again if nobody else did; one somebody else created means the lease is lost.
        A write that gets no answer changes nothing: the lease runs out by itself unless a
        later renewal gets through.
        """
        sent = self._clock()
        try:
            self._revision = await self.kv.update(self.key, self.value, last=self._revision)
        except _REFUSED:
            if await self.acquire():
                return True
            self.term.lost()
            return False
        except _UNANSWERED as exc:
            log.debug("lease %s: no answer to renewal: %s", self.key, exc)
            return self.term.valid(self._clock())
        self.term.granted(sent)
        return True

    async def release(self) -> None:
        """Delete the key if it is still ours (a standby takes over at once)."""
        self.term.lost()
        if self._revision:
            with contextlib.suppress(*_REFUSED, *_UNANSWERED):
                await self.kv.delete(self.key, last=self._revision)
            self._revision = 0

    async def holder(self) -> str:
        """Who holds the lease, as its key says (empty when nobody does, or unknown)."""
        try:
            entry = await self.kv.get(self.key)
        except (nats.js.errors.KeyNotFoundError, *_REFUSED, *_UNANSWERED):
            return ""
        try:
            who = json.loads(entry.value or b"{}")
            return f"{who.get('host', '?')} pid {who.get('pid', '?')} ({who.get('directory', '?')})"
        except (ValueError, AttributeError):
            return ""
