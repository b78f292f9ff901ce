"""The NATS transport (``bus/transport_nats.py``, PROTOCOL.md 10) against a real nats-server.

The client, service and gateway suites also run on NATS (``pytest.mark.transports``); this
module checks what is NATS's own: the subject mapping (both ways, against PROTOCOL.md's table),
one copy per link for overlapping patterns, queue groups, no responders, and a NATS server
killed mid-traffic and started again on the same port.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bus.asyncio.client import Client, Subscription, connect
from bus.demo import create_demo_service
from bus.discovery.nats_subjects import Route, event_subjects, group_subjects, no_responders, route
from bus.errors import (
    AuthError,
    ConfigError,
    ConnectError,
    DisconnectedError,
    NakError,
    NoRespondersError,
    RequestTimeout,
)
from bus.journal import JournalReader
from bus.message.message import Message, decode_message
from tests.conftest import NatsServer, free_tcp_port
from tests.docexamples import examples
from tests.natsrelay import HoldingRelay

WAIT = 10.0
BUSGATE = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
INBOX = "_INBOX.abc"

Connect = Callable[..., Awaitable[Client]]


@pytest.fixture
async def nats_client(nats_server: NatsServer) -> AsyncIterator[Connect]:
    """Factory of clients of the session's nats-server, closed at the end."""
    clients: list[Client] = []

    async def make(name: str | None = None, **kwargs: object) -> Client:
        client = await connect(nats_server.url, name, **kwargs)  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


# --- the mapping (pure) --------------------------------------------------------------------------


def _request(**fields: object) -> Message:
    message = Message.request("demo", "echo", {"x": 1}, reply_to=INBOX)
    for name, value in fields.items():
        message.frame[name] = value
    return message


def test_routes_follow_the_protocol_rules() -> None:
    request = _request()
    replies = f"bus.{INBOX}"
    assert route(request, INBOX) == Route("bus.grp.demo", f"{replies}.r.FRAM.{request.mid}")
    to_all = Message.request("demo", "echo", reply_to=INBOX, to_all=True)
    assert route(to_all, INBOX) == Route("bus.all.demo", f"{replies}.r.FRAM.{to_all.mid}")
    assert route(Message.event("sensor.temp", {}), INBOX) == Route("bus.evt.sensor.temp")
    # a response goes to the inbox, under the bus's prefix
    assert route(request.ack({}), INBOX) == Route(replies)
    assert route(request.ack({}), INBOX, prefix="x") == Route(f"x.{INBOX}")
    mail = _request(TGT="bob.po")
    assert route(mail, INBOX) == Route("bus.po.bob", f"{replies}.m.FRAM.{mail.mid}.bob")
    # someone else's inbox in RPY (a request a leaving consumer sends back): NATS's
    # no-responders comes to us, naming that inbox, and we pass the NAK on to it
    other = _request(RPY="_INBOX.other")
    forwarded = f"{replies}.f.FRAM.{other.mid}.other"
    assert route(other, INBOX) == Route("bus.grp.demo", forwarded)
    # a group in RPY (a Kestrel client's reply group): the NAK is passed on to that group
    to_group = _request(RPY="replies.ours")
    passed_on = f"{replies}.g.FRAM.{to_group.mid}.replies.ours"
    assert route(to_group, INBOX) == Route("bus.grp.demo", passed_on)
    nak = no_responders(passed_on, INBOX, "bus")
    assert (nak.typ, nak.grp, nak.rid, nak.rcd) == ("NAK", "replies.ours", to_group.mid, 503)
    assert route(_request(RPY="no subject"), INBOX) == Route("bus.grp.demo")  # none to tell
    # mail whose RPY is a group: a NAK 404 naming the post office goes to that group
    mail_to_group = _request(TGT="bob.po", RPY="replies.ours")
    told = f"{replies}.n.FRAM.{mail_to_group.mid}.bob.replies.ours"
    assert route(mail_to_group, INBOX) == Route("bus.po.bob", told)
    nak = no_responders(told, INBOX, "bus")
    assert (nak.grp, nak.rid, nak.rcd, nak.msg) == (
        "replies.ours",
        mail_to_group.mid,
        404,
        "no post office 'bob'",
    )
    assert route(Message.event("sensor.temp", {}), INBOX, prefix="x") == Route("x.evt.sensor.temp")


