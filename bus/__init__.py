"""busgate's bus: the data-frame codec, the wire framing, the broker, the client and services."""
