"""Seed 000's Kestrel message: its header fields, the routing header read without decoding, the
binary and JSON lanes, message ids and trace context (PROTOCOL.md section 2, SRC/CLR/TRC in 5.11).
Built on ``bus.frame``.
"""

from typing import TYPE_CHECKING

from bus.moved import moved_attribute

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """What the module ``bus.message`` held before it became this package
        (``bus.message.Message`` is ``bus.message.message.Message``), with a DeprecationWarning."""
        return moved_attribute(__name__, name)
