"""Optional OpenTelemetry spans for the gateway and services (``pip install busgate[otel]``).

Nothing happens without the OpenTelemetry SDK, and nothing with it until it is configured:
a tracer provider set by the application (``opentelemetry.trace.set_tracer_provider``), or
``OTEL_EXPORTER_OTLP_ENDPOINT`` in the environment, which makes busgate set one up itself
with an OTLP exporter (``opentelemetry-exporter-otlp``, HTTP or gRPC as
``OTEL_EXPORTER_OTLP_PROTOCOL`` says). Then the gateway opens a server span per request (the
child of the caller's ``traceparent``) and a service one per traced request (the child of the
request's ``TRC``), and the traceparent that goes on names that span: the spans of one call
tree link parent to child whatever process they run in (``docs/PROTOCOL.md`` 5.11).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["active", "configure", "span"]

log = logging.getLogger(__name__)

_api: Any = None  # the opentelemetry.trace module, once imported
_setup_done = False
_provider: Any = None  # set by configure(): used instead of the global tracer provider
_active: bool | None = None  # decided at the first use (every request asks: keep it cheap)


def _load() -> Any:
    global _api, _setup_done
    if _setup_done:
        return _api
    _setup_done = True
    try:
        from opentelemetry import trace as api  # noqa: PLC0415  (optional dependency)
    except ImportError:
        return None
    _api = api
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") and not _configured(api):
        _setup_otlp(api)
    return api


def _configured(api: Any) -> bool:
    # Until the application sets one, the API hands out a proxy whose spans record nothing.
    return type(api.get_tracer_provider()).__name__ not in (
        "ProxyTracerProvider",
        "NoOpTracerProvider",
    )


def _setup_otlp(api: Any) -> None:
    try:
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

        grpc = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").startswith("grpc")
        wire = "grpc" if grpc else "http"
        exporters = importlib.import_module(
            f"opentelemetry.exporter.otlp.proto.{wire}.trace_exporter"
        )
    except ImportError as exc:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but %s: no spans are exported", exc)
        return
    name = os.environ.get("OTEL_SERVICE_NAME", "busgate")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporters.OTLPSpanExporter()))
    api.set_tracer_provider(provider)


def configure(provider: Any | None) -> None:
    """Use this tracer provider (an SDK ``TracerProvider``) rather than the global one; None:
    back to the global one. For an application that keeps its own provider, and for tests."""
    global _provider, _active
    _provider = provider
    _active = None


def active() -> bool:
    """True when spans are recorded: the SDK is installed and a tracer provider is set (by
    :func:`configure`, or globally before the first request this process handles)."""
    global _active
    if _active is None:
        api = _load()
        _active = _provider is not None or (api is not None and _configured(api))
    return _active


@contextmanager
def span(name: str, parent: str | None, *, server: bool = True) -> Iterator[str | None]:
    """A span around the block, the child of ``parent`` (a traceparent; None: a new trace).

    Yields:
        The traceparent naming the span (what goes on to the next hop), or None when spans
        are off (then the caller makes its own, :func:`bus.message.trace.child`).
    """
    if not active():
        yield None
        return
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    api = _api
    context = TraceContextTextMapPropagator().extract({"traceparent": parent}) if parent else None
    kind = api.SpanKind.SERVER if server else api.SpanKind.CLIENT
    provider = _provider if _provider is not None else api.get_tracer_provider()
    tracer = provider.get_tracer("busgate")
    with tracer.start_as_current_span(name, context=context, kind=kind) as current:
        ids = current.get_span_context()
        yield f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{int(ids.trace_flags):02x}"
