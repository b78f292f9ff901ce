"""The Object System over WebSocket: ``/ws`` (PROTOCOL.md 6.8), its frames written whole for the
fan-out, and the last value of each bus type (5.15).
"""
