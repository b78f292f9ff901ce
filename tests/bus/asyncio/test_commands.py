"""A service's table of commands (bus/asyncio/commands.py): what it checks before a handler runs."""

from __future__ import annotations

from typing import Any

import pytest

from bus.asyncio.commands import Commands
from bus.asyncio.handler import Request, ServiceError
from bus.message.message import Message


class _Table(Commands):
    def __init__(self) -> None:
        self.group = "g"
        self._handlers, self._allowed, self._schemas, self._validators = {}, {}, {}, {}
        self._plain = {}


async def _handler(req: Request) -> dict[str, Any]:
    return req.args


def _check(schema: dict[str, Any], args: dict[str, Any]) -> None:
    table = _Table()
    table.add_command("c", _handler, args=schema)
    table._check(Request(Message.request("g", "c", args), "g"), "c")


@pytest.mark.parametrize(
    "schema",
    [{"type": "object"}, {"type": "object", "title": "anything", "description": "at all"}],
)
def test_a_schema_that_takes_every_object_takes_any_arguments(schema: dict[str, Any]) -> None:
    for args in ({}, {"x": 1}, {"nested": {"a": [1, "b"]}}):
        _check(schema, args)


@pytest.mark.parametrize(
    ("schema", "args"),
    [
        ({"type": "object", "minProperties": 1}, {}),
        ({"type": "object", "required": ["x"]}, {"y": 1}),
        ({"type": "object", "properties": {"x": {"type": "string"}}}, {"x": 1}),
        ({"type": "object", "additionalProperties": False}, {"x": 1}),
        ({"type": "object", "not": {"required": ["x"]}}, {"x": 1}),
    ],
)
def test_an_object_schema_with_any_constraint_still_refuses_what_breaks_it(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    with pytest.raises(ServiceError) as info:
        _check(schema, args)
    assert info.value.rcd == 400
