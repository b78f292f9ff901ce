"""Typed service APIs: ``POST /v1/{group}/{cmd}`` and the live OpenAPI paths of every service.

A service's heartbeats carry its commands and their schemas (:mod:`bus.discovery.schemas`); the
gateway's
directory keeps them. From them the gateway serves

- ``POST /v1/{group}/{cmd}``: the body is the arguments alone (an object; empty means ``{}``),
  CMD comes from the URL. Before anything reaches the bus the arguments are checked against the
  command's ``args`` schema (400 naming the field), and a command none of the group's live
  instances declares is a 404. Otherwise it is ``POST /v1/request/{group}`` (same answers,
  streaming, timeouts, auth);
- ``/openapi.json``: the static document plus one path per live command (``/v1/demo/echo``),
  its request body and answer the declared schemas, so the explorer at ``/docs`` offers them.

A group named like one of the gateway's own routes (``request``, ``publish``, ``admin``, ...)
is not reachable here (those routes win); ``POST /v1/request/{group}`` reaches every group.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

import orjson
from starlette.routing import Match, Route
from starlette.types import Scope

from bus.discovery.schemas import CommandSchema, check_args
from bus.discovery.services import ServiceInfo
from bus.errors import DecodeError, UnknownCommandError
from gateway.routes.payload import UTF8_BOM, parse_body

__all__ = ["TypedRoute", "live_paths", "typed_body"]

#: The entry of a heartbeat's ``Commands`` that means every command (``busgate reply``).
_WILDCARD: Final = "*"


class TypedRoute(Route):
    """``POST /v1/{group}/{cmd}``, matching no group that names one of the gateway's own
    routes (``reserved``: the first segments of the other ``/v1/`` paths)."""

    def __init__(self, path: str, endpoint: Any, reserved: Collection[str]) -> None:
        super().__init__(path, endpoint, methods=["POST"])
        self.reserved = frozenset(reserved)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE and child["path_params"].get("group") in self.reserved:
            return Match.NONE, {}
        return match, child


def typed_body(directory: Any, group: str, cmd: str, body: bytes) -> bytes:
    """The body to send for ``POST /v1/{group}/{cmd}``: the arguments checked, CMD first.

    Args:
        directory: the gateway's :class:`bus.asyncio.directory.ServiceDirectory` (None: not
            known yet; then nothing is checked here, the service checks).
        group, cmd: from the URL.
        body: the arguments as received (an object, or nothing).

    Raises:
        DecodeError: not a JSON object, or a ``CMD`` in it that is not the URL's.
        SchemaError: the arguments do not match the command's ``args`` schema.
        UnknownCommandError: the group's live instances declare commands, and not this one.
    """
    if not body.strip():
        body = b"{}"
    args = _arguments(body)
    named = args.pop("CMD", None)
    if named is not None and named != cmd:
        raise DecodeError(f"the body names CMD {named!r}, the URL {cmd!r}: leave CMD out of it")
    if directory is not None:
        _check_known(directory, group, cmd)
        schema = directory.command_schema(group, cmd)
        if schema is not None and schema.args is not None:
            check_args(schema.validator, args)
    if named is not None:
        return body
    return _with_cmd(body, cmd)


def _arguments(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, read once (orjson); what orjson refuses, or what is not an
    object, gets :func:`gateway.routes.payload.parse_body`'s precise error (the bad byte's offset).
    The request is still made through the JSON lane or ``parse_body``, which refuse what the
    bus cannot carry."""
    try:
        value = orjson.loads(body[len(UTF8_BOM) :] if body.startswith(UTF8_BOM) else body)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return value
    parse_body(body, need_cmd=False)  # raises DecodeError, saying where and why
    raise DecodeError("the body must be a JSON object")  # pragma: no cover - parse_body raised


def _check_known(directory: Any, group: str, cmd: str) -> None:
    declared = {name for info in directory.instances(group) for name in info.heartbeat.commands}
    if declared and _WILDCARD not in declared and cmd not in declared:
        known = ", ".join(sorted(declared))
        raise UnknownCommandError(f"group {group!r} has no command {cmd!r}; its commands: {known}")


def _with_cmd(body: bytes, cmd: str) -> bytes:
    """``{"CMD": cmd, ...the body's members}``, so the JSON lane can send it as it is."""
    text = body[len(UTF8_BOM) :] if body.startswith(UTF8_BOM) else body
    inner = text.lstrip()[1:]  # _arguments proved it an object: "{" comes first
    head = b'{"CMD":' + orjson.dumps(cmd)
    return head + (b"}" if inner.lstrip().startswith(b"}") else b"," + inner)


def live_paths(services: Iterable[ServiceInfo], reserved: Collection[str]) -> dict[str, Any]:
    """One OpenAPI path per live command, ``/v1/{group}/{cmd}``, from the directory's services.

    A command without schemas still gets its path (any object in, any payload out).
    """
    paths: dict[str, Any] = {}
    for service in services:
        if service.group in reserved:
            continue
        for cmd in service.commands:
            if cmd == _WILDCARD or "/" in cmd:
                continue
            schema = service.schemas.get(cmd, CommandSchema())
            paths[f"/v1/{service.group}/{cmd}"] = {"post": _operation(service.group, cmd, schema)}
    return paths


def _operation(group: str, cmd: str, schema: CommandSchema) -> dict[str, Any]:
    args = copy.deepcopy(dict(schema.args)) if schema.args is not None else {"type": "object"}
    answer = copy.deepcopy(dict(schema.answer)) if schema.answer is not None else {}
    summary = schema.summary or f"{cmd} on the {group} service"
    return {
        "operationId": f"{group}.{cmd}",
        "tags": [group],
        "summary": summary,
        "description": (
            f"`CMD={cmd}` to group `{group}`, from its live instances' heartbeats. The body is "
            "the arguments; they are checked against the schema before they reach the bus."
        ),
        "parameters": [
            {"$ref": "#/components/parameters/Timeout"},
            {"$ref": "#/components/parameters/TimeoutHeader"},
            {"$ref": "#/components/parameters/IdempotencyKey"},
        ],
        "requestBody": {"required": False, "content": {"application/json": {"schema": args}}},
        "responses": _responses(answer),
    }


def _responses(answer: Mapping[str, Any]) -> dict[str, Any]:
    ok = {
        "type": "object",
        "required": ["header", "payload"],
        "properties": {"header": {"$ref": "#/components/schemas/Header"}, "payload": answer},
    }
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {
        "200": {"description": "The ACK.", "content": {"application/json": {"schema": ok}}},
        "400": {"$ref": "#/components/responses/BadRequest"},
        "401": {"$ref": "#/components/responses/Unauthorized"},
        "403": {"$ref": "#/components/responses/Forbidden"},
        "404": {"description": "No live instance declares this command.", **error},
        "409": {"$ref": "#/components/responses/Conflict"},
        "413": {"$ref": "#/components/responses/TooLarge"},
        "429": {"$ref": "#/components/responses/RateLimited"},
        "500": {"description": "A NAK with RCD 500 (the service failed).", **error},
        "502": {"description": "A NAK whose RCD is not an HTTP error status.", **error},
        "503": {"$ref": "#/components/responses/Unavailable"},
        "504": {"$ref": "#/components/responses/Timeout"},
    }