@pytest.mark.parametrize("group", ["bad group", "a..b", "demo."])
def test_names_that_are_no_subjects_are_not_routed(group: str) -> None:
    assert route(Message.request(group, "echo", reply_to=INBOX), INBOX) is None


def test_patterns_and_groups_map_to_subjects() -> None:
    assert event_subjects("sensor") == ("bus.evt.sensor", "bus.evt.sensor.>")
    assert event_subjects("sensor.*") == ("bus.evt.sensor.*",)
    assert event_subjects(">") == ("bus.evt.>",)
    assert group_subjects("demo") == ("bus.grp.demo", "bus.all.demo")


def test_the_subject_table_of_protocol_md() -> None:
    cases = examples("nats")
    assert cases, "PROTOCOL.md section 10 has its examples"
    for case in cases:
        body = case.body
        if "pattern" in body:
            assert " ".join(event_subjects(body["pattern"])) == body["subjects"], case.id
            continue
        kind = body["message"]
        if kind == "event":
            message = Message.event(body["type"], {})
        elif kind == "mail":
            message = _request(TGT=body["tgt"])
        elif kind == "response":
            message = _request().ack({})
        else:  # request, request-all
            message = Message.request(
                body["group"], "echo", reply_to=INBOX, to_all=kind == "request-all"
            )
        where = route(message, INBOX)
        assert where is not None and where.subject == body["subject"], case.id
        expected = body.get("reply", "-").replace("<MID>", message.mid or "")
        assert (where.reply or "-") == expected, case.id


# --- on a real nats-server -----------------------------------------------------------------------


async def test_overlapping_patterns_deliver_one_copy_per_link(nats_client: Connect) -> None:
    listener, publisher = await nats_client(), await nats_client()
    every, sensors, temps = (
        await listener.subscribe(">"),
        await listener.subscribe("sensor"),
        await listener.subscribe("*.temp"),
    )
    await publisher.publish("sensor.temp", {"c": 1})
    await publisher.publish("pump.on", {"c": 2})
    assert (await every.get(WAIT)).grp == "sensor.temp"
    assert (await every.get(WAIT)).grp == "pump.on"
    assert (await sensors.get(WAIT)).grp == "sensor.temp"
    assert (await temps.get(WAIT)).grp == "sensor.temp"
    await asyncio.sleep(0.2)
    assert (every.pending(), sensors.pending(), temps.pending()) == (0, 0, 0)


async def test_queue_groups_share_the_work_and_flag_all_reaches_everyone(
    nats_client: Connect,
) -> None:
    caller = await nats_client()
    workers = [await nats_client(f"w{n}") for n in range(3)]
    seen: Counter[str] = Counter()

    async def work(client: Client) -> None:
        async for request in await client.consume("jobs"):
            seen[client.name] += 1
            await client.send(request.ack({"by": client.name}))

    tasks = [asyncio.create_task(work(worker)) for worker in workers]
    await asyncio.sleep(0.1)
    for n in range(60):
        await caller.request("jobs", "run", {"n": n}, timeout=WAIT)
    assert sum(seen.values()) == 60 and len(seen) == 3  # one worker each, all of them busy
    before = sum(seen.values())
    async for _ in caller.request_stream("jobs", "run", to_all=True, timeout=0.5):
        break  # the first answer; the others arrive too
    await asyncio.sleep(0.3)
    assert sum(seen.values()) == before + 3
    for task in tasks:
        task.cancel()


async def test_a_group_consumed_is_reachable_the_moment_consume_returns(
    nats_client: Connect,
) -> None:
    # nats-py's flush() writes its PING ahead of the SUB still queued for its flusher task:
    # consume() returned while the server had no subscriber yet, and the first request
    # found "no responders" (about one run in ten). Twenty fresh groups, each asked at once.

    async def answer(group: Subscription) -> None:
        received = await group.get(timeout=WAIT)
        await group.client.send(received.ack({"n": received.payload["n"]}))

    for n in range(20):
        service, caller = await nats_client(f"bob{n}"), await nats_client(f"alice{n}")
        answering = asyncio.create_task(answer(await service.consume(f"fresh{n}")))
        assert (await caller.request(f"fresh{n}", "echo", {"n": n}, timeout=WAIT)).payload["n"] == n
        await answering


