"""MOP post offices on the bus (seed 001; docs/PROTOCOL.md section 11).

Sans-I/O core: :mod:`bus.mop.codec` (``[[[`` framing, the envelope), :mod:`bus.mop.protocol`
(one link's state machine, the admission and replay rule) and :mod:`bus.mop.follow` (the
subscriptions the listener asks of post offices so their publications reach the bus). Drivers:
:mod:`bus.mop.bridge` (a post office's messages to and from the bus) and
:mod:`bus.mop.listener` (the asyncio TCP listener, :func:`~bus.mop.listener.start_mop`). The
MOP primitives (Base64, ids, authenticator) are in :mod:`bus.link.auth`.
"""

from bus.mop.codec import MopDeframer, MopMessage, decode_message, encode_frame
from bus.mop.protocol import Admission, MopConnection

__all__ = [
    "Admission",
    "MopConnection",
    "MopDeframer",
    "MopMessage",
    "decode_message",
    "encode_frame",
]
