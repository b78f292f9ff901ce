"""docs/PROTOCOL.md section 9: every HTTP example runs against the real gateway and matches.

In an expected response, the string ``"*"`` stands for any value (ids, inbox names).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.docexamples import Example, examples
from tests.gateway.conftest import Stack

EXAMPLES = examples("gateway")


def matches(expected: Any, actual: Any) -> bool:
    """Equality where ``"*"`` in ``expected`` matches anything."""
    if expected == "*":
        return True
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(matches(expected[k], actual[k]) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual)


def test_section_9_has_examples() -> None:
    assert {e.id for e in EXAMPLES} >= {"echo", "nak", "no-responders", "timeout", "ndjson"}


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
async def test_example(http: httpx.AsyncClient, example: Example) -> None:
    method, target = example.body["request"].split()
    headers = {"Accept": example.body.get("accept", "application/json")}
    response = await http.request(
        method, target, content=example.body["body"].encode(), headers=headers
    )
    assert response.status_code == int(example.body["status"]), response.text
    if example.body.get("accept") == "application/x-ndjson":
        expected = [json.loads(line) for line in example.body["response"].splitlines()]
        actual = [json.loads(line) for line in response.text.splitlines() if line]
    else:
        expected = json.loads(example.body["response"])
        actual = response.json()
    assert matches(expected, actual), json.dumps(actual)
