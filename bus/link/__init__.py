"""Seed 002's link: the wire frames, the client's connection state machine, authentication,
TLS, reconnection backoff, receipts and bus URLs (PROTOCOL.md sections 4 and 5).
Built on ``bus.message``; the broker (``bus.broker``) and the asyncio client (``bus.asyncio``)
drive it.
"""
