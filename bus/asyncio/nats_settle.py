"""Waiting for nats-server to have taken what a link wrote (``docs/PROTOCOL.md`` section 10,
"Control commands"): :func:`settle`, and leaving a group without losing a request
(:func:`drain`) or a pattern (:func:`unsubscribe`)."""

from __future__ import annotations

import contextlib

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.subscription import Subscription as NatsSubscription

__all__ = ["drain", "settle", "unsubscribe"]


async def settle(nc: NatsClient, timeout: int = 10) -> None:
    """Return once the server has taken every command this connection wrote so far.

    nats-py's ``flush()`` (2.16) writes its PING straight to the socket, ahead of the SUBs still
    queued for its flusher task: the PONG could come back before the server had the
    subscription, and a request another connection sent at once found no responder. The
    queued commands go out first (through the flusher, in order), then the PING.

    Raises:
        nats.errors.TimeoutError: no PONG within ``timeout`` seconds.
    """
    flush_pending = getattr(nc, "_flush_pending", None)
    if flush_pending is not None and nc.is_connected:
        await flush_pending(force_flush=True)
    await nc.flush(timeout)


async def drain(nc: NatsClient, subscriptions: list[NatsSubscription], timeout: int) -> None:
    """Leave a group: the server stops sending, and what it already sent is still delivered
    (the client sends requests for a group it is leaving back to the bus, PROTOCOL.md 5.2).

    nats-py's ``Subscription.drain()`` (2.16) queues its UNSUB for the flusher task but writes
    its PING straight to the socket, as ``flush()`` does (see :func:`settle`): the PONG could
    come back before the server had the UNSUB, nats-py then forgot the subscription, and the
    requests the server still sent it meanwhile were dropped without a word (their callers
    waited for their timeout). So the UNSUBs go first, in order, and :func:`settle` returns
    once the server has taken them: everything it sent these subscriptions came before the
    PONG and is queued in them; ``drain()`` then hands that on and forgets them (its second
    UNSUB, of a subscription the server no longer has, is ignored).
    """
    for subscription in subscriptions:
        with contextlib.suppress(nats.errors.Error):
            await nc._send_unsubscribe(subscription._id)
    await settle(nc, timeout)
    for subscription in subscriptions:
        with contextlib.suppress(nats.errors.Error):
            await subscription.drain()  # type: ignore[no-untyped-call]


async def unsubscribe(subscriptions: list[NatsSubscription]) -> None:
    for subscription in subscriptions:
        with contextlib.suppress(nats.errors.Error):
            await subscription.unsubscribe()
