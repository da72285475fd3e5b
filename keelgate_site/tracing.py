"""The site's OpenTelemetry SDK: the engine's spans exported by OTLP, and timed for Prometheus.

Configured once per process (``KeelgateSiteConfig.ready``: Daphne, the worker, every
command) from the standard variables: ``OTEL_SDK_DISABLED``, ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_EXPORTER`` (``otlp``,
``console`` or ``none``) and ``OTEL_EXPORTER_OTLP_*`` (endpoint, headers, protocol
http/protobuf). Spans are exported only when asked: ``OTEL_TRACES_EXPORTER`` names
``otlp`` or an OTLP endpoint is set, so a laptop without a collector sends nothing.

The provider is installed either way, because the step and tool-call latency
histograms (``sitekit.metrics``) are timed from the engine's spans as they end: one
place measures both. A sampler that drops spans (``OTEL_TRACES_SAMPLER=traceidratio``)
thins those histograms too; the default, parent-based always-on, keeps every span.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from keelgate.tracing import TRACER_NAME
from sitekit import metrics

_configured: TracerProvider | None = None


class LatencyMetrics(SpanProcessor):
    """Observes each ended engine span's duration in the step or tool-call histogram."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is None or scope.name != TRACER_NAME or span.start_time is None or span.end_time is None:
            return
        seconds = (span.end_time - span.start_time) / 1e9
        attributes = span.attributes or {}
        if span.name == "keelgate.tool_call":
            metrics.TOOL_CALL_SECONDS.labels(
                str(attributes.get("keelgate.tool", "")),
                str(attributes.get("keelgate.side_effect", "")),
                str(attributes.get("keelgate.status", "error")),
            ).observe(seconds)
        elif span.name in ("keelgate.plan", "keelgate.verify", "keelgate.run"):
            metrics.STEP_SECONDS.labels(span.name.removeprefix("keelgate.")).observe(seconds)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _exporters() -> list[str]:
    named = os.environ.get("OTEL_TRACES_EXPORTER", "")
    if named:
        return [n.strip() for n in named.split(",") if n.strip() and n.strip() != "none"]
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return ["otlp"] if endpoint else []


def configure_tracing() -> TracerProvider | None:
    """Install the SDK provider once (or join one already installed); None if the SDK is disabled."""
    global _configured
    if _configured is not None:
        return _configured
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        provider = current  # a host (a distro, a test) installed one first: add to it
    else:
        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "keelgate"}
        provider = TracerProvider(resource=Resource.create(attributes))
        trace.set_tracer_provider(provider)
    provider.add_span_processor(LatencyMetrics())
    for name in _exporters():
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    _configured = provider
    return provider
