"""The bus itself next to NATS: busgate broker + bus.client against nats-server + nats-py.

Same run, same patterns, same payload bytes, every party its own process (``bench/drivers.py``):

- request/reply: a responder process (busgate: a :class:`~bus.asyncio.service.Service` with an echo
  command; NATS: a nats-py queue subscriber that responds) and a requester process, one
  request at a time and with 64 in flight;
- publish -> subscribe: a publisher process sends 100,000 events as fast as its library lets
  it, a subscriber process counts them; the rate is the subscriber's, first to last event, and
  every event must arrive (the broker and nats-server get room for the whole burst).

Columns: ``busgate`` (busgate broker, bus.client), ``alt`` (nats-server, bare nats-py), and
for reference ``bus on nats`` (bus.client on nats-server: our NATS transport). The ratio is
busgate / alt. CPU per operation is given for each process; no process is pinned.

Then confirmed publishes (PROTOCOL.md 5.12): a busgate broker journaling under each fsync policy
(``always``, ``interval``, ``none``), ``publish(confirm=True)`` one at a time and 64 in flight,
next to plain publishes + ``flush()`` on the same broker; the alternative is nats-server with
JetStream (a file stream; ``js.publish`` waits for the stream's ack; its own fsync policy is
``sync_interval``, 2 min by default, so it compares with ``interval``/``none``), and
``publish(confirm=True)`` of bus.client on that nats-server (our transport through the
``BUSGATE`` stream, PROTOCOL.md 10.1).

Then durable subscriptions, journaled: a busgate broker with ``--journal`` (fsync ``interval``,
its default) next to nats-server with JetStream (a file stream). First a durable subscriber
(``subscribe(resume=True)``; a durable push consumer with ``AckPolicy.NONE``, as busgate's client
keeps its own position) while a publisher sends 100,000 events (first publish to last delivery),
then a new one that catches up on all of them from the start (``since=0``;
``DeliverPolicy.ALL``), from its subscribe call to its last event.

Then request/reply over TLS (a CA and certificates made for the run): a second busgate broker
with ``--tls-cert`` reached over ``bus+tls://``, next to nats-server with a ``tls`` block
reached over ``tls://``, each next to its plain figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

from bench._common import (
    BUSGATE,
    HERE,
    NATS_SERVER,
    Proc,
    cpu_seconds,
    free_port,
    placement,
    run_file,
    started,
)

__all__ = ["main"]

SECONDS: Final = float(os.environ.get("BENCH_SECONDS", "3"))
IN_FLIGHT: Final = 64
EVENTS: Final = int(os.environ.get("BENCH_EVENTS", "100000"))


def _driver(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.drivers", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    if '"ready"' not in line:
        process.kill()
        raise RuntimeError(f"a driver did not start: {line!r}")


def _result(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, _ = process.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"a driver failed (status {process.returncode}): {out[-500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _requests(kind: str, url: str, server: Proc) -> dict[str, Any]:
    responder = _driver("responder", kind, url)
    try:
        _ready(responder)
        before = (server.cpu(), cpu_seconds(responder.pid))
        requester = _driver("requester", kind, url, "--seconds", str(SECONDS),
                            "--in-flight", str(IN_FLIGHT))  # fmt: skip
        _, _, usage = os.wait4(requester.pid, 0)
        requester.returncode = 0
        assert requester.stdout is not None
        result: dict[str, Any] = json.loads(requester.stdout.read().strip().splitlines()[-1])
        trips = result["calls"]
        result["cpu"] = {
            "server": (server.cpu() - before[0]) / trips * 1e6,
            "responder": (cpu_seconds(responder.pid) - before[1]) / trips * 1e6,
            "requester": (usage.ru_utime + usage.ru_stime) / trips * 1e6,
        }
        return result
    finally:
        responder.kill()
        responder.wait(10)


def _events(kind: str, url: str, server: Proc) -> dict[str, Any]:
    subscriber = _driver("subscriber", kind, url, "--count", str(EVENTS))
    _ready(subscriber)
    before = server.cpu()
    publisher = _driver("publisher", kind, url, "--count", str(EVENTS))
    published = _result(publisher, 300)
    sub_cpu = cpu_seconds(subscriber.pid)
    received = _result(subscriber, 300)
    if received["received"] != EVENTS or received["dropped"]:
        raise RuntimeError(f"{kind}: the subscriber lost events: {received}")
    return {
        # first publish to last delivery: what a user waits for (the subscriber's own rate
        # flatters a side whose publisher buffers everything and writes it at the end)
        "rate": EVENTS / max(received["last_at"] - published["started_at"], 1e-9),
        "subscriber_rate": received["rate"],
        "publish_rate": published["rate"],
        "cpu": {
            "server": (server.cpu() - before) / EVENTS * 1e6,
            "subscriber": sub_cpu / EVENTS * 1e6,
        },
    }


def _confirms(stack: ExitStack, tmp: Path) -> None:
    """Confirmed publish throughput under each fsync policy, and JetStream's, printed."""
    rows: list[tuple[str, dict[str, Any], Proc]] = []
    for policy in ("always", "interval", "none"):
        port = free_port()
        journal = tmp / f"journal-{policy}"
        broker = stack.enter_context(started(
            f"broker {policy}", [BUSGATE, "broker", "--open", "--port", str(port), "--log-level",
                                 "WARNING", "--journal", str(journal), "--journal-fsync", policy],
            port=port,
        ))  # fmt: skip
        rows.append(
            (
                f"busgate, fsync {policy}",
                _confirmed(f"bus://127.0.0.1:{port}", "bus", broker),
                broker,
            )
        )
    port = free_port()
    nats_server = stack.enter_context(started(
        "nats-server js", [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd",
                           str(tmp / "jetstream")], port=port,
    ))  # fmt: skip
    rows.append(
        (
            "busgate on nats:// JetStream",
            _confirmed(f"nats://127.0.0.1:{port}", "bus", nats_server),
            nats_server,
        )
    )
    rows.append(
        (
            "alt: nats-server JetStream",
            _confirmed(f"nats://127.0.0.1:{port}", "nats", nats_server),
            nats_server,
        )
    )
    in_flight = f"{IN_FLIGHT} in flight"
    print(f"{'publish, confirmed (events/s)':34} {'one at a time':>14} {in_flight:>12} "
          f"{'unconfirmed':>12} {'CPU us/confirm, server':>23}")  # fmt: skip
    for label, figure, _ in rows:
        print(f"  {label:32} {figure['sequential']:14,.0f} {figure['parallel']:12,.0f} "
              f"{figure['plain']:12,.0f} {figure['cpu']:23.1f}")  # fmt: skip
    print("  (unconfirmed: plain publishes then flush(), the same server; busgate on nats://: "
          "the BUSGATE stream, 10.1; alt: a file stream, js.publish; same run)")  # fmt: skip


