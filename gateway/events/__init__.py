"""Bus events on their way to the web, kept apart from any one route: the shared Server-Sent Events
hub with ``Last-Event-ID`` replay (PROTOCOL.md 9.5), one timer wheel for every idle
connection's keepalive (9.5, 6.8), presence across gateways (5.16, 9.11) and push
subscriptions that POST events to an HTTP endpoint (9.14).
"""
