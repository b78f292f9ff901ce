"""Seed 000's Kestrel message: its header fields, the routing header read without decoding, the
binary and JSON lanes, message ids and trace context (PROTOCOL.md section 2, SRC/CLR/TRC in 5.11).
Built on ``bus.frame``.
"""