def _durables(stack: ExitStack, tmp: Path) -> None:
    """Durable delivery, journaled: live and catching up from the start, printed."""
    port, nats_port = free_port(), free_port()
    broker = stack.enter_context(started(
        "broker journal", [BUSGATE, "broker", "--open", "--port", str(port), "--log-level",
                           "WARNING", "--journal", str(tmp / "journal-durable")], port=port,
    ))  # fmt: skip
    nats_server = stack.enter_context(started(
        "nats-server js durable", [NATS_SERVER, "-a", "127.0.0.1", "-p", str(nats_port), "-js",
                                   "-sd", str(tmp / "jetstream-durable")], port=nats_port,
    ))  # fmt: skip
    sides = {
        "busgate": ("bus", f"bus://127.0.0.1:{port}", broker),
        "alt": ("nats", f"nats://127.0.0.1:{nats_port}", nats_server),
    }
    figures = {name: _durable(kind, url, server) for name, (kind, url, server) in sides.items()}
    print(f"{'durable subscription, journaled (events/s)':52} {'busgate':>9} {'alt':>9} "
          f"{'ratio':>6}   CPU us per event: server, subscriber")  # fmt: skip
    for label, key in (("live: first publish to last delivery", "live"),
                       (f"catch-up: {EVENTS:,} from the start", "replay")):  # fmt: skip
        ours, alt = figures["busgate"][key], figures["alt"][key]
        cpu = "; ".join(
            f"{name} {figure[key]['cpu']['server']:.1f}, {figure[key]['cpu']['subscriber']:.1f}"
            for name, figure in figures.items()
        )
        print(f"  {label:50} {ours['rate']:9,.0f} {alt['rate']:9,.0f} "
              f"{ours['rate'] / alt['rate']:6.2f}   {cpu}")  # fmt: skip
    print("  (busgate: broker --journal, fsync interval, its default; subscribe(resume=True),"
          " then since=0;")  # fmt: skip
    print("   alt: nats-server JetStream, a file stream; durable push consumers, AckPolicy.NONE,"
          " deliver new, then all)")  # fmt: skip


