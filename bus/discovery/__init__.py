"""Discovery and naming: service heartbeats and the directory (PROTOCOL.md 5.10), command schemas
(5.13), group and type names, subscription patterns (5.3) and the NATS subjects the bus maps to
(section 10).
"""
