"""The Kestrel message: its header, fields and binary lanes, its JSON wire form, ids and trace
context (PROTOCOL.md section 3). Built on ``bus.frame``.
"""
