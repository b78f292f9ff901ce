"""Seed 002's link: the wire frames (PROTOCOL.md section 3), the client's connection state machine,
authentication and TLS (section 4), reconnection backoff, publish receipts (5.12) and bus URLs.
Built on ``bus.message``; the broker (``bus.broker``) and the asyncio client (``bus.asyncio``)
drive it.
"""
