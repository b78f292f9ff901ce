"""The broker's monitoring port: ``GET /metrics`` in the Prometheus exposition format.

Off unless asked for (``busgate broker --metrics-port N``, ``BUSGATE_METRICS_PORT``,
``metricsPort``; ``busgate run --metrics-port N``), like nats-server's monitoring port (``-m``).
It listens on the broker's host. Endpoints: ``/metrics`` (text 0.0.4, or OpenMetrics when the
scraper asks), ``/healthz`` (``ok``), ``/`` (a line naming the others); anything else is 404,
any method but ``GET``/``HEAD`` 405.

:class:`BrokerCollector` reads, at scrape time, what the broker already keeps: its ``stats``
counters, its links and queues, its router and its journal. Nothing is counted twice and the
routing path does no extra work. Exported (``busgate_broker_`` prefix):

- ``links`` (gauge): open links, authenticated or not; ``max_connections`` (gauge).
- ``offices``, ``groups``, ``subscriptions`` (gauges): post offices connected, groups with a
  consumer, subscription patterns held.
- ``messages_routed_total``: messages the broker routed (management commands not included).
- ``messages_dropped_total{reason}``: ``no_route`` (an event nobody subscribes to, mail to an
  unknown post office, a message for a group with no consumer, an answer that cannot be routed),
  ``no_responders`` (a request to a group with no consumer: answered NAK 503),
  ``consumer_lost`` (requests discarded with an evicted or lost consumer: answered NAK 503).
- ``slow_consumer_evictions_total``: links evicted because their output queue overflowed.
- ``queued_bytes`` (gauge): output waiting in user-space queues over all links.
- ``auth_failures_total``: connects refused for a wrong secret; ``refused_connections_total``:
  sockets refused (the broker full, or an address with too many failed logins).
- ``received_bytes_total``, ``sent_bytes_total``.
- ``journal_appends_total``, ``journal_skipped_total`` (left out by the filter),
  ``journal_fsyncs_total``, ``journal_errors_total`` (absent without a journal but errors).
- any other counter of ``Broker.stats`` as ``<name>_total``, so a new one is never missed;
- ``process_*`` and ``python_*`` from ``prometheus_client``'s own collectors.

The HTTP side is a thin asyncio driver around h11 (sans-I/O HTTP/1.1): keep-alive, a bounded
request head (16 KiB), a header/idle timeout (10 s) and a bounded number of connections (64).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

import h11
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bus.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from bus.broker.server import Broker

__all__ = ["PREFIX", "BrokerCollector", "MetricsServer", "broker_registry", "start_metrics"]

log = logging.getLogger("bus.broker.metrics")

PREFIX: Final = "busgate_broker_"
#: Largest request head (request line and headers) the monitoring port reads.
MAX_HEAD: Final = 16 * 1024
#: Seconds a connection may take to send a request head, or stay idle between requests.
TIMEOUT: Final = 10.0
#: Connections served at once; more are closed at once.
MAX_CONNECTIONS: Final = 64

#: ``Broker.stats`` counters with their own metric; every other one is exported as it is named.
_COUNTERS: Final = {
    "routed": ("messages_routed", "Messages routed (management commands not included)."),
    "slow_consumers": ("slow_consumer_evictions", "Links evicted as slow consumers."),
    "refused_auth": ("auth_failures", "Connects refused for a wrong secret."),
    "refused_connections": (
        "refused_connections",
        "Sockets refused: the broker full, or an address with too many failed logins.",
    ),
    "refused_system": (
        "refused_system_events",
        "Events on the system's OAM.* / _INBOX.* types refused (not heartbeats or probes).",
    ),
    "journal_errors": ("journal_errors", "Journal appends that failed."),
    "duplicates": (
        "duplicate_publishes",
        "Confirmed publishes sent again (same MID) and answered without journaling them twice.",
    ),
    "replayed": (
        "replayed_events",
        "Events sent again from the journal to subscribers that resume (PROTOCOL.md 5.14).",
    ),
    "bytes_in": ("received_bytes", "Bytes received from all links."),
    "bytes_out": ("sent_bytes", "Bytes written or queued to all links."),
}
_DROPPED: Final = {
    "dropped": "no_route",
    "no_responders": "no_responders",
    "failed_requests": "consumer_lost",
}


class BrokerCollector(Collector):
    """The broker's figures, read from the running broker at every scrape.

    Args:
        broker: the broker to read.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterable[Metric]:
        broker = self.broker
        stats = dict(broker.stats)
        yield _gauge("links", "Open links, authenticated or not.", broker.link_count)
        yield _gauge("max_connections", "The link limit.", broker.config.max_connections)
        yield _gauge("offices", "Post offices connected.", len(broker.router.offices()))
        yield _gauge("groups", "Groups with at least one consumer.", len(broker.router.groups()))
        yield _gauge(
            "subscriptions", "Subscription patterns held.", broker.router.subscription_count()
        )
        yield _gauge("queued_bytes", "Output waiting in user-space queues.", broker.queued_bytes())
        dropped = CounterMetricFamily(
            f"{PREFIX}messages_dropped", "Messages not delivered, by reason.", labels=["reason"]
        )
        for key, reason in _DROPPED.items():
            dropped.add_metric([reason], stats.pop(key, 0))
        yield dropped
        for key, (name, text) in _COUNTERS.items():
            yield CounterMetricFamily(f"{PREFIX}{name}", text, value=stats.pop(key, 0))
        for key, value in sorted(stats.items()):  # counters added after this module
            yield CounterMetricFamily(f"{PREFIX}{key}", f"Broker counter {key}.", value=value)
        yield from self._journal()

    def _journal(self) -> Iterable[Metric]:
        journal = self.broker.journal
        if journal is None:
            return
        for name, attribute, text in (
            ("journal_appends", "appended", "Records appended to the journal."),
            ("journal_skipped", "skipped", "Messages the journal's filter left out."),
            ("journal_fsyncs", "fsyncs", "fsync calls on the journal's segments."),
        ):
            value = getattr(journal, attribute, None)
            if isinstance(value, int):
                yield CounterMetricFamily(f"{PREFIX}{name}", text, value=value)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}{name}", text, value=value)


