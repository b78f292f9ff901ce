"""Seed 000's data frame: typed scalars and fields, the binary codec (pure Python with its C
accelerator's switch), and the data frame's JSON forms (PROTOCOL.md sections 1 and 2).

The layer everything else is built on: it imports nothing of busgate but the error tree.
"""
