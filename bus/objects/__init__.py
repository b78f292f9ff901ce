"""The Object System (seed 003): JSON objects for non-Python programs and browsers.

Sans-I/O core: :mod:`bus.objects.codec` (framing) and :mod:`bus.objects.router` (routing), with
what the router uses: :mod:`~bus.objects.subscription` (subscriptions and their filters),
:mod:`~bus.objects.outputs` (what it asks of drivers), :mod:`~bus.objects.peers` (its state of a
connection), :mod:`~bus.objects.server_objects` (the objects it writes itself),
:mod:`~bus.objects.registry` (named services) and :mod:`~bus.objects.dedupe` (loop copies).
Drivers: :mod:`bus.objects.tcp` (asyncio TCP listener and server links) and
``gateway/websocket/ws.py``
(WebSocket). :mod:`bus.objects.bridge` joins the Object System to the native bus.
"""

from bus.objects.codec import BusinessObject, ObjectDecoder, decode_object, encode_object
from bus.objects.outputs import Close, Deliver
from bus.objects.router import Router
from bus.objects.subscription import ReceiveMode

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
