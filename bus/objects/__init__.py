"""The Object System (seed 003): JSON objects for non-Python programs and browsers.

Sans-I/O core: :mod:`bus.objects.codec` (framing) and :mod:`bus.objects.router` (routing).
Drivers: :mod:`bus.objects.tcp` (asyncio TCP listener and server links) and ``gateway/ws.py``
(WebSocket). :mod:`bus.objects.bridge` joins the Object System to the native bus.
"""

from bus.objects.codec import BusinessObject, ObjectDecoder, decode_object, encode_object
from bus.objects.router import Close, Deliver, ReceiveMode, Router

__all__ = [
    "BusinessObject",
    "Close",
    "Deliver",
    "ObjectDecoder",
    "ReceiveMode",
    "Router",
    "decode_object",
    "encode_object",
]
