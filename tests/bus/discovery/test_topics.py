"""Subscription patterns outside the broker (``bus/discovery/topics.py``): a client checks and
matches
them without importing ``bus.broker``, whose import a user would notice at every start.

The matching rule itself is tested with the routing tables (``test_broker_routing.py``).
"""

from __future__ import annotations

import subprocess
import sys

from bus.broker import routing
from bus.discovery import topics


def broker_modules_after(statement: str) -> list[str]:
    """The ``bus.broker`` modules a fresh interpreter holds after running ``statement``."""
    code = (
        f"import sys; {statement}; "
        "print(' '.join(m for m in sys.modules if m.split('.')[:2] == ['bus', 'broker']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.split()


def test_the_broker_routing_tables_use_the_same_rule() -> None:
    assert routing.matches is topics.matches
    assert routing.check_pattern is topics.check_pattern
    assert (routing.INBOX_PREFIX, routing.MAX_NAME) == (topics.INBOX_PREFIX, topics.MAX_NAME)


def test_importing_the_patterns_leaves_out_the_broker() -> None:
    assert broker_modules_after("import bus.discovery.topics, bus.discovery.nats_subjects") == []


def test_importing_the_client_leaves_out_the_broker() -> None:
    assert broker_modules_after("import bus.asyncio.client") == []