def _durable(kind: str, url: str, server: Proc) -> dict[str, dict[str, Any]]:
    """A durable subscriber while a publisher runs, then a new one from the start."""
    figures: dict[str, dict[str, Any]] = {}
    for phase in ("live", "replay"):
        before = server.cpu()
        subscriber = _driver("durable", kind, url, "--count", str(EVENTS),
                             *(["--from-start"] if phase == "replay" else []))  # fmt: skip
        _ready(subscriber)
        started_at = None
        if phase == "live":
            publisher = _driver("publisher", kind, url, "--count", str(EVENTS))
            started_at = _result(publisher, 300)["started_at"]
        received = _result(subscriber, 300)
        if received["received"] != EVENTS or received["dropped"]:
            raise RuntimeError(f"{kind}: the durable subscriber lost events: {received}")
        began = received["subscribed_at"] if started_at is None else started_at
        figures[phase] = {
            "rate": EVENTS / max(received["last_at"] - began, 1e-9),
            "cpu": {
                "server": (server.cpu() - before) / EVENTS * 1e6,
                "subscriber": received["cpu"] / EVENTS * 1e6,
            },
        }
    return figures


def _confirmed(url: str, kind: str, server: Proc) -> dict[str, Any]:
    before = server.cpu()
    confirmer = _driver("confirmer", kind, url, "--seconds", str(SECONDS),
                        "--in-flight", str(IN_FLIGHT))  # fmt: skip
    result = _result(confirmer, 300)
    confirms = (result["sequential"] + result["parallel"]) * SECONDS
    result["cpu"] = (server.cpu() - before) / max(confirms, 1) * 1e6
    return result


