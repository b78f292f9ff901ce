"""Seed 000's data frame: typed scalars and fields, the binary codec (pure Python, with the switch
to its C accelerator) and the data frame's JSON forms (PROTOCOL.md section 1, JSON in 1.7).

The bottom layer: it imports nothing of busgate but the error tree, ``bus.accelerators`` and its
C accelerator.
"""
