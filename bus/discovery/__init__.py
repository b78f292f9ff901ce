"""Discovery and naming: services and their directory, schemas, names, topics and the NATS
subjects they map to (PROTOCOL.md sections 6 and 7).
"""
