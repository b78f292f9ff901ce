"""``busgate reply``: answer a group's requests from a shell to mock a service, as ``nats reply``.

::

    busgate reply orders '{"ok": true}'            # a fixed answer to every request
    busgate reply orders --command create ok=true  # only CMD=create; others get NAK 404
    busgate reply orders --echo                    # the request's own arguments back
    busgate reply orders -- jq '{total: (.qty * .price)}'   # a program answers each request

A program gets each request's payload as one JSON object on its standard input (``CMD``
included) and ``BUSGATE_GROUP``, ``BUSGATE_CMD``, ``BUSGATE_MID`` in its environment. What it
prints is the answer: a JSON object becomes the ACK's payload, other text ``{"output": TEXT}``.
A program that exits with a status other than 0 is a NAK: RCD 500, its last line of standard
error as the message (a status of 4xx or 5xx modulo 256 is not special: exit 1 is RCD 500).
A program that runs longer than ``--program-timeout`` is killed and answered with NAK 504.

The responder sends heartbeats on ``OAM.SERVICE`` like any service (so it shows in ``busgate
services``, ``GET /v1/services`` and the console) and answers ``OAM.PROBE``. It prints one line
per request on standard error; Ctrl-C stops it with a ``Terminating`` heartbeat.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bus.cli.command import stop_event, sync
from bus.cli.connect import connect_waiting, connection_args
from bus.cli.payloads import read_payload
from bus.errors import BusError, ConfigError
from bus.masking import mask_url

if TYPE_CHECKING:  # pragma: no cover
    from bus.asyncio.client import Client
    from bus.message.message import Message

__all__ = ["Answer", "Responder", "register"]

RCD_UNKNOWN_COMMAND = 404
RCD_FAILED = 500
RCD_TIMEOUT = 504
MAX_OUTPUT = 1024 * 1024


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``busgate reply`` to the parser."""
    parser = subparsers.add_parser(
        "reply",
        help="answer a group's requests from the shell (a fixed answer, --echo or a program)",
        description="Consume GROUP and answer its requests: with the payload given (key=value, "
        "JSON or - for stdin), with the request's own arguments (--echo), or with what PROGRAM "
        "prints after --, run once per request with the request's JSON on its stdin.",
    )
    parser.add_argument("group")
    parser.add_argument("answer", nargs="*", metavar="key=value|JSON|-")
    parser.add_argument(
        "--command",
        dest="commands",
        action="append",
        default=[],
        metavar="CMD",
        help="answer only this CMD (repeatable); other commands get NAK 404 (default: all)",
    )
    parser.add_argument("--echo", action="store_true", help="answer with the request's arguments")
    parser.add_argument(
        "--program-timeout",
        type=float,
        default=30.0,
        help="seconds a program may run per request (default 30)",
    )
    parser.add_argument("--count", type=int, default=0, help="stop after N requests (0: never)")
    parser.add_argument(
        "--heartbeat", type=float, default=5.0, help="seconds between heartbeats (default 5)"
    )
    connection_args(parser)
    # bus.cli.main gives what follows `--` as args.program (PROGRAM_COMMANDS).
    parser.set_defaults(func=sync(_serve), program=[], rest="answer")


@dataclass
class Answer:
    """How a request is answered: a fixed payload, its own arguments, or a program's output."""

    payload: dict[str, Any] = field(default_factory=dict)
    echo: bool = False
    program: Sequence[str] = ()
    program_timeout: float = 30.0