def _restore_environment(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _tls_servers(stack: ExitStack, tmp: Path) -> dict[str, tuple[str, str, Proc]]:
    """A TLS busgate broker and a TLS nats-server, with a CA the drivers trust."""
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    ca_file, cert, key = tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    # bus.client reads BUSGATE_BUS_TLS_CA; nats-py's default context reads SSL_CERT_FILE. Both
    # are put back when the TLS rows are done: the CA file goes with its directory, and every
    # later SSL context (httpx's, in the next benchmark) would fail to load it.
    trust = {"BUSGATE_BUS_TLS_CA": str(ca_file), "SSL_CERT_FILE": str(ca_file)}
    saved = {name: os.environ.get(name) for name in trust}
    os.environ.update(trust)
    stack.callback(_restore_environment, saved)
    broker_port, nats_port = free_port(), free_port()
    broker = stack.enter_context(started(
        "broker tls", [BUSGATE, "broker", "--open", "--port", str(broker_port), "--log-level",
                       "WARNING", "--tls-cert", str(cert), "--tls-key", str(key)],
        port=broker_port,
    ))  # fmt: skip
    config = tmp / "nats-tls.conf"
    config.write_text(
        f'listen: 127.0.0.1:{nats_port}\ntls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
    )
    nats_server = stack.enter_context(
        started("nats-server tls", [NATS_SERVER, "-c", str(config)], port=nats_port)
    )
    return {
        "busgate": ("bus", f"bus+tls://127.0.0.1:{broker_port}", broker),
        "alt": ("nats", f"tls://127.0.0.1:{nats_port}", nats_server),
    }


def main() -> None:
    """Start the servers, run every pattern on every side, print the table."""
    with ExitStack() as stack:
        broker_port, nats_port = free_port(), free_port()
        broker = stack.enter_context(started(
            "broker", [BUSGATE, "broker", "--open", "--port", str(broker_port), "--log-level",
                       "WARNING", "--max-queue-bytes", str(512 * 1024 * 1024)], port=broker_port,
        ))  # fmt: skip
        config = run_file("nats.conf")
        # Room for the whole burst, as the broker gets: no slow-consumer cut on either side.
        config.write_text(f"listen: 127.0.0.1:{nats_port}\nmax_pending: {512 * 1024 * 1024}\n")
        nats_server = stack.enter_context(
            started("nats-server", [NATS_SERVER, "-c", str(config)], port=nats_port)
        )
        sides = {
            "busgate": ("bus", f"bus://127.0.0.1:{broker_port}", broker),
            "alt": ("nats", f"nats://127.0.0.1:{nats_port}", nats_server),
            "bus on nats": ("bus", f"nats://127.0.0.1:{nats_port}", nats_server),
        }
        figures: dict[str, dict[str, Any]] = {}
        for name, (kind, url, server) in sides.items():
            figures[name] = {"requests": _requests(kind, url, server),
                             "events": _events(kind, url, server)}  # fmt: skip
        print(f"placement: {placement([broker, nats_server])}; drivers float too")
        rows = [
            ("request/reply, sequential (round trips/s)", "requests", "sequential"),
            (f"request/reply, {IN_FLIGHT} in flight (round trips/s)", "requests", "parallel"),
            ("publish -> subscribe (events/s, first sent to last in)", "events", "rate"),
        ]
        print(f"{'pattern':52} {'busgate':>9} {'alt':>9} {'ratio':>6} {'bus on nats':>12}")
        for label, group, key in rows:
            ours, alt = figures["busgate"][group][key], figures["alt"][group][key]
            print(f"{label:52} {ours:9,.0f} {alt:9,.0f} {ours / alt:6.2f} "
                  f"{figures['bus on nats'][group][key]:12,.0f}")  # fmt: skip
        for name, figure in figures.items():
            cpu_r = ", ".join(f"{k} {v:.1f}" for k, v in figure["requests"]["cpu"].items())
            cpu_e = ", ".join(f"{k} {v:.1f}" for k, v in figure["events"]["cpu"].items())
            print(
                f"  CPU us, {name}: per round trip {cpu_r}; per event {cpu_e} "
                f"(publisher alone: {figure['events']['publish_rate']:,.0f} events/s, subscriber "
                f"from its first event: {figure['events']['subscriber_rate']:,.0f})"
            )
        print("  (busgate: busgate broker + bus.client/Service; alt: nats-server + nats-py;"
              " ratio busgate/alt)")  # fmt: skip
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="busgate-bench-")))
        _confirms(stack, tmp)
        _durables(stack, tmp)
        tls = {name: _requests(kind, url, server)
               for name, (kind, url, server) in _tls_servers(stack, tmp).items()}  # fmt: skip
        print(f"{'request/reply over TLS':52} {'busgate':>9} {'alt':>9} {'ratio':>6} "
              f"{'TLS/plain: busgate':>19} {'alt':>6}")  # fmt: skip
        for label, key in (("sequential (round trips/s)", "sequential"),
                           (f"{IN_FLIGHT} in flight (round trips/s)", "parallel")):  # fmt: skip
            ours, alt = tls["busgate"][key], tls["alt"][key]
            plain_ours, plain_alt = (
                figures["busgate"]["requests"][key],
                figures["alt"]["requests"][key],
            )
            print(f"  {label:50} {ours:9,.0f} {alt:9,.0f} {ours / alt:6.2f} "
                  f"{ours / plain_ours:19.2f} {alt / plain_alt:6.2f}")  # fmt: skip
        for name, figure in tls.items():
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in figure["cpu"].items())
            print(f"  CPU us over TLS, {name}: per round trip {cpu}")


if __name__ == "__main__":
    main()