async def test_no_responders_and_no_post_office(nats_client: Connect) -> None:
    client = await nats_client("alice")
    with pytest.raises(NoRespondersError):
        await client.request("nobody.here", "echo", timeout=WAIT)
    with pytest.raises(NakError) as caught:
        await client.mail("carol.po", {"x": 1}, expect=True, timeout=WAIT)
    assert caught.value.rcd == 404 and "carol" in caught.value.msg
    with pytest.raises(NakError) as refused:
        await client.manage("manage.add", {"name": "dave"})
    assert refused.value.rcd == 404  # no central post office to manage on NATS


async def test_status_on_nats_tells_what_the_connection_knows(
    nats_server: NatsServer, nats_client: Connect
) -> None:
    client = await nats_client("alice")
    await client.subscribe("sensor.*")
    await client.consume("jobs")
    status = await client.status()
    assert status["transport"] == "nats" and status["server"] == nats_server.url
    assert status["version"] and status["maxPayload"] == 1024 * 1024
    assert (status["patterns"], status["groups"]) == (["sensor.*"], ["jobs"])
    assert "monitoring port" in status["note"]
    # `busgate status` prints it, exit 0, as it prints the broker's status
    done = await asyncio.to_thread(
        subprocess.run,
        [*BUSGATE, "status", "--bus", nats_server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert (printed["transport"], printed["server"]) == ("nats", nats_server.url), printed


async def test_leaving_a_group_mid_traffic_loses_no_request(nats_client: Connect) -> None:
    # Requests NATS already sent to a consumer that leaves go back to the bus: to the other
    # consumer while there is one, then "no responders" (passed on to the caller), never lost.
    caller = await nats_client()

    async def serve(client: Client, group: Subscription) -> None:
        async for request in group:
            await client.send(request.ack({}))

    async def race(
        group: str, leaver: Client, others: list[Client]
    ) -> list[Message | BaseException]:
        subscription = await leaver.consume(group)
        tasks = [asyncio.create_task(serve(leaver, subscription))]
        tasks += [asyncio.create_task(serve(c, await c.consume(group))) for c in others]
        calls = [asyncio.create_task(caller.request(group, "x", timeout=WAIT)) for _ in range(150)]
        await asyncio.sleep(0)  # the requests are on their way
        await asyncio.wait_for(subscription.unsubscribe(), WAIT)
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT + 1)
        for task in tasks:
            task.cancel()
        return results

    shared = await race("shared", await nats_client(), [await nats_client()])
    assert all(isinstance(result, Message) for result in shared), shared[:3]
    lonely = await race("lonely", await nats_client(), [])
    assert all(isinstance(result, Message | NoRespondersError) for result in lonely), lonely[:3]


async def test_a_request_sent_as_the_last_consumer_leaves_is_never_lost(
    nats_server: NatsServer, nats_client: Connect
) -> None:
    # nats-py's drain() wrote its PING ahead of its UNSUB: the server answered the PING, nats-py
    # forgot the subscription, and a request the server routed to it before the UNSUB arrived
    # was dropped in silence; its caller waited out its timeout (CI: 1 request in 100, once).
    # The leaver's link holds what it writes after a PING, so that window stays open here.
    relay = await HoldingRelay(nats_server.port).start()
    leaver = await connect(relay.url)
    try:
        caller = await nats_client()
        group = await leaver.consume("leaving")
        delivered = relay.watch("bus.grp.leaving")
        relay.hold_after_ping()
        leaving = asyncio.create_task(group.unsubscribe())
        await asyncio.wait_for(relay.wait_pings(2), WAIT)  # the first one was answered
        request = asyncio.create_task(caller.request("leaving", "x", timeout=WAIT))
        # ... and sent on to the leaver (before the fix), or answered "no responders"
        seen = asyncio.create_task(delivered.wait())
        await asyncio.wait([request, seen], timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
        seen.cancel()
        relay.release()
        await asyncio.wait_for(leaving, WAIT)
        # the server had the UNSUB before the PING: nobody consumes, NATS says so at once
        with pytest.raises(NoRespondersError):
            await request
    finally:
        await leaver.close()
        await relay.close()


async def test_nats_credentials_come_from_the_name_and_secret_or_the_url() -> None:
    server = NatsServer(0, "--user", "alice", "--pass", "pw").start()
    try:
        with pytest.raises(AuthError):
            await connect(server.url, "alice", "wrong", connect_timeout=2.0)
        for client in (
            await connect(server.url, "alice", "pw"),
            await connect(f"nats://alice:pw@127.0.0.1:{server.port}"),
        ):
            assert client.name == "alice"
            await client.close()
    finally:
        server.stop()


async def test_a_subject_prefix_keeps_two_buses_apart_on_one_server(
    nats_server: NatsServer,
) -> None:
    first = await connect(f"{nats_server.url}?prefix=first")
    second = await connect(f"{nats_server.url}?prefix=second")
    try:
        events = await first.subscribe(">")
        async with asyncio.timeout(WAIT):
            consumer = await first.consume("shared")
            with pytest.raises(NoRespondersError):  # the consumer is on the other bus
                await second.request("shared", "echo", timeout=WAIT)
            await second.publish("only.second", {})
            await first.publish("only.first", {})
            assert (await events.get(WAIT)).grp == "only.first"
            assert consumer.pending() == 0
    finally:
        await first.close()
        await second.close()
    with pytest.raises(ConfigError):
        await connect(f"{nats_server.url}?prefix=a.b")


async def test_an_unreachable_nats_server_is_a_connect_error() -> None:
    with pytest.raises(ConnectError):
        await connect(f"nats://127.0.0.1:{free_tcp_port()}", connect_timeout=1.0)


# --- the busgate client commands on NATS --------------------------------------------------------


async def _busgate(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *BUSGATE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_every_busgate_client_command_works_on_nats(
    nats_server: NatsServer, nats_client: Connect
) -> None:
    url = nats_server.url
    service = await nats_client("bob")
    demo = create_demo_service(service)
    await demo.start()
    try:
        code, out, err = await _busgate("request", "demo", "echo", "x=1", "--bus", url)
        assert (code, json.loads(out)) == (0, {"x": 1}), err
        code, out, err = await _busgate("request", "nobody", "echo", "--bus", url)
        assert code == 1 and "no responders" in err and not out
        code, out, err = await _busgate("services", "--bus", url)
        assert code == 0 and out.splitlines()[1].split()[:2] == ["demo", "1"], out + err
        listener = asyncio.create_task(_busgate("listen", "cli.*", "--count", "1", "--bus", url))
        async with asyncio.timeout(WAIT * 3):  # publish until the listener has subscribed
            while not listener.done():
                code, _, err = await _busgate("publish", "cli.one", "n=7", "--bus", url)
                assert code == 0, err
                await asyncio.wait([listener], timeout=0.5)
        code, out, err = listener.result()
        assert code == 0, err
        heard = json.loads(out.splitlines()[0])
        assert (heard["type"], heard["payload"]) == ("cli.one", {"n": 7}), heard
        code, out, err = await _busgate("status", "--bus", url)  # tested above in detail
        assert code == 0 and json.loads(out)["transport"] == "nats", err
    finally:
        await demo.stop()


# --- a NATS restart mid-traffic -----------------------------------------------------------------

TOTAL = 300
KILL_AT = 100
IN_FLIGHT = 8


async def test_a_nats_restart_mid_traffic_is_survived() -> None:
    server = NatsServer().start()
    try:
        await _restart_mid_traffic(server)
    finally:
        server.stop()


async def _restart_mid_traffic(server: NatsServer) -> None:
    async def join(name: str) -> Client:
        return await connect(server.url, name, backoff_initial=0.05, backoff_max=0.3)

    service, requester = await join("bob"), await join("alice")

    async def echo() -> None:
        async for request in await service.consume("work"):
            await service.send(request.ack({"n": request.payload["n"]}))

    serving = asyncio.create_task(echo())
    events = await requester.subscribe("after.*")
    outcomes: Counter[str] = Counter()
    semaphore = asyncio.Semaphore(IN_FLIGHT)

    async def one(n: int) -> None:
        async with semaphore:
            try:
                reply = await requester.request("work", "echo", {"n": n}, timeout=5.0)
            except (DisconnectedError, NoRespondersError, RequestTimeout) as exc:
                outcomes[type(exc).__name__] += 1
                return
            assert reply.payload["n"] == n  # its own answer, never another request's
            outcomes["answered"] += 1

    async def crash() -> None:
        server.kill()
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.restart)

    async with asyncio.timeout(60):
        tasks, crasher = [], None
        for n in range(TOTAL):
            if n == KILL_AT:
                crasher = asyncio.create_task(crash())
            tasks.append(asyncio.create_task(one(n)))
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
        assert crasher is not None
        await crasher
        await requester.wait_connected(WAIT)
        await service.wait_connected(WAIT)
        for n in range(TOTAL, TOTAL + 20):  # everything works again, the consumer included
            await one(n)
        await service.publish("after.restart", {"ok": True})  # and the subscription
        assert (await events.get(WAIT)).grp == "after.restart"

    assert sum(outcomes.values()) == TOTAL + 20  # every request accounted for: none hangs
    assert outcomes["answered"] >= KILL_AT - IN_FLIGHT + 20
    assert outcomes["RequestTimeout"] == 0  # a lost link is said at once, not after a timeout
    assert requester.reconnects >= 1 and service.reconnects >= 1
    serving.cancel()
    await requester.close()
    await service.close()


# --- the journal recorder ------------------------------------------------------------------------


async def test_busgate_journal_record_records_from_nats(
    nats_server: NatsServer, nats_client: Connect, tmp_path: Path
) -> None:
    command = [*BUSGATE, "journal", "record", str(tmp_path)]
    recorder = subprocess.Popen(
        [*command, "--bus", nats_server.url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert recorder.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(recorder.stdout.readline), WAIT)
        assert line.startswith("recording")
        service, caller = await nats_client("bob"), await nats_client("alice")

        group = await service.consume("rec")

        async def echo() -> None:
            async for request in group:
                await service.send(request.ack({"n": request.payload["n"]}))

        serving = asyncio.create_task(echo())
        for n in range(3):
            await caller.request("rec", "echo", {"n": n}, timeout=WAIT)
        await caller.publish("rec.done", {"ok": True})
        await asyncio.sleep(0.3)
        serving.cancel()
    finally:
        recorder.send_signal(signal.SIGTERM)
        recorder.wait(WAIT)
        if recorder.stdout is not None:
            recorder.stdout.close()
    assert recorder.returncode == 0
    messages = [decode_message(record.raw) for record in JournalReader(tmp_path).records()]
    kinds = Counter((message.typ, message.grp) for message in messages)
    assert kinds[("RQS", "rec")] == 3 and kinds[("EVT", "rec.done")] == 1
    assert kinds[("ACK", caller.inbox)] == 3  # the responses too, as the broker journals them


async def test_the_recorder_keeps_to_its_own_bus_on_a_shared_server(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    # Another bus (another prefix) on the same server: its requests, responses and events
    # are none of this journal's business.
    other = f"{nats_server.url}?prefix=other"
    recorder = subprocess.Popen(
        [*BUSGATE, "journal", "record", str(tmp_path), "--bus", nats_server.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    service, caller = await connect(other, "bob"), await connect(other, "alice")
    try:
        assert recorder.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(recorder.stdout.readline), WAIT)
        assert line.startswith("recording")

        group = await service.consume("elsewhere")

        async def echo() -> None:
            async for request in group:
                await service.send(request.ack({"n": request.payload["n"]}))

        serving = asyncio.create_task(echo())
        for n in range(3):
            await caller.request("elsewhere", "echo", {"n": n}, timeout=WAIT)
        await caller.publish("elsewhere.done", {})
        mine = await connect(nats_server.url, "carol")
        await mine.publish("mine.done", {})  # the recorder's own bus: recorded
        await mine.close()
        await asyncio.sleep(0.3)
        serving.cancel()
    finally:
        await service.close()
        await caller.close()
        recorder.send_signal(signal.SIGTERM)
        recorder.wait(WAIT)
        if recorder.stdout is not None:
            recorder.stdout.close()
    messages = [decode_message(record.raw) for record in JournalReader(tmp_path).records()]
    seen = [(message.typ, message.grp) for message in messages]
    assert ("EVT", "mine.done") in seen
    assert not [grp for _, grp in seen if grp and grp.startswith(("elsewhere", caller.inbox))]
