"""The bus-level load: responders, requesters, publishers and subscribers as processes.

``python -m bench.drivers ROLE KIND URL [options]``; KIND is ``bus`` (:mod:`bus.asyncio.client` and
:class:`bus.asyncio.service.Service`, what busgate users run) or ``nats`` (nats-py with orjson,
what a user would write against nats-server). Each driver prints one JSON line of results.

Both sides do the same work with the same data: a requester sends ``{"n": 1, "text": "hello"}``
and reads the answer's payload; a responder reads the arguments and answers them; a publisher
encodes each event from a dict; a subscriber counts what arrives. busgate's requests travel as
binary data frames, the NATS side's as JSON (orjson) of the same fields.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any, Final

import nats
import nats.js.errors
import orjson
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bus.asyncio.client import connect
from bus.asyncio.loop import run
from bus.asyncio.nats import settle
from bus.asyncio.service import Request, Service

GROUP: Final = "bench"
TYPE: Final = "bench.tick"
ARGS: Final = {"n": 1, "text": "hello"}


async def _bus_responder(url: str) -> None:
    client = await connect(url, queue_size=1_000_000)
    service = Service(client, GROUP, concurrency=1024)

    @service.command("echo")
    async def echo(req: Request) -> dict[str, Any]:
        return req.args

    await service.start()
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.Event().wait()


async def _nats_responder(url: str) -> None:
    connection = await nats.connect(url, pending_size=256 * 1024 * 1024)

    async def answer(msg: Msg) -> None:
        args = orjson.loads(msg.data)
        await msg.respond(orjson.dumps(args))

    await connection.subscribe(GROUP, queue=GROUP, cb=answer)
    await settle(connection)
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.Event().wait()


class _Count:
    calls = 0  # every call made, warm-up included (for CPU per call)


async def _timed(step: Any, per_step: int, seconds: float) -> float:
    await step()  # warm up
    _Count.calls += per_step
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        await step()
        done += per_step
    _Count.calls += done
    return done / (time.perf_counter() - started)


async def _requester(kind: str, url: str, seconds: float, in_flight: int) -> dict[str, float]:
    if kind == "bus":
        client = await connect(url, queue_size=1_000_000)

        async def call() -> None:
            ack = await client.request(GROUP, "echo", ARGS, timeout=10)
            ack.payload_data()

        closer = client.close
    else:
        connection = await nats.connect(url, pending_size=256 * 1024 * 1024)

        async def call() -> None:
            reply = await connection.request(
                GROUP, orjson.dumps({"CMD": "echo", **ARGS}), timeout=10
            )
            orjson.loads(reply.data)

        closer = connection.close

    async def sequential() -> None:
        for _ in range(50):
            await call()

    async def parallel() -> None:
        await asyncio.gather(*(call() for _ in range(in_flight)))

    result = {
        "sequential": await _timed(sequential, 50, seconds),
        "parallel": await _timed(parallel, in_flight, seconds),
    }
    result["calls"] = _Count.calls
    await closer()
    return result


async def _subscriber(kind: str, url: str, count: int) -> dict[str, float]:
    """Receive ``count`` events; the rate from the first to the last."""
    received = 0
    first = last = last_at = 0.0
    done = asyncio.Event()
    if kind == "bus":
        client = await connect(url, queue_size=count + 10)
        subscription = await client.subscribe("bench.*")
        print(json.dumps({"ready": True}), flush=True)
        async for _ in subscription:
            received += 1
            if received == 1:
                first = time.perf_counter()
            if received == count:
                break
        last = time.perf_counter()
        last_at = time.monotonic()
        dropped = subscription.dropped
        await client.close()
    else:
        connection = await nats.connect(url, pending_size=256 * 1024 * 1024)

        async def tick(_: Msg) -> None:
            nonlocal received, first, last, last_at
            received += 1
            if received == 1:
                first = time.perf_counter()
            if received == count:
                last = time.perf_counter()
                last_at = time.monotonic()
                done.set()

        await connection.subscribe("bench.*", cb=tick)
        await settle(connection)
        print(json.dumps({"ready": True}), flush=True)
        await done.wait()
        dropped = 0
        await connection.close()
    # last_at: CLOCK_MONOTONIC, which every process on the machine shares (the end-to-end rate).
    return {
        "received": received,
        "rate": (count - 1) / max(last - first, 1e-9),
        "dropped": dropped,
        "last_at": last_at,
    }


async def _durable(kind: str, url: str, count: int, start: bool) -> dict[str, float]:
    """Receive ``count`` events on a durable subscription: live ones (published after it
    subscribed) or, with ``start``, the journaled ones from the beginning (a catch-up).

    busgate: ``subscribe(resume=True)`` or ``since=0`` on a journaling broker (5.14); nats: a
    durable JetStream push consumer of the ``BENCH`` stream (created here if missing), no acks
    (``AckPolicy.NONE``, as busgate's client keeps its own position and as busgate's NATS
    transport follows a stream), ``DeliverPolicy.NEW`` or ``ALL``.
    """
    received = 0
    last_at = 0.0
    done = asyncio.Event()
    if kind == "bus":
        client = await connect(url, queue_size=count + 10)
        subscribed_at, cpu_at = time.monotonic(), time.process_time()
        if start:
            subscription = await client.subscribe("bench.*", since=0)
        else:
            subscription = await client.subscribe("bench.*", resume=True)
        print(json.dumps({"ready": True}), flush=True)
        async for _ in subscription:
            received += 1
            if received == count:
                break
        last_at = time.monotonic()
        cpu = time.process_time() - cpu_at
        dropped = subscription.dropped
        await client.close()
    else:
        connection = await nats.connect(url, pending_size=256 * 1024 * 1024)
        stream = connection.jetstream()
        await stream.add_stream(name="BENCH", subjects=["bench.*"])

        async def tick(_: Msg) -> None:
            nonlocal received, last_at
            received += 1
            if received == count:
                last_at = time.monotonic()
                done.set()

        policy = DeliverPolicy.ALL if start else DeliverPolicy.NEW
        subscribed_at, cpu_at = time.monotonic(), time.process_time()
        await stream.subscribe(
            "bench.*", cb=tick, durable="replay" if start else "live", manual_ack=True,
            config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=policy),
            pending_msgs_limit=count + 10, pending_bytes_limit=256 * 1024 * 1024,
        )  # fmt: skip
        await settle(connection)
        print(json.dumps({"ready": True}), flush=True)
        await done.wait()
        cpu = time.process_time() - cpu_at
        dropped = 0
        await connection.close()
    return {
        "received": received,
        "dropped": dropped,
        "subscribed_at": subscribed_at,  # CLOCK_MONOTONIC, shared by the bench's processes
        "last_at": last_at,
        "cpu": cpu,  # this process's, from subscribing to the last event
    }


async def _publisher(kind: str, url: str, count: int) -> dict[str, float]:
    started_at = time.monotonic()  # shared with the subscriber's process (the end-to-end rate)
    started = time.perf_counter()
    if kind == "bus":
        client = await connect(url)
        for n in range(count):
            await client.publish(TYPE, {"n": n, "text": "hello"})
        await client.close()
    else:
        connection = await nats.connect(url)
        for n in range(count):
            await connection.publish(TYPE, orjson.dumps({"n": n, "text": "hello"}))
        await connection.flush()
        await connection.close()
    return {"rate": count / (time.perf_counter() - started), "started_at": started_at}


async def _confirmer(
    kind: str,
    url: str,
    seconds: float,
    in_flight: int,
    replicas: int = 1,
    phases: tuple[str, ...] = ("sequential", "parallel", "plain"),
) -> dict[str, float]:
    """Confirmed publishes, one at a time and ``in_flight`` at once, and plain ones for
    reference (busgate: publish(confirm=True) and publish + flush; nats: JetStream's publish,
    which waits for the stream's ack, and core publish + flush, on a stream of ``replicas``
    made afresh; busgate's replicas are its URL's). ``phases`` picks which of the three run;
    ``calls`` counts every confirm and publish made, warm-ups included, and ``cpu`` is the
    process's CPU seconds over them (for CPU per call)."""
    if kind == "bus":
        client = await connect(url, queue_size=1_000_000)

        async def confirmed() -> None:
            await client.publish(TYPE, ARGS, confirm=True, timeout=30)

        async def plain() -> None:
            for _ in range(100):
                await client.publish(TYPE, ARGS)
            await client.flush(timeout=30)

        closer = client.close
    else:
        connection = await nats.connect(url.split(","))
        stream = connection.jetstream()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await stream.delete_stream("BENCH")
        await stream.add_stream(name="BENCH", subjects=["bench.>"], num_replicas=replicas)
        data = orjson.dumps(ARGS)

        async def confirmed() -> None:
            await stream.publish(TYPE, data, timeout=30)

        async def plain() -> None:
            for _ in range(100):
                await connection.publish(TYPE, data)
            await connection.flush(timeout=30)

        closer = connection.close

    async def one() -> None:
        await confirmed()

    async def many() -> None:
        await asyncio.gather(*(confirmed() for _ in range(in_flight)))

    steps = {"sequential": (one, 1), "parallel": (many, in_flight), "plain": (plain, 100)}
    result: dict[str, float] = {}
    cpu = time.process_time()
    for phase in phases:
        step, per_step = steps[phase]
        result[phase] = await _timed(step, per_step, seconds)
    result["cpu"] = time.process_time() - cpu  # the phases', without start-up and connect
    result["calls"] = _Count.calls
    await closer()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drivers")
    parser.add_argument(
        "role",
        choices=("responder", "requester", "subscriber", "durable", "publisher", "confirmer"),
    )
    parser.add_argument("kind", choices=("bus", "nats"))
    parser.add_argument("url")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--from-start", action="store_true", help="durable: the journaled events")
    parser.add_argument("--replicas", type=int, default=1, help="confirmer, nats: the stream's")
    parser.add_argument(
        "--phases", default="sequential,parallel,plain", help="confirmer: which to run"
    )
    args = parser.parse_args(argv)
    if args.role == "responder":
        run(_bus_responder(args.url) if args.kind == "bus" else _nats_responder(args.url))
        return 0
    if args.role == "requester":
        result = run(_requester(args.kind, args.url, args.seconds, args.in_flight))
    elif args.role == "confirmer":
        phases = tuple(args.phases.split(","))
        result = run(
            _confirmer(args.kind, args.url, args.seconds, args.in_flight, args.replicas, phases)
        )
    elif args.role == "subscriber":
        result = run(_subscriber(args.kind, args.url, args.count))
    elif args.role == "durable":
        result = run(_durable(args.kind, args.url, args.count, args.from_start))
    else:
        result = run(_publisher(args.kind, args.url, args.count))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