def broker_registry(broker: Broker) -> CollectorRegistry:
    """A registry with the broker's collector and ``prometheus_client``'s process collectors."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class MetricsServer:
    """The monitoring port: an asyncio server speaking HTTP/1.1 through h11.

    Args:
        registry: what ``/metrics`` renders.
        host: address to listen on.
        port: TCP port (0: any free port, see :attr:`port`).
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.requested_port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port listened on."""
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen.

        Raises:
            ConfigError: the port cannot be bound (in use, not permitted).
        """
        try:
            self._server = await asyncio.start_server(self._accept, self.host, self.requested_port)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen for metrics on {self.host}:{self.requested_port}: {exc.strerror}"
            ) from exc

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._tasks) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._tasks.add(task)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            await self._serve(conn, reader, writer)
        except h11.RemoteProtocolError as exc:  # not HTTP, or a head over MAX_HEAD: 400/431
            with contextlib.suppress(h11.ProtocolError, ConnectionError):
                writer.write(_refusal(conn, exc.error_status_hint, str(exc)))
                await writer.drain()
        except (ConnectionError, TimeoutError):
            pass  # a peer that went away or stalled: nothing to report
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            request = await _next_request(conn, reader)
            if request is None:
                return
            status, content_type, body = self._answer(request)
            headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
            if status == 405:
                headers.append(("Allow", "GET, HEAD"))
            data = conn.send(_response(status, headers)) or b""
            if request.method != b"HEAD":
                data += conn.send(h11.Data(data=body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
            writer.write(data)
            await writer.drain()
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:  # the request body was not read to its end
                return

    def _answer(self, request: h11.Request) -> tuple[int, str, bytes]:
        text = "text/plain; charset=utf-8"
        path = request.target.split(b"?", 1)[0]
        if request.method not in (b"GET", b"HEAD"):
            return 405, text, b"method not allowed: GET or HEAD\n"
        if path == b"/metrics":
            accept = ""
            for name, value in request.headers:
                if name == b"accept":
                    accept = value.decode("latin-1")
            encode, content_type = choose_encoder(accept)
            return 200, content_type, encode(self.registry)
        if path == b"/healthz":
            return 200, text, b"ok\n"
        if path == b"/":
            return 200, text, b"busgate broker monitoring: /metrics (Prometheus), /healthz\n"
        return 404, text, b"not found: try /metrics\n"


def _response(status: int, headers: list[tuple[str, str]]) -> h11.Response:
    return h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)


def _refusal(conn: h11.Connection, status: int, reason: str) -> bytes:
    body = f"bad request: {reason}\n".encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    headers.append(("Connection", "close"))
    data = conn.send(_response(status, headers)) or b""
    data += conn.send(h11.Data(data=body)) or b""
    return data + (conn.send(h11.EndOfMessage()) or b"")


async def _next_request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The next complete request (its body read and dropped); None once the peer is done."""
    request: h11.Request | None = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            async with asyncio.timeout(TIMEOUT):
                data = await reader.read(64 * 1024)
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def start_metrics(broker: Broker, port: int, host: str | None = None) -> MetricsServer:
    """Start the monitoring port of a running broker.

    Args:
        broker: the broker to expose.
        port: TCP port (0: any free port).
        host: address to listen on (default: the broker's).

    Returns:
        The server; ``await server.stop()`` stops it.

    Raises:
        ConfigError: the port cannot be bound.
    """
    server = MetricsServer(broker_registry(broker), host or broker.config.host, port)
    await server.start()
    log.info("broker metrics on http://%s:%d/metrics", server.host, server.port)
    return server
