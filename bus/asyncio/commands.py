"""A service's table of commands: the part of :class:`bus.asyncio.service.Service` that
registers a handler per ``CMD`` with what it declares (who may call it, the JSON Schemas of its
arguments and answer, :mod:`bus.discovery.schemas`) and checks a request against that before its
handler
runs. No I/O here: the service runs the handlers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from bus.asyncio.handler import (
    RCD_BAD_REQUEST,
    RCD_FORBIDDEN,
    Handler,
    Request,
    ServiceError,
    declared_answer,
)
from bus.discovery.schemas import CommandSchema, check_args, command_schema, encode_schemas
from bus.errors import ConfigError, SchemaError

__all__ = ["Commands"]

H = TypeVar("H", bound=Callable[..., Any])

#: Keywords that only describe (JSON Schema's annotations): they accept every instance.
_ANNOTATIONS: Final = frozenset({"title", "description", "$comment", "examples", "default"})


def _any_object(schema: Mapping[str, Any]) -> bool:
    """True when ``schema`` accepts every object (``{"type": "object"}``, annotations aside):
    a request's arguments are always one (:attr:`Request.args`), so there is nothing to check
    per request (the echo of the demo service declares such a schema)."""
    return schema.get("type") == "object" and all(
        key == "type" or key in _ANNOTATIONS for key in schema
    )


class Commands:
    """The commands of a service (a mixin of :class:`bus.asyncio.service.Service`, which sets
    the tables up empty)."""

    group: str
    _handlers: dict[str, Handler]
    _plain: dict[str, Handler]  # the handlers that are async functions (not streams)
    _allowed: dict[str, frozenset[str]]
    _schemas: dict[str, CommandSchema]
    _validators: dict[str, Any]  # compiled args schemas, by command

    def command(
        self,
        name: str,
        *,
        allow: Iterable[str] | None = None,
        args: Any = None,
        answer: Any = None,
    ) -> Callable[[H], H]:
        """Decorator: register ``func`` as the handler of ``CMD=name``.

        Args:
            name: the command name.
            allow: the callers (:attr:`Request.caller`) that may call it; any other gets a
                NAK, ``RCD`` 403, and the handler does not run (None: every caller).
            args: what it takes: a JSON Schema (a mapping) or a type to derive it from
                (:func:`bus.discovery.schemas.schema_of`); arguments that do not match get a NAK,
                ``RCD`` 400, naming the field (None: not declared, not checked).
            answer: what it answers, the same way (None: the handler's return annotation
                when that is a TypedDict or a dataclass, else not declared).

        Returns:
            A decorator that registers the function and returns it unchanged.
        """

        def register(func: H) -> H:
            self.add_command(name, func, allow=allow, args=args, answer=answer)
            return func

        return register

    def add_command(
        self,
        name: str,
        handler: Handler,
        *,
        allow: Iterable[str] | None = None,
        args: Any = None,
        answer: Any = None,
    ) -> None:
        """Register ``handler`` for ``CMD=name`` (replacing any earlier one).

        Args:
            name: the command name.
            handler: the async function (or async generator) that answers it.
            allow, args, answer: as in :meth:`command`.

        Raises:
            ConfigError: ``name`` is empty, ``handler`` is not an ``async def`` function
                (a plain function would block every other request while it runs), or a
                schema is not valid JSON Schema / a type has none.
        """
        if not name:
            raise ConfigError("a command needs a name")
        if not (inspect.iscoroutinefunction(handler) or inspect.isasyncgenfunction(handler)):
            raise ConfigError(f"the handler of {name!r} must be an async function")
        if isinstance(allow, str):
            raise ConfigError(f"allow of {name!r} must be a list of callers, not one string")
        if answer is None:
            answer = declared_answer(handler)
        schema = command_schema(args, answer, inspect.getdoc(handler) or "")
        schemas = {key: value for key, value in self._schemas.items() if key != name}
        if schema.args is not None or schema.answer is not None or schema.summary:
            schemas[name] = schema
            encode_schemas(schemas)  # they must fit in a heartbeat: refused here, not there
        self._handlers[name] = handler
        if inspect.iscoroutinefunction(handler):
            self._plain[name] = handler
        else:
            self._plain.pop(name, None)
        self._schemas = schemas
        self._validators = {
            key: value.validator
            for key, value in schemas.items()
            if value.args is not None and not _any_object(value.args)
        }
        if allow is None:
            self._allowed.pop(name, None)
        else:
            self._allowed[name] = frozenset(allow)

    @property
    def commands(self) -> tuple[str, ...]:
        """The command names this service answers, sorted."""
        return tuple(sorted(self._handlers))

    @property
    def schemas(self) -> dict[str, CommandSchema]:
        """The declared schemas, by command name (commands without any are left out)."""
        return dict(self._schemas)

    def _check(self, req: Request, cmd: str) -> None:
        """Who may call it and what it takes (ServiceError 403 / 400 otherwise)."""
        allowed = self._allowed.get(cmd)
        if allowed is not None and req.caller not in allowed:
            raise ServiceError(f"caller {req.caller!r} may not call {cmd!r}", RCD_FORBIDDEN)
        validator = self._validators.get(cmd)
        if validator is not None:
            try:
                check_args(validator, req.args)
            except SchemaError as exc:
                raise ServiceError(str(exc), RCD_BAD_REQUEST) from exc

    def _unknown(self, cmd: str) -> str:
        known = ", ".join(self.commands) or "none"
        return f"unknown command {cmd!r} for {self.group}; known commands: {known}"
