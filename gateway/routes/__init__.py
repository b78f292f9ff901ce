"""The HTTP API (PROTOCOL.md section 9): one ``routes_*`` module per family of endpoints, the
typed service routes (``typed``, 9.9), the served report and JavaScript client (``reports``,
``sdk``, 9.15), ``Idempotency-Key`` (``idempotency``, 9.12), and what every route shares:
request bodies (``payload``), ``Accept`` (``negotiate``) and error statuses (``errors``, 9.3).
``gateway.app`` puts them in one list.
"""