class Responder:
    """Consumes one group and answers each request as :class:`Answer` says, with heartbeats.

    Args:
        client: a connected bus client.
        group: the group to consume.
        answer: how to answer.
        commands: the CMDs answered (empty: all).
        heartbeat_interval: seconds between heartbeats.
    """

    def __init__(
        self,
        client: Client,
        group: str,
        answer: Answer,
        *,
        commands: Sequence[str] = (),
        heartbeat_interval: float = 5.0,
    ) -> None:
        self.client = client
        self.group = group
        self.answer = answer
        self.commands = tuple(commands)
        self.heartbeat_interval = heartbeat_interval
        self.instance_id = str(uuid.uuid4())
        self.handled = 0
        self.failed = 0
        self.in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event, count: int = 0) -> None:
        """Answer requests until ``stop`` is set (or ``count`` were answered)."""
        from bus.discovery.services import PROBE_TYPE, HeartbeatEvent

        consumer = await self.client.consume(self.group)
        probes = await self.client.subscribe(PROBE_TYPE)
        await self._beat()
        beats = asyncio.create_task(self._beat_loop(probes))
        stopper = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                nxt = asyncio.ensure_future(consumer.__anext__())
                await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await nxt
                    break
                try:
                    message = nxt.result()
                except StopAsyncIteration:
                    break
                task = asyncio.create_task(self._handle(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                if count and self.handled + self.failed + len(self._tasks) >= count:
                    break
        finally:
            stopper.cancel()
            with contextlib.suppress(BusError):
                await consumer.unsubscribe()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=self.answer.program_timeout + 5)
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
            with contextlib.suppress(BusError):
                await self._beat(HeartbeatEvent.TERMINATING)

    async def _handle(self, message: Message) -> None:
        cmd = message.cmd or ""
        self.in_flight += 1
        started = time.monotonic()
        try:
            if self.commands and cmd not in self.commands:
                known = ", ".join(self.commands)
                reply = message.nak(
                    f"unknown command {cmd!r} for {self.group}; known commands: {known}",
                    RCD_UNKNOWN_COMMAND,
                )
            else:
                try:
                    reply = await self._reply(message)
                except Exception as exc:  # noqa: BLE001 - the caller hears of it, not a task log
                    reply = message.nak(f"busgate reply failed: {exc!r}"[:1000], RCD_FAILED)
            if reply.typ == "NAK":
                self.failed += 1
            else:
                self.handled += 1
            took = (time.monotonic() - started) * 1000
            what = f"NAK {reply.rcd}: {reply.msg}" if reply.typ == "NAK" else "ACK"
            print(f"[#{self.handled + self.failed}] {self.group} {cmd}: {what} ({took:.0f} ms)",
                  file=sys.stderr, flush=True)  # fmt: skip
            if message.rpy:
                await self.client.send(reply)
        except BusError as exc:
            print(f"busgate reply: answer not sent: {exc}", file=sys.stderr, flush=True)
        finally:
            self.in_flight -= 1

    async def _reply(self, message: Message) -> Message:
        arguments = message.payload.to_dict() if message.payload is not None else {}
        if self.answer.program:
            return await self._run_program(message, arguments)
        if self.answer.echo:
            arguments.pop("CMD", None)
            return message.ack(arguments)
        return message.ack(self.answer.payload)

    async def _run_program(self, message: Message, arguments: dict[str, Any]) -> Message:
        env = {
            **os.environ,
            "BUSGATE_GROUP": self.group,
            "BUSGATE_CMD": message.cmd or "",
            "BUSGATE_MID": message.mid or "",
        }
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.answer.program,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            return message.nak(f"cannot run {self.answer.program[0]}: {exc.strerror}", RCD_FAILED)
        data = json.dumps(arguments, default=str).encode()
        try:
            async with asyncio.timeout(self.answer.program_timeout):
                out, err = await _converse(proc, data)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return message.nak(
                f"{self.answer.program[0]} ran longer than {self.answer.program_timeout:g} s",
                RCD_TIMEOUT,
            )
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            why = lines[-1] if lines else f"exit status {proc.returncode}"
            return message.nak(why[:1000], RCD_FAILED)
        return message.ack(_output_payload(out[:MAX_OUTPUT].decode("utf-8", "replace")))

    async def _beat_loop(self, probes: Any) -> None:
        next_beat = time.monotonic() + self.heartbeat_interval
        while True:
            wait = max(0.0, next_beat - time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await probes.__anext__()  # a directory asked: beat now
            with contextlib.suppress(BusError):
                await self._beat()
            next_beat = time.monotonic() + self.heartbeat_interval

    async def _beat(self, event: Any = None) -> None:
        from bus.discovery.services import (
            HEARTBEAT_TYPE,
            Heartbeat,
            HeartbeatEvent,
            Load,
            ServiceStatus,
            heartbeat_payload,
        )
        from bus.message.message import Message, MessageType

        event = event or HeartbeatEvent.HEARTBEAT
        status = (
            ServiceStatus.TERMINATING
            if event is HeartbeatEvent.TERMINATING
            else ServiceStatus.RUNNING
        )
        beat = Heartbeat(
            instance_id=self.instance_id,
            group=self.group,
            event=event,
            status=status,
            load=Load(self.in_flight, 0, self.handled, self.failed),
            interval=self.heartbeat_interval,
            commands=self.commands or ("*",),
            host=f"{socket.gethostname()}:{os.getpid()}",
        )
        message = Message.event(HEARTBEAT_TYPE, heartbeat_payload(beat))
        message.frame["TYP"] = MessageType.HBT.value
        await self.client.send(message)


async def _converse(proc: asyncio.subprocess.Process, data: bytes) -> tuple[bytes, bytes]:
    """``proc.communicate(data)``, except that a program that exits without reading all its
    input is not an error (``echo tick``): uvloop raises RuntimeError on the closed pipe where
    asyncio's own loop raises BrokenPipeError, and communicate() lets the former through."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    async def feed() -> None:
        try:
            stdin.write(data)
            await stdin.drain()
        except (OSError, RuntimeError):
            pass  # the program closed its input or exited: its output still answers
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()

    _, out, err = await asyncio.gather(feed(), proc.stdout.read(), proc.stderr.read())
    await proc.wait()
    return out, err


def _output_payload(text: str) -> dict[str, Any]:
    """A program's output as a payload: its JSON object, or ``{"output": text}``."""
    stripped = text.strip()
    if stripped.startswith("{"):
        with contextlib.suppress(ValueError):
            value = json.loads(stripped)
            if isinstance(value, dict):
                return value
    return {"output": text.rstrip("\n")}


async def _serve(args: argparse.Namespace) -> int:
    from bus.discovery.names import check_group

    check_group(args.group)
    if args.heartbeat <= 0 or args.program_timeout <= 0:
        raise ConfigError("--heartbeat and --program-timeout must be more than 0 seconds")
    chosen = sum(bool(x) for x in (args.answer, args.echo, args.program))
    if chosen > 1:
        raise ConfigError("give one answer: a payload, --echo, or -- PROGRAM")
    answer = Answer(
        payload=read_payload(args.answer),
        echo=args.echo,
        program=tuple(args.program),
        program_timeout=args.program_timeout,
    )
    client = await connect_waiting(args, 0.0)
    stop = stop_event()
    responder = Responder(
        client, args.group, answer, commands=args.commands, heartbeat_interval=args.heartbeat
    )
    what = (
        f"running {' '.join(args.program)}"
        if args.program
        else "echoing"
        if args.echo
        else f"answering {json.dumps(answer.payload)}"
    )
    only = f" (CMD {', '.join(args.commands)} only)" if args.commands else ""
    where = mask_url(args.bus)
    print(f"busgate reply: group {args.group!r} on {where}{only}, {what}; Ctrl-C stops",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        await responder.run(stop, args.count)
    finally:
        await client.close()
    return 0
