"""Seed 000's data frame: typed scalars and fields, the binary codec (pure Python, with the switch
to its C accelerator) and the data frame's JSON forms (PROTOCOL.md section 1, JSON in 1.7).

The bottom layer: it imports nothing of busgate but the error tree, ``bus.accelerators`` and its
C accelerator.
"""

from typing import TYPE_CHECKING

from bus.moved import moved_attribute

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """What the module ``bus.frame`` held before it became this package
        (``bus.frame.DataFrame`` is ``bus.frame.frame.DataFrame``), with a DeprecationWarning."""
        return moved_attribute(__name__, name)
